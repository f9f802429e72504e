package converge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/inventory"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// converged is what converging a custom resource's children found.
type converged struct {
	keep              []inventory.Ref // the inventory to write
	waiting, notReady []string        // children by id
	requeue           time.Duration   // when to look again; 0 for no need
	failure           error
}

// convergeChildren converges cr's children in order, each live child put
// into vars.Children for the next; listed is the inventory read, whose
// refs of a child that failed or waits are kept.
func (r *reconciler) convergeChildren(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, listed []inventory.Ref) converged {
	var c converged
	for _, child := range r.def.Children {
		res, err := r.convergeChild(ctx, cr, child, vars)
		if err != nil && !errors.Is(err, errRecreating) {
			err = fmt.Errorf("child %s: %w", child.ID, err) // named once, here
		}
		if res.ref != nil {
			c.keep = inventory.Append(c.keep, *res.ref)
		}
		if err != nil || res.waiting {
			// What this child rendered to before is unknown now: keep it.
			for _, ref := range listed {
				if ref.ID == child.ID {
					c.keep = inventory.Append(c.keep, ref)
				}
			}
		}
		switch {
		case errors.Is(err, errRecreating):
			c.waiting = append(c.waiting, child.ID) // the Recreating event says why
			c.requeue = time.Second
		case err != nil:
			c.failure = errors.Join(c.failure, err)
			r.events.Eventf(cr, nil, corev1.EventTypeWarning, "ChildFailed", "Reconcile", "%v", err)
		case res.waiting:
			c.waiting = append(c.waiting, child.ID)
		case res.live != nil:
			vars.Children[child.ID] = res.live.Object
			if ready, err := child.Ready(res.live.Object); err != nil || !ready {
				c.notReady = append(c.notReady, child.ID)
			}
		}
	}
	return c
}

// childResult is what converging one child found.
type childResult struct {
	// live is the object as it now is; nil when it is not known.
	live *unstructured.Unstructured
	// ref is what the child rendered to; nil when it was not rendered.
	ref *inventory.Ref
	// waiting: the child reads another child that does not exist yet.
	waiting bool
}

// convergeChild renders one child and applies it when the live object
// differs. A child excluded by includeWhen gives an empty result: the
// inventory prunes it.
func (r *reconciler) convergeChild(ctx context.Context, cr *unstructured.Unstructured, child *definition.Child, vars definition.Vars) (childResult, error) {
	obj, err := Desired(r.def.Operator.Name, cr, child, vars, r.scopes.Namespaced) // opkit plan renders with it too
	if errors.Is(err, definition.ErrChildMissing) {
		return childResult{waiting: true}, nil
	}
	if err != nil || obj == nil {
		return childResult{}, err
	}
	if namespaced, _ := r.scopes.Namespaced(child.GVK); namespaced { // known: Desired asked
		if why := outside(r.namespace, obj.GetNamespace()); why != "" {
			return childResult{}, fmt.Errorf("%s %s: %s", child.GVK.Kind, obj.GetName(), why)
		}
	}
	hash := obj.GetAnnotations()[v1alpha1.AppliedHashAnnotation]

	ref := inventory.RefOf(child.ID, obj)
	rendered := childResult{ref: &ref}

	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(child.GVK)
	err = r.client.Get(ctx, client.ObjectKeyFromObject(obj), current)
	switch {
	case err == nil && current.GetAnnotations()[v1alpha1.AppliedHashAnnotation] == hash && compare.Contains(current.Object, obj.Object):
		rendered.live = current
		return rendered, nil // converged: no write
	case err != nil && !apierrors.IsNotFound(err):
		return rendered, err
	}
	existed := err == nil
	if existed && !metav1.IsControlledBy(current, cr) {
		return rendered, fmt.Errorf("%s %s exists and is not controlled by this %s; opkit does not take over objects it did not make", child.GVK.Kind, obj.GetName(), cr.GetKind())
	}
	if existed && child.Recreate && current.GetAnnotations()[v1alpha1.AppliedHashAnnotation] != hash {
		return rendered, r.recreate(ctx, cr, child, current)
	}
	// The write carries the reconcile's trace (not compared: a child
	// converged is not written for it).
	if a := obj.GetAnnotations(); tracing.Annotate(tracing.Ensure(ctx), a) {
		obj.SetAnnotations(a)
	}
	err = r.apply(ctx, obj)
	if existed && Immutable(err) {
		return rendered, r.recreate(ctx, cr, child, current)
	}
	if err != nil {
		return rendered, fmt.Errorf("applying %s %s: %w", child.GVK.Kind, obj.GetName(), err)
	}
	// A change to an existing child is posted; a creation is not: the
	// inventory and Ready show it, and an Event per child created would be
	// one more API write per object.
	if existed {
		r.events.Eventf(cr, nil, corev1.EventTypeNormal, "Updated", "Apply", "updated %s %s", child.GVK.Kind, obj.GetName())
	}
	rendered.live = obj
	return rendered, nil
}

