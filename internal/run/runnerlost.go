package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/executor"
)

// onRunner is a run's executor.Request.OnRunner: the runner Pod that
// claimed it goes with the run's end (run.Runner); a run that lasts past
// runnerNamedAfter has it recorded before, so that a run in flight names
// it, while a short run's end records it without a write of its own.
// claimed is called in the run's goroutine, which owns run until it
// ends; ended, once the executor returned, cancels the early record.
func (rn *Runner) onRunner(run *archive.Run) (claimed func(string), ended func()) {
	var mu sync.Mutex
	var early *time.Timer
	over := false
	claimed = func(name string) {
		run.Runner = name
		id := run.ID
		mu.Lock()
		defer mu.Unlock()
		if over {
			return
		}
		early = time.AfterFunc(runnerNamedAfter, func() {
			if err := rn.archive.SetRunner(rn.ctx, id, name); err != nil && rn.ctx.Err() == nil {
				rn.log.Error(err, "recording the runner of a run; its end records it", "run", id, "runner", name)
			}
		})
	}
	ended = func() {
		mu.Lock()
		defer mu.Unlock()
		over = true
		if early != nil {
			early.Stop()
		}
	}
	return claimed, ended
}

// runnerNamedAfter is how long a run on a runner goes before the archive
// names its runner: as soon as its log's first lines show.
const runnerNamedAfter = logFlushEvery

// lostRunner is the outcome of a run whose end is not known, its runner
// Pod lost mid-run (executor.Interrupted): Cancelled, so that it runs
// again with its key and no attempt counted, as a run the engine's stop
// cut off does. ok is false for any other end.
func lostRunner(err error) (o Outcome, ok bool) {
	var i *executor.Interrupted
	if !errors.As(err, &i) {
		return Outcome{}, false
	}
	return Outcome{Verdict: Cancelled, Reason: i.Message}, true
}

// interrupted records an object's run whose runner was lost as Cancelled,
// and reports whether it was one. The handler's record is left as it was,
// so the step that follows runs it again with the same idempotency key.
func (rn *Runner) interrupted(ctx context.Context, cr *unstructured.Unstructured, f *flight) bool {
	o, ok := lostRunner(f.err)
	if !ok || f.run.ID == "" {
		return false
	}
	run := f.run
	run.Outcome, run.Error, run.FinishedAt = archive.Cancelled, o.Reason, time.Now().UTC()
	if err := rn.recordEnd(ctx, run, f.log); err != nil {
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", runAction(run.ID), "run %s ended %s, which the archive could not record (%v)", run.ID, run.Outcome, err)
	}
	rn.ended(run)
	endRunSpan(f.span, run)
	rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "RunnerLost", runAction(run.ID), "handler %s: %s: run %s", f.cause.Handler.Name, cause.Truncate(run.Error), rn.runRef(run.ID))
	return true
}

// operatorRunLost records an operator run whose runner was lost as
// Cancelled; RunForOperator runs it again at once with its key.
func (rn *Runner) operatorRunLost(ctx context.Context, run *archive.Run, l *archiveLog, o Outcome, log interface{ Error(error, string, ...any) }) {
	run.Outcome, run.Error = archive.Cancelled, o.Reason
	if err := rn.recordEnd(context.WithoutCancel(ctx), run, l); err != nil {
		log.Error(err, "the archive could not record the run's end", "outcome", run.Outcome)
	}
	rn.ended(run)
	rn.operatorEvent(corev1.EventTypeWarning, "RunnerLost", run.ID, fmt.Sprintf("handler %s: %s: run %s", run.Handler, cause.Truncate(run.Error), rn.runRef(run.ID)))
}
