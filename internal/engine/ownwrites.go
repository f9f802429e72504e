package engine

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// ownWrites gives an operator's reconciles read-your-writes over the
// informer cache (guarantee 11, docs/handlers.md): it keeps, per custom
// resource, the object as the engine's last write to it left it, until
// the cache shows that write or a later one. A reconcile reads its object
// through newest, so a run started by it sees every write opkit made
// before: an earlier run's status patch, a transition, the handlers'
// records, a finalizer, a decision removed. client-go's mutation cache
// does the same for one writer.
//
// Flow: each write to a custom resource records the object it left
// (the API's answer, or the object read with the write applied and the
// answer's resourceVersion); newest returns the recorded object while the
// cached one is older, and drops the record once the cache has caught up.
//
// Assumptions: resourceVersions of one resource are comparable as
// integers, as etcd's revisions are (the API server's own watch cache
// relies on it; an unparsable one is taken as newer than any record, so
// a store that breaks the assumption costs read-your-writes, never
// progress). An object computed locally lacks what another client wrote
// between the engine's read and its write until the cache shows the
// write: a run sees opkit's own writes, not a linearizable object.
//
// Caveats: a record is dropped when its object is gone (forget) or when
// an object of the same name with another uid is read; at steady state
// the memory is empty, as the cache shows every write.
type ownWrites struct {
	mu      sync.Mutex
	objects map[types.NamespacedName]*unstructured.Unstructured
}

func newOwnWrites() *ownWrites {
	return &ownWrites{objects: map[types.NamespacedName]*unstructured.Unstructured{}}
}

// record keeps obj as the engine's newest write to it. obj is the
// caller's no more: record keeps it as it is (callers pass an object
// they do not change afterwards, or a copy). A nil memory records
// nothing: watched objects and calendars are never written.
func (w *ownWrites) record(obj *unstructured.Unstructured) {
	if w == nil || obj == nil {
		return
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	w.mu.Lock()
	defer w.mu.Unlock()
	if last := w.objects[key]; last != nil && last.GetUID() == obj.GetUID() && newerVersion(last.GetResourceVersion(), obj.GetResourceVersion()) {
		return // a write answered after a later one: the later stays
	}
	w.objects[key] = obj
}

// newest returns the newer of cached, as the cache shows it, and the
// engine's last write to that object: a copy of the write while the cache
// does not show it yet, else cached itself.
func (w *ownWrites) newest(cached *unstructured.Unstructured) *unstructured.Unstructured {
	if w == nil {
		return cached
	}
	key := types.NamespacedName{Namespace: cached.GetNamespace(), Name: cached.GetName()}
	w.mu.Lock()
	defer w.mu.Unlock()
	last := w.objects[key]
	if last == nil {
		return cached
	}
	if last.GetUID() == cached.GetUID() && newerVersion(last.GetResourceVersion(), cached.GetResourceVersion()) {
		return last.DeepCopy()
	}
	delete(w.objects, key) // the cache has caught up, or the object was replaced
	return cached
}

// forget drops what is kept of an object that is gone.
func (w *ownWrites) forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.objects, key)
	w.mu.Unlock()
}

// newerVersion reports whether resourceVersion a is newer than b; false
// when either is not a number.
func newerVersion(a, b string) bool {
	x, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		return false
	}
	y, err := strconv.ParseUint(b, 10, 64)
	return err == nil && x > y
}
