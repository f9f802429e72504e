package run

import (
	"context"
	"errors"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// Step is what one reconcile's handler step decided.
type Step struct {
	// State is the object's handler state, for the caller to write into
	// status.opkit (a custom resource) or the archive (a watched object).
	State *cause.State
	// Stalled says why the object is Stalled; "" when it is not.
	Stalled string
	// Busy: a run is in flight or due.
	Busy bool
	// Paused: handlers are paused; none starts.
	Paused bool
	// OperatorPause, when the object is paused by its Operator's pause
	// (not its own), is who paused the operator and why; nil otherwise.
	OperatorPause *v1alpha1.Pause
	// Requeue is when to look again; 0 for never.
	Requeue time.Duration
	// Wrote: the step wrote to the object (a result's status, the retry
	// annotation cleared); the object passed is then as the write left it.
	Wrote bool
	// Start is the run the step decided, which the caller launches once
	// its own write of the object is made (Launch); nil for none.
	Start *Pending
	// Status is, after StepWriting, the status a finished run's result
	// sets, for the caller's patch (MergeStatus); nil for none.
	Status map[string]any
	// deferred is the run whose result Status is, until Written or
	// StatusRefused.
	deferred *deferral
	// writeFirst: the step took a retry request whose cleared attempts
	// only the caller's write keeps; the run it starts waits for that
	// write (Waitable), so that a SIGKILL in the run finds them kept.
	writeFirst bool
}

// Idle reports whether the object's handlers are done: nothing in
// flight, due, paused, stalled or to look at again.
func (s *Step) Idle() bool { return !s.Busy && !s.Paused && s.Stalled == "" && s.Requeue == 0 }

// state returns the object's handler state: what the runner last wrote
// for it, else what its status holds.
func (rn *Runner) state(cr *unstructured.Unstructured) *cause.State {
	rn.mem.mu.Lock()
	defer rn.mem.mu.Unlock()
	if w := rn.mem.object(cr).written; w != nil {
		return w.Clone()
	}
	if rn.watched {
		return &cause.State{Handlers: map[string]*cause.HandlerState{}} // new: its record is the archive's
	}
	return cause.Read(cr)
}

// remember records the state a step is about to write.
func (rn *Runner) remember(cr *unstructured.Unstructured, st *cause.State) {
	rn.mem.mu.Lock()
	rn.mem.object(cr).written = st.Clone()
	rn.mem.mu.Unlock()
}

// Step records a finished run, then prepares the next due handler's, if
// any. It writes the handlers' status patches and events itself; the
// caller writes the returned state.
//
// vars.Self is the object as handlers get it. For a watched object, cr is
// the object; its generation, as the step sees it, is its count of
// observed changes, and create and update are about its projection
// (cause.Projection).
func (rn *Runner) Step(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars) (*Step, error) {
	return rn.step(ctx, cr, vars, false, nil)
}

// Carry builds a watched object's handler record of state st, as its
// driver writes it; nil when the archive holds st already.
type Carry func(st *cause.State) (*Carried, error)

// StepCarrying is Step for a watched object's driver: the end of a run
// it records writes the object's handler record that carry builds in
// the same transaction (archive.Run.Record), from the state as the end
// leaves it, and the runner records it persisted (SetPersisted): a step
// that decides nothing more leaves the driver nothing to write.
func (rn *Runner) StepCarrying(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, carry Carry) (*Step, error) {
	return rn.step(ctx, cr, vars, false, carry)
}

// step is Step; with writing, a finished run's result status is left to
// the caller's patch (StepWriting); with carry, a finished run's end
// writes the object's record (StepCarrying).
func (rn *Runner) step(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, writing bool, carry Carry) (*Step, error) {
	st := rn.state(cr)
	res := &Step{State: st}
	defer rn.remember(cr, st)
	var subject map[string]any // nil: the spec
	// newLife: a watched object first seen now. Its runs' keys name this
	// life (State.Life), which no run in the archive can have: its state,
	// recorded before any run of it, would have been read.
	var newLife bool
	if rn.watched {
		newLife = st.Observed == nil
		subject = cause.Projection(vars.Self, rn.def.Handlers)
		g := cause.Observe(st, subject, cr.GetDeletionTimestamp() != nil, time.Now())
		view := &unstructured.Unstructured{Object: maps.Clone(cr.Object)}
		md, _ := cr.Object["metadata"].(map[string]any)
		view.Object["metadata"] = maps.Clone(md)
		view.SetGeneration(g)
		cr = view
	}
	if err := rn.retryRequested(ctx, cr, st, res); err != nil {
		return nil, err
	}
	opPause, _ := rn.paused.get()
	if !rn.watched || !deleteGaveUp(rn.def.Handlers, cr, st) {
		// A watched object gone whose delete handlers gave up has no run
		// a pause could hold: its pauses are not recorded.
		if err := rn.pauseChanged(ctx, cr, st, opPause, res); err != nil {
			return nil, err
		}
	}

	var ended bool
	if cr, ended = rn.settleFlight(ctx, cr, st, res, writing, carry); ended {
		return res, nil
	}
	// Paused on its own or with its whole operator: no handler starts, a
	// re-run included (docs/handlers.md).
	_, ownPause := cr.GetAnnotations()[v1alpha1.PauseAnnotation]
	paused := ownPause || opPause.paused
	if _, asked := cr.GetAnnotations()[v1alpha1.RerunAnnotation]; asked && res.deferred != nil {
		// A re-run request waits for the next step: this one may yet be
		// undone (StatusRefused), and the request with it.
		if res.Requeue == 0 || res.Requeue > time.Second {
			res.Requeue = time.Second
		}
	} else if !paused && cr.GetDeletionTimestamp() == nil {
		// A person's request to run a handler again comes before what is
		// due: the object is free now. Paused, it waits.
		p, wrote, err := rn.rerunRequested(ctx, cr, st, vars, subject)
		if err != nil {
			return nil, err
		}
		res.Wrote = res.Wrote || wrote
		if p != nil {
			res.Busy, res.Start = true, p
			p.writeFirst = res.writeFirst
			return res, nil
		}
	}

	in := cause.Input{Handlers: rn.def.Handlers, Object: cr, State: st, Now: rn.clock.Now(), Started: rn.started, Related: vars.Related, Subject: subject,
		Visit: visitOf(rn.def.States, vars.Self)} // vars.Self: a new object's initial state too
	in.Paused = paused
	if !ownPause && opPause.paused {
		p := v1alpha1.ReadRequest(opPause.value)
		res.OperatorPause = &p
	}
	in.When = rn.whenValues(cr, vars)
	d := cause.Decide(in)
	*st = *d.State // the records the decision updated (passed, resumed, seen false)
	res.Stalled = d.Stalled
	if in.Paused {
		// Removing the annotation is an update that wakes the object; the
		// Operator's resume wakes them all (PauseOperator).
		res.Paused, res.Requeue = true, 0
		return res, nil
	}
	if d.Wait > 0 && (res.Requeue == 0 || d.Wait < res.Requeue) {
		res.Requeue = d.Wait
	}
	if d.Cause != nil {
		res.Busy = true
		var err error
		var retry string // the trace its failed attempt's, which it continues
		if hs := st.Handlers[d.Cause.Handler.Name]; hs != nil && d.Cause.Attempt > 1 {
			retry = hs.Trace
		}
		if res.Start, err = rn.start(ctx, cr, d.Cause, vars, subject, newLife, retry); err != nil {
			return nil, err
		}
		if res.Start != nil {
			res.Start.writeFirst = res.writeFirst
		}
		return res, nil
	}
	if cr.GetDeletionTimestamp() == nil {
		// No create or update handler has the generation still to do.
		if subject == nil {
			subject = cause.Spec(cr)
		}
		st.AdvanceHandled(rn.def.Handlers, cr.GetGeneration(), subject)
	}
	return res, nil
}

// settleFlight settles the run in flight of cr, if any, into res: one
// still running makes the object busy, one the archive did not record is
// tried again later, one interrupted runs again, and an ended one is
// finished (recorded, its result applied; with writing, a result that
// sets status is left to the caller's write, res.Status). It returns cr
// as what follows in the step sees it, and whether the step ends here.
func (rn *Runner) settleFlight(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, res *Step, writing bool, carry Carry) (*unstructured.Unstructured, bool) {
	rn.mem.mu.Lock()
	o := rn.mem.object(cr)
	f := o.flight
	done := f != nil && f.done
	if done {
		o.flight = nil
	}
	rn.mem.mu.Unlock()
	if f != nil && !done {
		res.Busy = true
		res.Stalled = cause.Stalled(rn.def.Handlers, cr, st)
		return cr, true // its end wakes this object again
	}
	if f != nil && errors.Is(f.err, errNotRecorded) {
		// Nothing ran: no attempt is counted, and the handler runs once
		// the archive records runs again.
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", "Run", "handler %s did not run: %v; it runs once the archive records runs again", f.cause.Handler.Name, f.err)
		tracing.Fail(f.span, f.err.Error())
		f.span.End()
		res.Requeue = notRecordedRetry
		return cr, true
	}
	if f != nil && rn.interrupted(ctx, cr, f) {
		f = nil // recorded Cancelled: it runs again below, with its key
	}
	if f != nil {
		var d *deferral
		if writing && f.result != nil && len(f.result.Status) > 0 {
			// Only a result that sets status is left to the caller.
			d = &deferral{flight: f, before: st.Clone()}
		}
		var wrote bool
		res.Requeue, wrote = rn.finish(ctx, cr, f, st, d, carry)
		res.Wrote = res.Wrote || wrote
		if d != nil && d.status != nil {
			// What follows sees the result, as after its own patch.
			res.Status, res.deferred = d.status, d
			cr = WithStatus(cr, d.status)
		}
	}
	return cr, false
}

// whenValues evaluates the when conditions: by handler, those that can be
// known now (what a condition reads exists).
func (rn *Runner) whenValues(cr *unstructured.Unstructured, vars definition.Vars) map[string]bool {
	var out map[string]bool
	for _, h := range rn.def.Handlers {
		if h.When == nil {
			continue
		}
		holds, err := h.WhenHolds(vars)
		switch {
		case err == nil:
			if out == nil {
				out = map[string]bool{}
			}
			out[h.Name] = holds
		case errors.Is(err, definition.ErrChildMissing):
			// Not known yet: nothing changes.
		default:
			rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "WhenFailed", "Evaluate", "handler %s: %v", h.Name, err)
		}
	}
	return out
}

// visitOf is the object's visit of its current state (status.state), nil
// for an Operator without states or an object in none yet.
func visitOf(m *definition.StateMachine, self map[string]any) *cause.Visit {
	s, err := v1alpha1.ReadObjectState(self)
	if err != nil || s == nil || s.Name == "" {
		return nil
	}
	return cause.VisitOf(m, s)
}

// deleteGaveUp reports whether cr, being deleted, has a delete handler
// that gave up: nothing runs for it any more (those after it are held
// back) until a person retries it.
func deleteGaveUp(hs []*definition.Handler, cr *unstructured.Unstructured, st *cause.State) bool {
	if cr.GetDeletionTimestamp() == nil {
		return false
	}
	for _, h := range hs {
		if rec := st.Handlers[h.Name]; h.Fires(v1alpha1.OnDelete) && rec != nil && !rec.Deleted && rec.Stalled && rec.Target == cr.GetGeneration() {
			return true
		}
	}
	return false
}
