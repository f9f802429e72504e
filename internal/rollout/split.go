package rollout

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Split is the reconciler of an operator with two definitions under way:
// each object goes to the reconciler of the one it is on.
type Split[R reconcile.Reconciler] struct {
	mu       sync.RWMutex
	from, to R
	moved    map[types.NamespacedName]bool
}

// NewSplit sends the objects moved to to, the others to from.
func NewSplit[R reconcile.Reconciler](from, to R, moved map[types.NamespacedName]bool) *Split[R] {
	return &Split[R]{from: from, to: to, moved: moved}
}

// Pick returns the reconciler of the object key.
func (s *Split[R]) Pick(key types.NamespacedName) R {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.moved[key] {
		return s.to
	}
	return s.from
}

// Reconcile reconciles the object with its definition's reconciler.
func (s *Split[R]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return s.Pick(req.NamespacedName).Reconcile(ctx, req)
}

// setMoved replaces the objects moved, returning those whose definition
// changed.
func (s *Split[R]) setMoved(moved map[types.NamespacedName]bool) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []types.NamespacedName
	for k := range moved {
		if !s.moved[k] {
			changed = append(changed, k)
		}
	}
	for k := range s.moved {
		if !moved[k] {
			changed = append(changed, k)
		}
	}
	s.moved = moved
	return changed
}

// complete sends the objects made from now on to the new definition too.
func (s *Split[R]) complete() {
	s.mu.Lock()
	s.from = s.to
	s.mu.Unlock()
}

// splitter is the part of a Split the driver moves objects in.
type splitter interface {
	setMoved(map[types.NamespacedName]bool) []types.NamespacedName
	complete()
}
