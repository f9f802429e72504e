package run

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/cause"
)

// Memory is what the engine keeps of one operator's objects between their
// reconciles, and the one place that forgets an object once it is gone
// (Forget): its handler records, its run in flight, the engine's last
// writes to it, what its life cycle keeps (LifeCycle), and what other
// parts of the engine keep of it (Also).
//
// Read-your-writes (guarantee 11, docs/handlers.md): Memory keeps, per
// custom resource, the object as the engine's last write to it left it,
// until the cache shows that write or a later one. A reconcile reads its
// object through Newest, so a run started by it sees every write opkit
// made before: an earlier run's status patch, a transition, the
// handlers' records, a finalizer, a decision removed. client-go's
// mutation cache does the same for one writer.
//
// Flow: each write to a custom resource records the object it left
// (Record: the API's answer, or the object read with the write applied
// and the answer's resourceVersion); Newest returns the recorded object
// while the cached one is older, and drops the record once the cache has
// caught up.
//
// Assumptions: resourceVersions of one resource are comparable as
// integers, as etcd's revisions are (the API server's own watch cache
// relies on it; an unparsable one is taken as newer than any record, so
// a store that breaks the assumption costs read-your-writes, never
// progress). An object computed locally lacks what another client wrote
// between the engine's read and its write until the cache shows the
// write: a run sees opkit's own writes, not a linearizable object.
//
// Caveats: a write is dropped when its object is gone (Forget) or when
// an object of the same name with another uid is read; at steady state
// the memory of writes is empty, as the cache shows every write.
type Memory struct {
	// readOnly: the objects are never written (watched objects,
	// calendars): Record records nothing.
	readOnly bool
	also     []Forgetter

	mu      sync.Mutex
	objects map[types.NamespacedName]*objectState
	writes  map[types.NamespacedName]*unstructured.Unstructured
}

// Forgetter is a part of the engine that keeps something of each object:
// Memory.Forget tells it when the object is gone.
type Forgetter interface {
	Forget(key types.NamespacedName)
}

// NewMemory returns an empty memory; readOnly for objects the engine
// never writes.
func NewMemory(readOnly bool) *Memory {
	return &Memory{
		readOnly: readOnly,
		objects:  map[types.NamespacedName]*objectState{},
		writes:   map[types.NamespacedName]*unstructured.Unstructured{},
	}
}

// Also makes Forget tell f of each object gone. Nil Forgetters are
// skipped. Call before the memory is used.
func (m *Memory) Also(fs ...Forgetter) {
	for _, f := range fs {
		if f != nil {
			m.also = append(m.also, f)
		}
	}
}

// Forget drops everything kept of an object that is gone.
func (m *Memory) Forget(key types.NamespacedName) {
	m.mu.Lock()
	if o := m.objects[key]; o != nil && o.flight != nil {
		o.flight.orphan()
	}
	delete(m.objects, key)
	delete(m.writes, key)
	m.mu.Unlock()
	for _, f := range m.also {
		f.Forget(key)
	}
}

// objectState is what the memory keeps of one object's handlers between
// its reconciles.
type objectState struct {
	uid types.UID
	// written is the handler state the object's last step wrote. The cache
	// may not show that write yet when the object is reconciled again; the
	// state is only ever written by that step, so the memory is the newer,
	// and a scheduled or finished run is not repeated.
	written *cause.State
	// flight is the object's run, from its start until its end is recorded.
	flight *flight
	// For a watched object: persisted is the state as the archive holds
	// it, last the object's JSON as last seen (its delete handlers'
	// object once it is gone; nil without delete handlers).
	// persistedAt is when persisted was stamped (archive
	// HandlerRecord.UpdatedAt): an older record, written later (a run's
	// start, archive.Run.Record), does not replace it.
	persisted   []byte
	last        []byte
	persistedAt time.Time
	// gone: the watch saw the object deleted (LastSeen), and last is its
	// final state.
	gone bool
	// lifeCycle is what the life cycle (package lifecycle) keeps of the
	// object between its reconciles.
	lifeCycle LifeCycle
}

// LifeCycle is what the life cycle of an object (package lifecycle) keeps
// of it between its reconciles.
type LifeCycle struct {
	// Recorded is the status.state.run known to be in the archive: the
	// check that no transition is lost is made once per transition, not
	// per reconcile.
	Recorded string
	// Waits is the DecisionWaits Event last posted: a decision that waits
	// is said once, not at every reconcile.
	Waits string
}

// LifeCycle returns what the life cycle keeps of cr; the zero LifeCycle
// for an object it keeps nothing of, or a nil memory.
func (m *Memory) LifeCycle(cr *unstructured.Unstructured) LifeCycle {
	if m == nil {
		return LifeCycle{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.object(cr).lifeCycle
}

// SetLifeCycle changes what the life cycle keeps of cr with set. A nil
// memory keeps nothing.
func (m *Memory) SetLifeCycle(cr *unstructured.Unstructured, set func(*LifeCycle)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	set(&m.object(cr).lifeCycle)
}

// object returns the record of an object, new if there is none or one
// for an object of the same name that is gone. Call with m.mu held.
func (m *Memory) object(cr *unstructured.Unstructured) *objectState {
	key := types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}
	o := m.objects[key]
	if o == nil || o.uid != cr.GetUID() {
		if o != nil && o.flight != nil {
			o.flight.orphan() // an object of the name before this one
		}
		o = &objectState{uid: cr.GetUID()}
		m.objects[key] = o
	}
	return o
}

// Record keeps obj as the engine's newest write to it. obj is the
// caller's no more: Record keeps it as it is (callers pass an object they
// do not change afterwards, or a copy). A read-only or nil memory records
// nothing.
func (m *Memory) Record(obj *unstructured.Unstructured) {
	if m == nil || m.readOnly || obj == nil {
		return
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	m.mu.Lock()
	defer m.mu.Unlock()
	if last := m.writes[key]; last != nil && last.GetUID() == obj.GetUID() && newerVersion(last.GetResourceVersion(), obj.GetResourceVersion()) {
		return // a write answered after a later one: the later stays
	}
	m.writes[key] = obj
}

// Newest returns the newer of cached, as the cache shows it, and the
// engine's last write to that object: a copy of the write while the cache
// does not show it yet, else cached itself.
func (m *Memory) Newest(cached *unstructured.Unstructured) *unstructured.Unstructured {
	if m == nil {
		return cached
	}
	key := types.NamespacedName{Namespace: cached.GetNamespace(), Name: cached.GetName()}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.writes[key]
	if last == nil {
		return cached
	}
	if last.GetUID() == cached.GetUID() && newerVersion(last.GetResourceVersion(), cached.GetResourceVersion()) {
		return last.DeepCopy()
	}
	delete(m.writes, key) // the cache has caught up, or the object was replaced
	return cached
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
