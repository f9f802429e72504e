package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scopes answers a kind's resource and whether it is namespaced, from the
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
type scopes struct {
	mapper meta.RESTMapper
	known  sync.Map // schema.GroupVersionKind -> kindScope
}

// kindScope is what scopes keeps of a kind.
type kindScope struct {
	resource   schema.GroupVersionResource
	namespaced bool
}

// of returns gvk's resource and scope.
func (s *scopes) of(gvk schema.GroupVersionKind) (kindScope, error) {
	if v, ok := s.known.Load(gvk); ok {
		return v.(kindScope), nil
	}
	mapping, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return kindScope{}, err
	}
	k := kindScope{resource: mapping.Resource, namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace}
	s.known.Store(gvk, k)
	return k, nil
}

// namespaced reports whether gvk is a namespaced kind.
func (s *scopes) namespaced(gvk schema.GroupVersionKind) (bool, error) {
	k, err := s.of(gvk)
	return k.namespaced, err
}
