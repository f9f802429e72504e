package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/finalizer"
	"github.com/opkit-dev/opkit/internal/run"
)

// preload reads the operator's watched objects' records from the archive
// into the runner and returns their names: those of this cluster, of the
// kind and namespaces watched. A record of another kind or namespace is
// dropped (the watch changed: the object is no longer watched, and is
// forgotten without a delete run).
func (r *reconciler) preload(ctx context.Context) ([]types.NamespacedName, error) {
	states, err := r.store.HandlerRecords(ctx, r.def.Operator.Name)
	if err != nil {
		return nil, err
	}
	var keys []types.NamespacedName
	var records []run.Preloaded
	updated := map[types.NamespacedName]time.Time{}
	for _, s := range states {
		w := r.def.Watch
		namespaces := w.Namespaces
		if r.namespace != "" {
			if s.Namespace != r.namespace {
				continue // another engine's, of another namespace: kept
			}
			namespaces = nil // the engine's one namespace is watched
		}
		if gvk := schema.FromAPIVersionAndKind(s.APIVersion, s.Kind); gvk != w.GVK || len(namespaces) > 0 && !slices.Contains(namespaces, s.Namespace) {
			// The operator watches another kind or other namespaces now:
			// the object is no longer watched.
			r.log.Info("dropping the record of an object no longer watched", "kind", s.Kind, "namespace", s.Namespace, "name", s.Name)
			if err := r.store.DeleteHandlerRecord(ctx, s.Operator, s.Key); err != nil {
				return nil, err
			}
			continue
		}
		var rec record
		if err := json.Unmarshal(s.Data, &rec); err != nil || rec.State == nil {
			r.log.Error(err, "a watched object's record in the archive does not decode; it is dropped, and the object is new to the operator", "namespace", s.Namespace, "name", s.Name, "uid", s.Key)
			if err := r.store.DeleteHandlerRecord(ctx, s.Operator, s.Key); err != nil {
				return nil, err
			}
			continue
		}
		if rec.Cluster != "" && r.cluster != "" && rec.Cluster != r.cluster {
			continue // another cluster's object
		}
		if rec.State.Handlers == nil {
			rec.State.Handlers = map[string]*cause.HandlerState{}
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if at, ok := updated[key]; ok {
			// Two objects of one name: the older was deleted and its
			// delete handlers could not finish before the engine stopped.
			if s.UpdatedAt.Before(at) {
				r.log.Info("dropping the record of an older object of the same name; its delete handlers do not run", "namespace", s.Namespace, "name", s.Name, "uid", s.Key)
				continue
			}
		} else {
			keys = append(keys, key)
		}
		updated[key] = s.UpdatedAt
		persisted, _ := json.Marshal(rec.State)
		records = append(records, run.Preloaded{Key: key, UID: types.UID(s.Key), State: rec.State, Persisted: persisted, Last: rec.Object, UpdatedAt: s.UpdatedAt})
	}
	r.runner.Watched().Preload(records) // a later record of a name replaces an earlier one, as it did
	return keys, nil
}

// Reconcile runs the handlers of one watched object, or the delete
// handlers of one that is gone.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rn := r.runner
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.def.Watch.GVK)
	err := r.cache.Get(ctx, req.NamespacedName, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	found := err == nil
	if found {
		matches, err := r.def.Watch.Matches(obj.Object)
		if err != nil {
			r.events.Eventf(obj, nil, "Warning", "FilterFailed", "Evaluate", "operator %s: %v", r.def.Operator.Name, err)
			return reconcile.Result{}, nil // a change of the object looks again
		}
		found = matches
	}
	var goneUID types.UID
	var last []byte
	if uid, kept, known := rn.Watched().Known(req.NamespacedName); known && (!found || uid != obj.GetUID()) {
		goneUID, last = uid, kept
	}
	if goneUID != "" {
		// The object the runner knows is gone, or no longer watched; one
		// of the same name waits until it is done with.
		res, dropped, err := r.gone(ctx, req.NamespacedName, goneUID, last, found)
		if err != nil || !dropped || !found {
			return res, err
		}
	}
	if !found {
		return reconcile.Result{}, nil
	}
	fin := finalizer.Name(r.def.Operator.Name)
	holds := slices.Contains(obj.GetFinalizers(), fin)
	if r.def.Watch.Finalizer && !holds && obj.GetDeletionTimestamp() == nil {
		// The finalizer comes before any run, so that no deletion passes
		// unseen.
		return finalizer.Patch(ctx, r.client, obj, fin, true)
	}
	ctx, endSpan := run.Traced(ctx, rn, r.def.Operator.Name, obj)
	defer endSpan()
	rn.Watched().Track(obj)
	carry := r.carry(obj, false)
	step, err := rn.StepCarrying(ctx, obj, definition.Vars{Self: obj.Object}, carry)
	if err != nil {
		return reconcile.Result{}, err
	}
	err = r.persistWith(ctx, obj, step, false)
	// The run starts once its start, with the state, is recorded; a
	// state the archive refused on its own does not hold it back. A short run's
	// end is recorded by this reconcile, not by one its end wakes: in a
	// burst, half the reconciles (a worker waiting for its run, the
	// operator has more of them, run.Workers).
	wait := r.runWait
	if err != nil {
		wait = -1
	}
	if rn.LaunchWaiting(ctx, step.Start, obj.Object, wait) {
		if step, err = rn.StepCarrying(ctx, obj, definition.Vars{Self: obj.Object}, carry); err != nil {
			return reconcile.Result{}, err
		}
		err = r.persistWith(ctx, obj, step, false)
		rn.Launch(step.Start, obj.Object)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if holds && obj.GetDeletionTimestamp() != nil && step.Idle() {
		// The delete handlers are done: let the object go.
		return finalizer.Patch(ctx, r.client, obj, fin, false)
	}
	return reconcile.Result{RequeueAfter: step.Requeue}, nil
}

// gone handles a known object that is no longer watched: deleted (or
// replaced by another of its name), its delete handlers run with its last
// state, then its record is dropped; still there but no longer selected,
// its record is dropped.
//
// dropped reports whether the runner is done with the object. replaced:
// an object of the same name is watched now, which waits for it; a gone
// object whose delete handlers gave up is then dropped, as the engine's
// start drops it (preload), rather than hold the new one for good.
func (r *reconciler) gone(ctx context.Context, key types.NamespacedName, uid types.UID, last []byte, replaced bool) (res reconcile.Result, dropped bool, err error) {
	rn := r.runner
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(last, &obj.Object); err != nil || obj.Object == nil {
		// Not kept: its name is all that is known.
		obj.Object = map[string]any{}
		obj.SetGroupVersionKind(r.def.Watch.GVK)
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		obj.SetUID(uid)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(r.def.Watch.GVK)
	err = r.reader.Get(ctx, key, live)
	switch {
	case err == nil && live.GetUID() == uid:
		if rn.Watched().Settle(ctx, key, live) {
			return reconcile.Result{}, false, nil // its run's end wakes it again
		}
		r.log.V(1).Info("no longer watched: forgotten", "namespace", key.Namespace, "name", key.Name)
		if fin := finalizer.Name(r.def.Operator.Name); slices.Contains(live.GetFinalizers(), fin) {
			// Nothing would remove it: opkit no longer looks at the object.
			if res, err := finalizer.Patch(ctx, r.client, live, fin, false); err != nil || res.RequeueAfter > 0 {
				return res, false, err
			}
		}
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	case err != nil && !apierrors.IsNotFound(err):
		return reconcile.Result{}, false, err
	}
	if !rn.HasDelete() {
		if rn.Watched().Settle(ctx, key, obj) {
			return reconcile.Result{}, false, nil
		}
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	if obj.GetDeletionTimestamp() == nil {
		now := metav1.Now()
		obj.SetDeletionTimestamp(&now)
	}
	run.EndPause(obj)
	ctx, endSpan := run.Traced(ctx, rn, r.def.Operator.Name, obj)
	defer endSpan()
	step, err := rn.StepCarrying(ctx, obj, definition.Vars{Self: obj.Object}, r.carry(obj, true))
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if step.Idle() {
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	if replaced && !step.Busy && step.Stalled != "" && step.Requeue == 0 {
		r.log.Info("dropping the record of a deleted object whose delete handlers gave up: an object of the same name is watched now",
			"namespace", key.Namespace, "name", key.Name, "uid", uid, "stalled", step.Stalled)
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	err = r.persistWith(ctx, obj, step, true)
	rn.Launch(step.Start, obj.Object) // after its record, also when the archive refused it
	if err != nil {
		return reconcile.Result{}, false, err
	}
	requeue := step.Requeue
	if requeue == 0 && step.Stalled != "" {
		requeue = time.Minute // a gone object cannot be changed: look again now and then
	}
	return reconcile.Result{RequeueAfter: requeue}, false, nil
}

// drop forgets a watched object: its record in the archive and the
// runner's memory.
func (r *reconciler) drop(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	if err := r.store.DeleteHandlerRecord(ctx, r.def.Operator.Name, string(uid)); err != nil {
		return fmt.Errorf("dropping the record of %s from the archive: %w", key, err)
	}
	r.runner.Watched().Drop(key, uid)
	return nil
}

// persistWith is persist for a step: the state of a step that starts a
// run is written with the run's start, in its transaction
// (run.Pending.Carry), not on its own before it. Nothing runs before its
// state is recorded either way: a run starts once its start is recorded,
// and a start the archive refuses records neither (the object's next
// step writes the state).
func (r *reconciler) persistWith(ctx context.Context, obj *unstructured.Unstructured, step *run.Step, deleted bool) error {
	if step.Start == nil {
		return r.persist(ctx, obj, step.State, deleted)
	}
	c, err := r.record(obj, step.State, deleted)
	if err == nil && c != nil {
		step.Start.Carry(c)
	}
	return err
}

// persist writes an object's handler state to the archive when it
// changed, with the object as it is now (kept as its last state);
// deleted: the object is gone, its last state is kept as it was.
//
// An engine stopping does not cut the write: the step's records (a pause
// recorded, a run started) are made, and a state that does not hold them
// would be taken for the truth by the next engine (a gone object's pause,
// recorded, would never be resumed).
func (r *reconciler) persist(ctx context.Context, obj *unstructured.Unstructured, st *cause.State, deleted bool) error {
	c, err := r.record(obj, st, deleted)
	if err != nil || c == nil {
		return err
	}
	if err := r.store.PutHandlerRecord(context.WithoutCancel(ctx), c.Record); err != nil {
		return fmt.Errorf("recording the handler state of %s in the archive: %w", types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, err)
	}
	r.runner.Watched().Written(obj, c)
	return nil
}

// carry builds obj's records for the ends of runs its step records
// (run.StepCarrying), as persist would write them.
func (r *reconciler) carry(obj *unstructured.Unstructured, deleted bool) run.Carry {
	return func(st *cause.State) (*run.Carried, error) { return r.record(obj, st, deleted) }
}

// record is the handler record of obj with state st, as persist writes
// it; nil when the archive holds st already.
func (r *reconciler) record(obj *unstructured.Unstructured, st *cause.State, deleted bool) (*run.Carried, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	rn := r.runner
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	persisted, kept, known := rn.Watched().Persisted(key)
	if known && bytes.Equal(persisted, data) {
		return nil, nil
	}
	var last []byte
	if known && deleted {
		last = kept
	}
	if !deleted && rn.HasDelete() {
		last = run.Snapshot(obj.Object)
	}
	s := &archive.HandlerRecord{
		Operator: r.def.Operator.Name, Key: string(obj.GetUID()), APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(),
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Data: r.envelope(data, last), UpdatedAt: time.Now().UTC(),
	}
	return &run.Carried{Record: s, State: data, Last: last}, nil
}

// envelope is the record of a watched object (record, as load reads it)
// holding state and last. Both are JSON as json.Marshal wrote it (or as
// a record held it, read back), so they are written as they are: a
// RawMessage field would have json.Marshal scan them again, at each
// start and end of a run (last, with delete handlers, is the whole
// object).
func (r *reconciler) envelope(state, last []byte) []byte {
	b := make([]byte, 0, len(`{"state":,"object":}`)+len(state)+len(last)+len(r.cluster)+16)
	b = append(append(b, `{"state":`...), state...)
	if len(last) > 0 {
		b = append(append(b, `,"object":`...), last...)
	}
	if r.cluster != "" {
		cluster, _ := json.Marshal(r.cluster)
		b = append(append(b, `,"cluster":`...), cluster...)
	}
	return append(b, '}')
}