// apply applies obj with server-side apply, as the engine's field manager,
// taking over conflicting fields. The answer is asked as metadata only:
// the API server encodes it in protobuf without the object's content,
// which costs it and the engine less than the whole object as JSON, and
// the engine reads nothing of it but the error (the applied object is
// obj).
func (r *reconciler) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = r.patch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
	return err
}

// patch patches an object of kind gvk, or its subresource, through the
// metadata client: the answer is the object's metadata.
func (r *reconciler) patch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresource ...string) (*metav1.PartialObjectMetadata, error) {
	k, err := r.scopes.Of(gvk)
	if err != nil {
		return nil, err
	}
	return r.metadata.Resource(k.Resource).Namespace(namespace).Patch(ctx, name, pt, data, opts, subresource...)
}

func (r *reconciler) recreate(ctx context.Context, cr *unstructured.Unstructured, child *definition.Child, current *unstructured.Unstructured) error {
	err := r.client.Delete(ctx, current, client.Preconditions{UID: ptr.To(current.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s to re-create it: %w", child.GVK.Kind, current.GetName(), err)
	}
	r.events.Eventf(cr, nil, corev1.EventTypeNormal, "Recreating", "Delete", "deleted %s %s to re-create it with its new template", child.GVK.Kind, current.GetName())
	return errRecreating
}

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

// Desired is the object a reconcile of cr applies for child, rendered
// with vars: the template, in cr's namespace when namespaced and it names
// none, controlled by cr, labelled with the operator and annotated with
// the hash of what is applied. It is nil when the child's includeWhen
// excludes it (the inventory prunes it); an error wrapping
// definition.ErrChildMissing says it reads a child that does not exist
// yet. namespaced says whether a kind's objects are namespaced, asked
// once the child is rendered. opkit plan renders children with it, so
// that what it shows is what the engine applies.
func Desired(operator string, cr *unstructured.Unstructured, child *definition.Child, vars definition.Vars, namespaced func(schema.GroupVersionKind) (bool, error)) (*unstructured.Unstructured, error) {
	included, err := child.Included(vars)
	if err != nil || !included {
		return nil, err
	}
	desired, err := child.Render(vars)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: desired}
	ns, err := namespaced(child.GVK)
	if err != nil {
		return nil, fmt.Errorf("kind %s is not served: %w", child.GVK, err)
	}
	if ns {
		if cr.GetNamespace() == "" && obj.GetNamespace() == "" {
			return nil, errors.New("a cluster-scoped resource cannot own a namespaced child without a namespace")
		}
		if obj.GetNamespace() == "" {
			obj.SetNamespace(cr.GetNamespace())
		}
	}
	// What SetOwnerReferences writes, without its reflection.
	if md, ok := obj.Object["metadata"].(map[string]any); ok {
		md["ownerReferences"] = []any{map[string]any{
			"apiVersion": cr.GetAPIVersion(), "kind": cr.GetKind(), "name": cr.GetName(), "uid": string(cr.GetUID()),
			"controller": true, "blockOwnerDeletion": true,
		}}
	} else {
		obj.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Name: cr.GetName(), UID: cr.GetUID(),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}})
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[definition.OperatorLabel] = operator
	obj.SetLabels(labels)
	hash := compare.AppliedHash(obj.Object)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1alpha1.AppliedHashAnnotation] = hash
	obj.SetAnnotations(annotations)
	return obj, nil
}

// Immutable reports whether the API refused an apply because it would
// change a field that cannot change: the reconcile then re-creates the
// child.
func Immutable(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "immutable") || strings.Contains(msg, "Forbidden: pod updates may not change")
}
