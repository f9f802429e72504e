package engine

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/executor"
)

// onRunner is a run's executor.Request.OnRunner: the runner that claimed
// it is recorded at once, so that a run in flight names it, and again
// with the run's end. It is called in the run's goroutine, which owns run
// until it ends.
func (rn *runner) onRunner(run *archive.Run) func(string) {
	return func(name string) {
		run.Runner = name
		if err := rn.archive.SetRunner(rn.ctx, run.ID, name); err != nil && rn.ctx.Err() == nil {
			rn.log.Error(err, "recording the runner of a run; its end records it", "run", run.ID, "runner", name)
		}
	}
}

// interrupted records a run whose end is not known (its runner was lost
// mid-run: executor.Interrupted) as Cancelled, and reports whether it was
// one. No attempt is counted and the handler's record is left as it was,
// so the step that follows runs it again with the same idempotency key, as
// an engine that restarts runs its interrupted runs again.
func (rn *runner) interrupted(ctx context.Context, cr *unstructured.Unstructured, f *flight) bool {
	var i *executor.Interrupted
	if !errors.As(f.err, &i) || f.run.ID == "" {
		return false
	}
	run := f.run
	run.Outcome, run.Error, run.FinishedAt = archive.Cancelled, i.Message, time.Now().UTC()
	if err := rn.archive.Finish(ctx, run); err != nil {
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", runAction(run.ID), "run %s ended %s, which the archive could not record (%v)", run.ID, run.Outcome, err)
	}
	if rn.finished != nil {
		rn.finished(*run)
	}
	rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "RunnerLost", runAction(run.ID), "handler %s: %s: run %s", f.cause.Handler.Name, truncate(run.Error), rn.runRef(run.ID))
	return true
}
