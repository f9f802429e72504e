package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// childRef names one object a custom resource's reconcile applied. The
// list of them, its inventory, is kept in status.opkit.children: a child no
// longer rendered (removed from the definition, excluded by includeWhen, or
// renamed by its template) is found there and pruned.
type childRef struct {
	ID         string `json:"id"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func refOf(id string, obj *unstructured.Unstructured) childRef {
	return childRef{ID: id, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func (c childRef) String() string {
	if c.Namespace == "" {
		return c.Kind + " " + c.Name
	}
	return c.Kind + " " + c.Namespace + "/" + c.Name
}

// genericInventory returns refs as the status holds them once decoded.
func genericInventory(refs []childRef) []any {
	out := make([]any, len(refs))
	for i, c := range refs {
		m := map[string]any{"id": c.ID, "apiVersion": c.APIVersion, "kind": c.Kind, "name": c.Name}
		if c.Namespace != "" {
			m["namespace"] = c.Namespace
		}
		out[i] = m
	}
	return out
}

// readInventory returns the children recorded in the custom resource's
// status; an unreadable record reads as empty.
func readInventory(cr *unstructured.Unstructured) []childRef {
	raw, _, _ := unstructured.NestedFieldNoCopy(cr.Object, "status", "opkit", "children")
	data, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var refs []childRef
	_ = json.Unmarshal(data, &refs)
	return refs
}

// pruneInventory deletes the children of old that are not in keep and that
// the custom resource still controls. Objects are read from the API, not
// the cache: their kind may no longer be watched.
func (r *reconciler) pruneInventory(ctx context.Context, cr *unstructured.Unstructured, old, keep []childRef) error {
	var errs []error
	for _, ref := range old {
		if slices.Contains(keep, ref) {
			continue
		}
		current := &unstructured.Unstructured{}
		current.SetAPIVersion(ref.APIVersion)
		current.SetKind(ref.Kind)
		err := r.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, current)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue // already gone, or its kind is
		case err != nil:
			errs = append(errs, fmt.Errorf("pruning %s: %w", ref, err))
			continue
		case !metav1.IsControlledBy(current, cr):
			continue // someone else's now
		}
		err = r.client.Delete(ctx, current, client.Preconditions{UID: ptr.To(current.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("pruning %s: %w", ref, err))
			continue
		}
		r.events.Eventf(cr, nil, corev1.EventTypeNormal, "Pruned", "Delete", "deleted %s (child %s): no longer rendered", ref, ref.ID)
	}
	return errors.Join(errs...)
}
