package run

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// OperatorRun is a handler's run for the operator itself rather than for
// an object: a slot of an operator-wide schedule or a webhook delivery.
// Its runs are archived with the kind Operator and the operator's name.
type OperatorRun struct {
	Handler *definition.Handler
	Trigger string
	// Key is the idempotency key: a run of it that succeeded is never
	// repeated, one interrupted runs again with it.
	Key string
	// UID is the runs' UID: the Operator's, or the archive id of the
	// delivery a run on event handles (so its runs can be found from it).
	UID string
	Log logr.Logger
	// Schedule and Event are the trigger's part of the binding context;
	// nil for none.
	Schedule *ScheduleContext
	Event    *EventContext
	// Actor is the person who asked for the run (archive.Run.Actor); ""
	// for a slot or a delivery.
	Actor string
	// Note, when set, is the first line of each attempt's log: who asked
	// for the run and why.
	Note string
}

// OperatorEnd is where an operator run stopped: its last record (whose
// Outcome says how it ended), or that the engine stopped first.
type OperatorEnd struct {
	// Run is the last run recorded; nil when a run of the key had
	// succeeded before (nothing ran now) or the engine stopped first.
	Run *archive.Run
	// Stopped: the engine stopped before the run ended.
	Stopped bool
	// Refuse is a run on event's refusal of its delivery.
	Refuse string
}

// RunForOperator runs r, retried with its key by the handler's policy,
// until it succeeds, is skipped, gives up or the engine stops, unless a
// run of the key succeeded already.
func (rn *Runner) RunForOperator(ctx context.Context, r OperatorRun) OperatorEnd {
	operator, h := rn.def.Operator.Name, r.Handler
	for attempt := 1; ; attempt++ {
		if done, err := rn.archive.Succeeded(ctx, r.Key); err != nil || done {
			if err != nil && ctx.Err() == nil {
				r.Log.Error(err, "reading the archive; the run is tried again in 5s")
				if sleep.For(ctx, notRecordedRetry) {
					attempt--
					continue
				}
			}
			return OperatorEnd{Stopped: ctx.Err() != nil}
		}
		now := time.Now()
		run := archive.NewRun(operator, h.Name, h.Action(), r.Trigger, nil, now)
		run.APIVersion, run.Kind, run.Name, run.UID = v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind, operator, r.UID
		run.Key, run.Attempt, run.Actor = r.Key, attempt, r.Actor
		span := rn.runSpan(ctx, run, now)
		rctx := trace.ContextWithSpan(ctx, span)
		bc := BindingContext{Operator: operator, Handler: h.Name, Trigger: r.Trigger, RunID: run.ID, IdempotencyKey: r.Key, Attempt: attempt,
			Schedule: r.Schedule, Event: r.Event}
		bc.Traceparent, bc.Tracestate = traceContext(span, run)
		input, err := json.Marshal(bc)
		if err != nil {
			r.Log.Error(err, "encoding the binding context")
			span.End()
			return OperatorEnd{}
		}
		run.Input = kept(input)
		o, ran := rn.runOnce(rctx, h, run, input, now, r.Note, r.Log)
		endRunSpan(span, run)
		switch {
		case !ran:
			if ctx.Err() != nil {
				return OperatorEnd{Stopped: true}
			}
			attempt-- // not recorded, so not run: try again
			if !sleep.For(ctx, notRecordedRetry) {
				return OperatorEnd{Stopped: true}
			}
		case o.Verdict == Retry:
			// Until the time the run recorded, not its delay from now: a
			// clock stepped meanwhile counts.
			if !SleepUntil(ctx, rn.clock, rn.steps, run.NextRetryAt) {
				return OperatorEnd{Run: run, Stopped: true}
			}
		case o.Verdict == Cancelled:
			// Its runner was lost: it runs again at once with its key, no
			// attempt counted.
			attempt--
		case o.Verdict == Refused:
			return OperatorEnd{Run: run, Refuse: o.Reason}
		default:
			return OperatorEnd{Run: run}
		}
	}
}

