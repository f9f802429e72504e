// Package related indexes the related objects (definition.Related) of
// an operator's custom resources: which custom resources refer to an
// object, by its name or by a selector of its kind and namespace, so that
// a change of a related object reconciles those, never a scan of every
// custom resource.
//
// Contract: each reconcile Sets what its custom resource refers to now,
// replacing what it referred to before; Forget drops a custom resource
// gone; Requests answers, for a changed object, the custom resources to
// reconcile. The index is kept apart from the per-object memory of
// package run: it is looked up by the related object's key, not by the
// custom resource's, and one entry serves every custom resource that
// names the same object.
package related

import (
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Ref is one custom resource's reference: an object by name, or the
// objects a selector matches.
type Ref struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string          // "" for a selector
	Selector  labels.Selector // nil for a name
}

// objectKey names one object of a kind.
type objectKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

// scopeKey is a kind in a namespace.
type scopeKey struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// Index maps related objects to the custom resources that refer to them.
type Index struct {
	// readers are the caches of the kinds read from a cache of the
	// operator's own (SetReader); the others are read with the
	// reconciler's client. Set before the controller starts.
	readers map[schema.GroupVersionKind]client.Reader

	mu     sync.Mutex
	byName map[objectKey]map[types.NamespacedName]bool
	bySel  map[scopeKey]map[types.NamespacedName]labels.Selector
	refsOf map[types.NamespacedName][]Ref
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		byName: map[objectKey]map[types.NamespacedName]bool{},
		bySel:  map[scopeKey]map[types.NamespacedName]labels.Selector{},
		refsOf: map[types.NamespacedName][]Ref{},
	}
}

// Set records what cr refers to now, replacing what it referred to before.
func (x *Index) Set(cr types.NamespacedName, refs []Ref) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.dropLocked(cr)
	for _, ref := range refs {
		if ref.Selector == nil {
			k := objectKey{ref.GVK, ref.Namespace, ref.Name}
			if x.byName[k] == nil {
				x.byName[k] = map[types.NamespacedName]bool{}
			}
			x.byName[k][cr] = true
			continue
		}
		k := scopeKey{ref.GVK, ref.Namespace}
		if x.bySel[k] == nil {
			x.bySel[k] = map[types.NamespacedName]labels.Selector{}
		}
		x.bySel[k][cr] = ref.Selector
	}
	if len(refs) > 0 {
		x.refsOf[cr] = refs
	}
}

// Forget drops a custom resource that is gone.
func (x *Index) Forget(cr types.NamespacedName) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.dropLocked(cr)
}

func (x *Index) dropLocked(cr types.NamespacedName) {
	for _, ref := range x.refsOf[cr] {
		if ref.Selector == nil {
			k := objectKey{ref.GVK, ref.Namespace, ref.Name}
			delete(x.byName[k], cr)
			if len(x.byName[k]) == 0 {
				delete(x.byName, k)
			}
			continue
		}
		k := scopeKey{ref.GVK, ref.Namespace}
		delete(x.bySel[k], cr)
		if len(x.bySel[k]) == 0 {
			delete(x.bySel, k)
		}
	}
	delete(x.refsOf, cr)
}

// Requests are the custom resources that refer to obj, of kind gvk.
func (x *Index) Requests(gvk schema.GroupVersionKind, obj client.Object) []reconcile.Request {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []reconcile.Request
	for cr := range x.byName[objectKey{gvk, obj.GetNamespace(), obj.GetName()}] {
		out = append(out, reconcile.Request{NamespacedName: cr})
	}
	set := labels.Set(obj.GetLabels())
	for cr, sel := range x.bySel[scopeKey{gvk, obj.GetNamespace()}] {
		if sel.Matches(set) {
			out = append(out, reconcile.Request{NamespacedName: cr})
		}
	}
	return out
}

// Reader is what reads the related objects of kind gvk: the operator's
// own cache of the kind, or else shared.
func (x *Index) Reader(gvk schema.GroupVersionKind, shared client.Reader) client.Reader {
	if r, ok := x.readers[gvk]; ok {
		return r
	}
	return shared
}

// SetReader makes the operator's own cache r read the related objects of
// kind gvk. Call before the controller starts.
func (x *Index) SetReader(gvk schema.GroupVersionKind, r client.Reader) {
	if x.readers == nil {
		x.readers = map[schema.GroupVersionKind]client.Reader{}
	}
	x.readers[gvk] = r
}
