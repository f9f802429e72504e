package engine

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/run"
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

// Reasons of the Events on an Operator paused or resumed whole.
const (
	ReasonOperatorPaused  = "OperatorPaused"
	ReasonOperatorResumed = "OperatorResumed"
)

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
		p, reason, what := v1alpha1.ReadRequest(value), ReasonOperatorPaused, "paused"
		if !paused {
			p, reason, what = v1alpha1.ReadRequest(resumed), ReasonOperatorResumed, "resumed"
		}
		e.mgr.GetEventRecorder("opkit").Eventf(op, nil, corev1.EventTypeNormal, reason, "Pause", "%s",
			truncate(fmt.Sprintf("handlers of every object of operator %s %s by %s%s", op.Name, what, cmp.Or(p.By, "someone unknown"), run.ReasonSuffix(p.Reason))))
	}
	if paused || !hasResumed {
		return
	}
	patch := run.RemoveAnnotationPatch(v1alpha1.ResumedAnnotation, resumed)
	err := e.client.Patch(ctx, op.DeepCopy(), client.RawPatch(types.JSONPatchType, patch))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) { // gone, or changed: a newer resume
		e.mgr.GetLogger().Error(err, "removing the record of the operator's resume; the next reconcile removes it", "operator", op.Name)
	}
}
