package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// operatorRun is a handler's run for the operator itself rather than for
// an object: a slot of an operator-wide schedule (calendar.go) or a
// webhook delivery (events.go). Its runs are archived with the kind
// Operator and the operator's name.
type operatorRun struct {
	handler *definition.Handler
	trigger string
	// key is the idempotency key: a run of it that succeeded is never
	// repeated, one interrupted runs again with it.
	key string
	// uid is the runs' UID: the Operator's, or the archive id of the
	// delivery a run on event handles (so its runs can be found from it).
	uid string
	log logr.Logger
	// context adds the trigger's part to the binding context.
	context func(*bindingContext)
}

// operatorOutcome is how an operator run ended.
type operatorOutcome struct {
	// run is the last run recorded; nil when a run of the key had
	// succeeded before (nothing ran now) or the engine stopped first.
	run *archive.Run
	// stopped: the engine stopped before the run ended.
	stopped bool
	// refuse is a run on event's refusal of its delivery.
	refuse string
}

// runForOperator runs r, retried with its key by the handler's policy,
// until it succeeds, is skipped, gives up or the engine stops, unless a
// run of the key succeeded already.
func (rn *runner) runForOperator(ctx context.Context, r operatorRun) operatorOutcome {
	operator, h := rn.def.Operator.Name, r.handler
	for attempt := 1; ; attempt++ {
		if done, err := rn.archive.Succeeded(ctx, r.key); err != nil || done {
			if err != nil && ctx.Err() == nil {
				r.log.Error(err, "reading the archive; the run is tried again in 5s")
				if sleep(ctx, notRecordedRetry) {
					attempt--
					continue
				}
			}
			return operatorOutcome{stopped: ctx.Err() != nil}
		}
		now := time.Now()
		run := &archive.Run{
			ID: archive.NewID(now), Operator: operator, Handler: h.Name, Action: h.Action(), Trigger: r.trigger,
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Name: operator, UID: r.uid,
			Key: r.key, Attempt: attempt, StartedAt: now.UTC(), Outcome: archive.Running,
		}
		bc := bindingContext{Operator: operator, Handler: h.Name, Trigger: r.trigger, RunID: run.ID, IdempotencyKey: r.key, Attempt: attempt}
		r.context(&bc)
		input, err := json.Marshal(bc)
		if err != nil {
			r.log.Error(err, "encoding the binding context")
			return operatorOutcome{}
		}
		outcome, refuse := rn.runOnce(ctx, h, run, input, r.log)
		switch outcome {
		case "":
			if ctx.Err() != nil {
				return operatorOutcome{stopped: true}
			}
			attempt-- // not recorded, so not run: try again
			if !sleep(ctx, notRecordedRetry) {
				return operatorOutcome{stopped: true}
			}
		case archive.Failed:
			// Until the time the run recorded, not its delay from now: a
			// clock stepped meanwhile counts.
			if !sleepUntil(ctx, rn.clock, rn.steps, run.NextRetryAt) {
				return operatorOutcome{run: run, stopped: true}
			}
		default:
			return operatorOutcome{run: run, refuse: refuse}
		}
	}
}

// runOnce records, executes and finishes one operator run; the outcome is
// "" when the archive could not record it (it did not run) or the engine
// stopped during it.
func (rn *runner) runOnce(ctx context.Context, h *definition.Handler, run *archive.Run, input []byte, log logr.Logger) (outcome archive.Outcome, refuse string) {
	select {
	case rn.slots <- struct{}{}:
	case <-ctx.Done():
		return "", ""
	}
	defer func() { <-rn.slots }()
	run.StartedAt = time.Now().UTC()
	if err := rn.archive.Insert(ctx, run); err != nil {
		log.Error(err, "the archive could not record the run; it did not run")
		return "", ""
	}
	log = log.WithValues("run", run.ID)
	alog := &archiveLog{ctx: ctx, store: rn.archive, id: run.ID}
	rn.metrics.inFlight.WithLabelValues(run.Operator).Inc()
	res, err := rn.executor(h.Name).Run(ctx, executor.Request{
		RunID: run.ID, Handler: h.Name, Trigger: run.Trigger, Key: run.Key, Attempt: run.Attempt, Input: input, Timeout: h.Timeout, Log: alog,
		Object: &executor.ObjectRef{APIVersion: run.APIVersion, Kind: run.Kind, Name: run.Name},
	})
	rn.metrics.inFlight.WithLabelValues(run.Operator).Dec()
	alog.Flush()
	now := time.Now().UTC()
	run.FinishedAt = now
	if ctx.Err() != nil {
		run.Outcome, run.Error = archive.Cancelled, "the operator stopped during the run"
		if err := rn.archive.Finish(context.WithoutCancel(ctx), run); err != nil {
			log.Error(err, "recording the cancelled run; the next engine marks it Cancelled")
		}
		return "", ""
	}
	failure := runFailure(res, err)
	switch {
	case failure != nil:
	case len(res.Status) > 0:
		failure = &executor.Failure{Message: fmt.Sprintf("the result sets status, but a run on %s is for the operator and has no object to write it to", run.Trigger), Permanent: true}
	case res.Refuse != "" && run.Trigger != v1alpha1.OnEvent:
		failure = refuseOutsideEvent(run.Trigger)
	}
	switch {
	case failure == nil && (res.Skipped || res.Refuse != ""):
		run.Outcome = archive.Skipped
		refuse = res.Refuse
	case failure == nil:
		run.Outcome = archive.Succeeded
	case failure.Permanent || run.Attempt >= h.Retry.MaxAttempts:
		run.Outcome, run.Error = archive.GaveUp, failure.Message
	default:
		run.Outcome, run.Error, run.NextRetryAt = archive.Failed, failure.Message, rn.clock.Now().UTC().Add(h.Retry.Delay(run.Attempt))
		rn.metrics.retries.WithLabelValues(run.Operator, h.Name).Inc()
	}
	if refuse != "" {
		run.Error = "refused the delivery: " + refuse
	}
	if failure == nil {
		for _, ev := range res.Events {
			rn.operatorEvent(ev.Type, ev.Reason, run.ID, ev.Message)
			run.Writes = append(run.Writes, "event "+ev.Type+" "+ev.Reason)
		}
	}
	if err := rn.archive.Finish(context.WithoutCancel(ctx), run); err != nil {
		log.Error(err, "the archive could not record the run's end", "outcome", run.Outcome)
	}
	if rn.finished != nil {
		rn.finished(*run)
	}
	rn.metrics.observe(run.Operator, run)
	switch run.Outcome {
	case archive.Failed:
		rn.operatorEvent(corev1.EventTypeWarning, "HandlerFailed", run.ID, fmt.Sprintf("handler %s failed (attempt %d of %d, next in %s): %s: run %s", h.Name, run.Attempt, h.Retry.MaxAttempts, h.Retry.Delay(run.Attempt).Round(time.Second), truncate(run.Error), rn.runRef(run.ID)))
	case archive.GaveUp:
		rn.operatorEvent(corev1.EventTypeWarning, "HandlerGaveUp", run.ID, fmt.Sprintf("handler %s gave up on %s after %d attempts: %s: run %s", h.Name, run.Key, run.Attempt, truncate(run.Error), rn.runRef(run.ID)))
	}
	return run.Outcome, refuse
}

// refuseOutsideEvent is the failure of a result that refuses, in a run
// that has no delivery to refuse.
func refuseOutsideEvent(trigger string) *executor.Failure {
	return &executor.Failure{Message: fmt.Sprintf("the result refuses, which turns down a webhook delivery in a run on event; this run is on %s: return skipped, or an error", trigger), Permanent: true}
}
