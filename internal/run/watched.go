package run

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
)

// Watched is the runner's memory of watched objects, for the watch
// driver: a watched object's handler record lives in the archive, not on
// the object, so the driver loads it (Preload), persists it when a step
// changes it (Persisted, SetPersisted), or has the run the step started
// write it with its start (Pending.Carry), keeps the object's last state for
// its delete handlers (LastSeen), and drops it once the object is done
// with (Settle, Drop). The object gauges read it (Each).
type Watched struct{ rn *Runner }

// Watched is the runner's memory of watched objects.
func (rn *Runner) Watched() Watched { return Watched{rn} }

// Preloaded is a watched object's record as the archive holds it.
type Preloaded struct {
	Key types.NamespacedName
	UID types.UID
	// State is its handler state, Persisted that state's JSON as stored;
	// Last the object's JSON when the state last changed (nil: not kept).
	State     *cause.State
	Persisted []byte
	Last      []byte
	// UpdatedAt is the record's (archive.HandlerRecord.UpdatedAt): a
	// record stamped earlier is not taken for written over it
	// (SetPersisted), since the archive keeps the later one.
	UpdatedAt time.Time
}

// Preload puts records read from the archive into the memory.
func (w Watched) Preload(records []Preloaded) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	for _, r := range records {
		w.rn.mem.objects[r.Key] = &objectState{uid: r.UID, written: r.State, persisted: r.Persisted, last: r.Last, persistedAt: r.UpdatedAt}
	}
}

// LastSeen keeps the final state of a deleted watched object, if the
// runner knows the object.
func (w Watched) LastSeen(u *unstructured.Unstructured) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	if o := w.rn.mem.objects[key]; o != nil && o.uid == u.GetUID() {
		o.last, o.gone = Snapshot(u.Object), true
	}
}

// Known returns the uid of the object of that name the runner knows, and
// its last state; ok is false when it knows none.
func (w Watched) Known(key types.NamespacedName) (uid types.UID, last []byte, ok bool) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	o := w.rn.mem.objects[key]
	if o == nil {
		return "", nil, false
	}
	return o.uid, o.last, true
}

// Track makes obj known, with an empty handler state if it has none: a
// watched object is new to the operator until a step records its state.
func (w Watched) Track(obj *unstructured.Unstructured) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	if o := w.rn.mem.object(obj); o.written == nil {
		o.written = &cause.State{Handlers: map[string]*cause.HandlerState{}}
	}
}

// Settle records the end of the run of an object about to be forgotten,
// if it ended (its outcome in the archive, its Events), as its next step
// would have. It reports whether a run is still in flight: the object is
// not forgotten until its end, which wakes it again.
func (w Watched) Settle(ctx context.Context, key types.NamespacedName, obj *unstructured.Unstructured) (busy bool) {
	w.rn.mem.mu.Lock()
	o := w.rn.mem.objects[key]
	var f *flight
	var done bool
	if o != nil && o.uid == obj.GetUID() {
		f = o.flight
		if done = f != nil && f.done; done {
			o.flight = nil // the run's goroutine writes it no more
		}
	}
	w.rn.mem.mu.Unlock()
	switch {
	case f == nil:
		return false
	case !done:
		return true
	case errors.Is(f.err, errNotRecorded):
		return false
	}
	w.rn.finish(ctx, obj, f, w.rn.state(obj), nil, nil)
	return false
}

// Drop forgets the object of that name and uid, unless a run of it is in
// flight.
func (w Watched) Drop(key types.NamespacedName, uid types.UID) {
	w.rn.mem.mu.Lock()
	if o := w.rn.mem.objects[key]; o != nil && o.uid == uid && o.flight == nil {
		delete(w.rn.mem.objects, key)
	}
	w.rn.mem.mu.Unlock()
}

// Persisted returns the object's state as the archive holds it and its
// last state; ok is false when the runner knows no object of that name.
func (w Watched) Persisted(key types.NamespacedName) (persisted, last []byte, ok bool) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	o := w.rn.mem.objects[key]
	if o == nil {
		return nil, nil, false
	}
	return o.persisted, o.last, true
}

// SetPersisted records that the archive holds state (JSON) and last for
// the object of that name and uid, as stamped at (the record's
// UpdatedAt), unless it holds a later record already. The object's
// final state, once its deletion was seen (LastSeen), stays the one its
// delete handlers get: a record a run's start carried, written after a
// slot's wait, holds an earlier one.
func (w Watched) SetPersisted(key types.NamespacedName, uid types.UID, state, last []byte, at time.Time) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	if o := w.rn.mem.objects[key]; o != nil && o.uid == uid && !at.Before(o.persistedAt) {
		o.persisted, o.persistedAt = state, at
		if !o.gone {
			o.last = last
		}
	}
}

// Carried is a watched object's handler record that the run a step
// started writes with its start (archive.Run.Record), in the same
// transaction, instead of a write of its own before it: State and Last
// are what SetPersisted then records.
type Carried struct {
	Record      *archive.HandlerRecord
	State, Last []byte
}

// Carry has p's run write c with its start; the runner records it
// persisted once the start is recorded. A run that never starts writes
// nothing, and the object's next step finds its state not persisted.
func (p *Pending) Carry(c *Carried) {
	if p != nil {
		p.carried = c
	}
}

// Written is SetPersisted for obj's record c, once the archive holds it.
func (w Watched) Written(obj metav1.Object, c *Carried) {
	w.SetPersisted(types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, obj.GetUID(), c.State, c.Last, c.Record.UpdatedAt)
}

// carriedPersisted records p's carried record persisted: its run's start
// was recorded.
func (rn *Runner) carriedPersisted(p *Pending) {
	if c := p.carried; c != nil {
		rn.Watched().Written(p.obj, c)
	}
}

// Each calls f for each object with a handler state, with whether
// it is Stalled as package cause says of a custom resource (a handler
// gave up on the object's current count of observed changes).
func (w Watched) Each(f func(stalled bool)) {
	w.rn.mem.mu.Lock()
	defer w.rn.mem.mu.Unlock()
	view := &unstructured.Unstructured{Object: map[string]any{}}
	for _, o := range w.rn.mem.objects {
		st := o.written
		if st == nil {
			continue
		}
		stalled := false
		if st.Observed != nil {
			view.SetGeneration(st.Observed.Generation)
			stalled = cause.Stalled(w.rn.def.Handlers, view, st) != ""
		}
		f(stalled)
	}
}

// Snapshot is an object's JSON without its managedFields: what the delete
// handlers of a watched object get once it is gone.
func Snapshot(obj map[string]any) []byte {
	obj = maps.Clone(obj)
	if md, ok := obj["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		delete(md, "managedFields")
		obj["metadata"] = md
	}
	data, _ := json.Marshal(obj)
	return data
}
