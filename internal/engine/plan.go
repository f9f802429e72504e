package engine

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
)

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
// change a field that cannot change: the engine then re-creates the
// child.
func Immutable(err error) bool { return immutable(err) }
