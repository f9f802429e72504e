package informer

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scopes answers a kind's resource and whether it is namespaced, from the
// RESTMapper once per kind and then from memory. A reconcile asks for
// every child and related object, and the RESTMapper's own answer
// (through its priority and multi mappers, under their locks) costs more
// than the rest of a converged child's check.
//
// A kind's resource and scope cannot change while it is served: a CRD's
// names and scope are immutable. Only answers are kept, never errors, so
// a kind not served yet is asked again; a kind deleted and made again
// with another scope is seen when its operator starts again, as every
// reconciler has its own.
type Scopes struct {
	Mapper meta.RESTMapper
	known  sync.Map // schema.GroupVersionKind -> Scope
}

// Scope is what Scopes keeps of a kind.
type Scope struct {
	Resource   schema.GroupVersionResource
	Namespaced bool
}

// Of returns gvk's resource and scope.
func (s *Scopes) Of(gvk schema.GroupVersionKind) (Scope, error) {
	if v, ok := s.known.Load(gvk); ok {
		return v.(Scope), nil
	}
	mapping, err := s.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Scope{}, err
	}
	k := Scope{Resource: mapping.Resource, Namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace}
	s.known.Store(gvk, k)
	return k, nil
}

// Namespaced reports whether gvk is a namespaced kind.
func (s *Scopes) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	k, err := s.Of(gvk)
	return k.Namespaced, err
}
