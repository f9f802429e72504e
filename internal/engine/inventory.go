package engine

import (
	"context"
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

	"github.com/opkit-dev/opkit/internal/inventory"
)

// pruneInventory deletes the children of old that are not in keep and that
// the custom resource still controls. Objects are read from the API, not
// the cache: their kind may no longer be watched.
func (r *reconciler) pruneInventory(ctx context.Context, cr *unstructured.Unstructured, old, keep []inventory.Ref) error {
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