// runOnce records, executes and finishes one operator run, in the span
// of ctx (the caller ends it), its log
// starting with note (unless ""); ran is false when the archive could not
// record it (it did not run) or the engine stopped during it.
func (rn *Runner) runOnce(ctx context.Context, h *definition.Handler, run *archive.Run, input []byte, due time.Time, note string, log logr.Logger) (o Outcome, ran bool) {
	alog := &archiveLog{ctx: ctx, store: rn.archive, id: run.ID}
	rn.metrics.queued.WithLabelValues(run.Operator).Inc()
	res, recorded, err := rn.execute(ctx, run, executor.Request{
		RunID: run.ID, Handler: h.Name, Trigger: run.Trigger, Key: run.Key, Attempt: run.Attempt, Input: input, Timeout: h.Timeout, Log: alog,
		Object: &executor.ObjectRef{APIVersion: run.APIVersion, Kind: run.Kind, Name: run.Name},
	}, due, func() {
		if note != "" {
			_, _ = alog.Write([]byte(note + "\n")) // recorded now: the log can follow
		}
	})
	if !recorded {
		if err != nil {
			log.Error(err, "the archive could not record the run; it did not run")
		}
		return Outcome{}, false
	}
	log = log.WithValues("run", run.ID)
	alog.End() // its tail is recorded with the end
	run.FinishedAt = time.Now().UTC()
	if ctx.Err() != nil {
		rn.cancelled(run, alog, log)
		return Outcome{Verdict: Cancelled}, false
	}
	if lost, ok := lostRunner(err); ok {
		rn.operatorRunLost(ctx, run, alog, lost, log)
		return lost, true
	}
	o = judge(res, err)
	switch {
	case o.done() || o.Verdict == Refused:
		if len(res.Status) > 0 {
			o = failed(fmt.Sprintf("the result sets status, but a run on %s is for the operator and has no object to write it to", run.Trigger), true)
		} else if o.Verdict == Refused && run.Trigger != v1alpha1.OnEvent {
			o = refuseOutsideEvent(run.Trigger)
		}
	}
	if o.Verdict == Retry {
		if retryAt, gaveUp := h.Retry.Next(run.Attempt, false, rn.clock.Now().UTC()); gaveUp {
			o.Verdict = GaveUp
		} else {
			o.RetryAt = retryAt
		}
	}
	switch o.Verdict {
	case Refused:
		run.Error = "refused the delivery: " + o.Reason
	case Retry:
		run.Error, run.NextRetryAt = o.Reason, o.RetryAt
		rn.metrics.retries.WithLabelValues(run.Operator, h.Name).Inc()
	case GaveUp:
		run.Error = o.Reason
	}
	run.Outcome = o.archived()
	run.Result = resultJSON(res)
	if o.done() || o.Verdict == Refused {
		for _, ev := range res.Events {
			rn.operatorEvent(ev.Type, ev.Reason, run.ID, ev.Message)
			run.Writes = append(run.Writes, "event "+ev.Type+" "+ev.Reason)
		}
	}
	if err := rn.recordEnd(context.WithoutCancel(ctx), run, alog); err != nil {
		log.Error(err, "the archive could not record the run's end", "outcome", run.Outcome)
	}
	rn.ended(run)
	switch o.Verdict {
	case Retry:
		rn.operatorEvent(corev1.EventTypeWarning, "HandlerFailed", run.ID, fmt.Sprintf("handler %s failed (attempt %d of %d, next in %s): %s: run %s", h.Name, run.Attempt, h.Retry.MaxAttempts, o.RetryAt.Sub(rn.clock.Now().UTC()).Round(time.Second), cause.Truncate(run.Error), rn.runRef(run.ID)))
	case GaveUp:
		rn.operatorEvent(corev1.EventTypeWarning, "HandlerGaveUp", run.ID, fmt.Sprintf("handler %s gave up on %s after %d attempts: %s: run %s", h.Name, run.Key, run.Attempt, cause.Truncate(run.Error), rn.runRef(run.ID)))
	}
	return o, true
}

// operatorEvent posts an Event on the Operator, when it is one read from
// the cluster; an Operator from a file has no object to post on.
func (rn *Runner) operatorEvent(eventType, reason, runID, message string) {
	if rn.def.Operator.UID == "" {
		return
	}
	rn.events.Eventf(rn.def.Operator, nil, eventType, reason, runAction(runID), "%s", message)
}
