package engine

import (
	"context"
	"fmt"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/request"
)

// A whole operator is paused by v1alpha1.PauseAnnotation on its Operator
// (opkit pause --operator OP --all), which only an Operator read from the
// cluster has. An annotation does not change the Operator's generation:
// the Operator reconcile, which only the leader runs, hands the pause to
// the running operator's runner (run.Runner.PauseOperator) without
// restarting it; a runner started while the annotation is there starts
// paused. While paused, no handler of any of its objects starts (each is
// recorded paused once, naming the operator's pause, and its Paused
// condition says so), no operator-wide schedule's slot runs (one that came
// due runs at the resume, by its catchUp), and a request to run one now
// is refused. opkit resume --operator OP --all removes the annotation and
// sets v1alpha1.ResumedAnnotation, saying who resumed it; the runner keeps
// it for the records of the resume and the engine removes it.

// takePause hands the pause of op, as its annotations say, to the runner
// of the operator running it (same UID), posts an Event on op when it
// changed, and removes op's v1alpha1.ResumedAnnotation once handed over.
func (e *Engine) takePause(ctx context.Context, op *v1alpha1.Operator) {
	running := e.running.get(op.Name)
	if running == nil || len(running.runners()) == 0 || running.def.Operator.UID != op.UID {
		return // the annotation is read when it starts (run.New)
	}
	value, paused := op.Annotations[v1alpha1.PauseAnnotation]
	resumed, hasResumed := op.Annotations[v1alpha1.ResumedAnnotation]
	changed := false
	for _, rn := range running.runners() {
		changed = rn.PauseOperator(value, paused, resumed) || changed
	}
	if changed {
		p, k, what := v1alpha1.ReadRequest(value), request.PauseOperator, "paused"
		if !paused {
			p, k, what = v1alpha1.ReadRequest(resumed), request.ResumeOperator, "resumed"
		}
		k.Answer(e.mgr.GetEventRecorder("opkit"), op, k.Taken,
			fmt.Sprintf("handlers of every object of operator %s %s by %s%s", op.Name, what, k.Who(p.By), request.ReasonSuffix(p.Reason)))
	}
	if paused || !hasResumed {
		return
	}
	// Gone, or changed (a newer resume): not an error.
	if err := request.Remove(ctx, e.client, op.DeepCopy(), v1alpha1.ResumedAnnotation, resumed); err != nil {
		e.mgr.GetLogger().Error(err, "removing the record of the operator's resume; the next reconcile removes it", "operator", op.Name)
	}
}
