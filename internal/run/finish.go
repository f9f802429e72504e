package run

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// finish records a finished run: the result's status patch and events, the
// handler's record, the archive's, and returns when to look again, and
// whether it wrote the result's status (cr is then the object as the
// write left it).
//
// With d, the result's status is not written but kept in d, for the
// caller's one status patch, and so are the result's Events, posted once
// that patch is written (StepWriting). With carry, the end's record
// writes the watched object's record of st as the end leaves it
// (StepCarrying).
func (rn *Runner) finish(ctx context.Context, cr *unstructured.Unstructured, f *flight, st *cause.State, d *deferral, carry Carry) (requeue time.Duration, wrote bool) {
	run, h := f.run, f.cause.Handler
	now := rn.clock.Now().UTC() // what the retry and the requeue count from
	o, wrote := rn.apply(ctx, cr, f, d)
	switch {
	case run.Trigger == v1alpha1.TriggerRerun:
		// One run a person asked for: not retried, and no record of the
		// handler's changes (what it is done with, its failed attempts).
		if !o.done() {
			run.Error, o.Verdict = o.Reason, GaveUp
		}
	case o.Verdict == Succeeded, o.Verdict == Skipped:
		requeue = f.result.RequeueDuration()
		st.Succeeded(rn.def.Handlers, f.cause, f.spec, requeue, now)
		if run.Trigger == v1alpha1.OnDelete {
			requeue = 0
		}
	default: // failed
		gaveUp, retryAt := st.Failed(f.cause, o.Reason, o.Verdict == GaveUp, now)
		run.Error = o.Reason
		if gaveUp {
			o.Verdict = GaveUp
		} else {
			o.RetryAt, requeue, run.NextRetryAt = retryAt, retryAt.Sub(now), retryAt
			rn.metrics.retries.WithLabelValues(rn.def.Operator.Name, h.Name).Inc()
		}
	}
	run.Outcome = o.archived()
	run.Result = resultJSON(f.result)
	if run.ID == "" {
		return requeue, wrote // it had succeeded before a crash: nothing ran now
	}
	traced(st, f, o.Verdict == Retry)
	// Later than an end recorded before (a status patch refused after
	// it finishes the run again), which the archive keeps otherwise,
	// whatever the wall clock did meanwhile.
	at := time.Now().UTC()
	if !at.After(run.FinishedAt) {
		at = run.FinishedAt.Add(time.Nanosecond)
	}
	run.FinishedAt = at
	lr := &cause.LastRun{ID: run.ID, Handler: h.Name, Trigger: run.Trigger, Outcome: string(run.Outcome), Message: cause.Truncate(run.Error), Attempt: run.Attempt}
	if !run.NextRetryAt.IsZero() {
		lr.NextRetryAt = run.NextRetryAt.Format(time.RFC3339)
	}
	st.LastRun = lr
	var carried *Carried
	if carry != nil {
		// A record that cannot be built is the driver's to write (and
		// fail) after the step; the end is recorded all the same.
		if c, err := carry(st); err == nil && c != nil {
			carried, run.Record = c, c.Record
		}
	}
	if err := rn.recordEnd(ctx, run, f.log); err != nil {
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", runAction(run.ID), "run %s ended %s, which the archive could not record (%v); it is recorded once the archive can", run.ID, run.Outcome, err)
	} else if carried != nil {
		rn.Watched().Written(cr, carried)
	}
	run.Record = nil
	rn.ended(run)
	if d == nil || d.status == nil {
		endRunSpan(f.span, run) // else once the caller's patch is written (Written)
	}
	switch o.Verdict {
	case Skipped:
		// Nothing was done: no Event, and the archive keeps the last one.
	case Succeeded:
		if !rn.runEvents {
			break // the archive, status.opkit.lastRun and the console say it
		}
		rn.events.Eventf(cr, nil, corev1.EventTypeNormal, "HandlerSucceeded", runAction(run.ID), "handler %s succeeded: run %s", h.Name, rn.runRef(run.ID))
	case Retry:
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "HandlerFailed", runAction(run.ID), "handler %s failed (attempt %d of %d, next in %s): %s: run %s", h.Name, run.Attempt, h.Retry.MaxAttempts, requeue.Round(time.Second), cause.Truncate(run.Error), rn.runRef(run.ID))
	default:
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "HandlerGaveUp", runAction(run.ID), "handler %s gave up after %d attempts: %s: run %s", h.Name, run.Attempt, cause.Truncate(run.Error), rn.runRef(run.ID))
	}
	return requeue, wrote
}

// apply judges an object's run and applies what its result asks of the
// object: its status patch, then its Events. A result that asks what the
// run cannot do fails it for good; a status patch the API refuses fails
// it (retried). wrote: the status was written, and cr is the object as
// the write left it. With d, the status and the Events are kept in d
// instead (finish).
func (rn *Runner) apply(ctx context.Context, cr *unstructured.Unstructured, f *flight, d *deferral) (o Outcome, wrote bool) {
	run, res := f.run, f.result
	o = judge(res, f.err)
	switch {
	case o.Verdict == Refused:
		return refuseOutsideEvent(run.Trigger), false
	case !o.done():
		return o, false
	case res.Admission():
		return failed("the result has fields of an admission answer (allowed, message, patch, warnings), which only a handler on validate or mutate gives", true), false
	case len(res.Status) > 0 && rn.watched:
		return failed("the result sets status, but opkit never writes to a watched object: post events or write to objects of your own instead", true), false
	case declaredField(rn.def, res.Status) != "":
		k := declaredField(rn.def, res.Status)
		return failed(fmt.Sprintf("status.%s is operator %s's status field (spec.status), which opkit writes from its expression at each reconcile: a handler cannot set it; write a field of its own", k, rn.def.Operator.Name), true), false
	case len(res.Status) > 0 && d != nil:
		d.status, d.events = res.Status, res.Events
		run.Writes = append(run.Writes, "status: "+strings.Join(slices.Sorted(maps.Keys(res.Status)), ", "))
		for _, e := range res.Events {
			run.Writes = append(run.Writes, "event "+e.Type+" "+e.Reason)
		}
		return o, false
	case len(res.Status) > 0:
		patch, _ := json.Marshal(map[string]any{"status": res.Status})
		if err := rn.client.Status().Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return failed(fmt.Sprintf("the API refused the result's status patch: %v", APIMessage(err)), false), false
		}
		rn.mem.Record(cr.DeepCopy())
		wrote = true
		run.Writes = append(run.Writes, "status: "+strings.Join(slices.Sorted(maps.Keys(res.Status)), ", "))
	}
	for _, e := range res.Events {
		rn.events.Eventf(cr, nil, e.Type, e.Reason, runAction(run.ID), "%s", e.Message)
		run.Writes = append(run.Writes, "event "+e.Type+" "+e.Reason)
	}
	return o, wrote
}

// declaredField returns a key of status that d's spec.status declares (in
// sorted order, for a stable message), or "" when none is.
func declaredField(d *definition.Definition, status map[string]any) string {
	for _, k := range slices.Sorted(maps.Keys(status)) {
		for _, f := range d.Status {
			if f.Name == k {
				return k
			}
		}
	}
	return ""
}

// resultJSON is a handler's result as the archive keeps it; nil for
// none.
func resultJSON(res *executor.Result) json.RawMessage {
	if res == nil {
		return nil
	}
	data, err := json.Marshal(res)
	if err != nil || string(data) == "{}" {
		return nil
	}
	return kept(data)
}

// MaxKept is the largest binding context, and the largest result, that
// a run's record keeps (for opkit rerun --same-input and opkit replay): a
// run of a larger one is recorded without it, and a re-run of it takes
// the object as it is now. A binding context holds the object, its
// children and related objects; the archive keeps a run per attempt, and
// a few large objects must not grow it by megabytes a run.
const MaxKept = 256 << 10

// kept is data, or nil when it is larger than MaxKept.
func kept(data json.RawMessage) json.RawMessage {
	if len(data) > MaxKept {
		return nil
	}
	return data
}

// ended tells who waits for runs' ends of one recorded as ended.
func (rn *Runner) ended(run *archive.Run) {
	if rn.finished != nil {
		rn.finished(*run)
	}
	rn.metrics.observe(rn.def.Operator.Name, run)
}

// APIMessage is the API server's message for a refused request.
func APIMessage(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Message != "" {
		return s.Status().Message
	}
	return err.Error()
}
