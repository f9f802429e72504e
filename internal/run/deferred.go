package run

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// A run's result that sets status is written, in a custom resource's
// reconcile, with the status patch the reconcile makes anyway: the
// handler's record (status.opkit), the status fields and the conditions
// in one write, not two (StepWriting). The run is judged as if its patch
// had been written; if the reconcile's patch is refused, the step is
// undone (StatusRefused) and the run recorded again as failed by the
// API's refusal, as it is when its own patch is refused.

// deferral is a finished run's result kept for the caller's patch.
type deferral struct {
	flight *flight
	// before is the handler state before the run was recorded: what
	// StatusRefused puts back.
	before *cause.State
	status map[string]any
	events []executor.Event
}

// StepWriting is Step for a caller that writes the object's status after
// the step (a custom resource's reconcile): a finished run's result
// status is not patched on its own, but returned in Step.Status for the
// caller to merge into its own patch (MergeStatus), and its Events wait
// for that patch. The caller then calls Written once the patch is made
// (or nothing needed writing), or StatusRefused with the API's error; it
// launches Step.Start only after Written. An operator with states
// (spec.states) writes a result as Step does: its patch is made over the
// resourceVersion the state was decided from.
func (rn *Runner) StepWriting(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars) (*Step, error) {
	return rn.step(ctx, cr, vars, !rn.watched && rn.def.States == nil, nil)
}

// Written posts the Events of the result the caller's patch wrote.
func (rn *Runner) Written(cr *unstructured.Unstructured, s *Step) {
	if s == nil || s.deferred == nil {
		return
	}
	for _, e := range s.deferred.events {
		rn.events.Eventf(cr, nil, e.Type, e.Reason, runAction(s.deferred.flight.run.ID), "%s", e.Message)
	}
	f := s.deferred.flight
	f.span.AddEvent("status written")
	endRunSpan(f.span, f.run)
	s.deferred = nil
}

// StatusRefused undoes a step whose caller's patch, with the result's
// status, failed: the handler state is put back as it was before the run
// was recorded, a run the step prepared is dropped (it never started: do
// not launch it), and the next step records the run again. When the API
// refused the patch's content (invalid, a bad request, too large), the
// run is then failed by the refusal (retried by its policy), as when its
// own patch is refused; after another error (the API unreachable, the
// object gone), it is recorded as it was judged, and its result written
// then. Its archive record, already finished, is finished again; a
// HandlerSucceeded Event (RunEvents) posted for it stays.
func (rn *Runner) StatusRefused(cr *unstructured.Unstructured, s *Step, err error) {
	if s == nil || s.deferred == nil {
		return
	}
	d := s.deferred
	if p := s.Start; p != nil {
		// Never started: its span ends here, unexported work aside.
		tracing.Fail(p.f.span, "not started: the status patch before it was refused")
		p.f.span.End()
	}
	s.deferred, s.Start = nil, nil
	if Refusal(err) {
		d.flight.err = &executor.Failure{Message: fmt.Sprintf("the API refused the result's status patch: %v", APIMessage(err))}
	}
	rn.mem.mu.Lock()
	o := rn.mem.object(cr)
	o.flight, o.written = d.flight, d.before
	rn.mem.mu.Unlock()
	rn.Wake(cr)
}

// Refusal reports whether err is the API refusing a write's content, which
// writing it again cannot help.
func Refusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// MergeStatus applies patch to status as a JSON merge patch of the status
// would (a nil value removes its key, maps merge), without changing a map
// status shares with another: each map it changes is copied first.
func MergeStatus(status, patch map[string]any) {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(status, k)
		case map[string]any:
			cur, _ := status[k].(map[string]any)
			next := maps.Clone(cur)
			if next == nil {
				next = map[string]any{}
			}
			MergeStatus(next, pv)
			status[k] = next
		default:
			status[k] = v
		}
	}
}

// WithStatus is cr with patch merged into its status: the object as the
// patch would leave it, sharing no map that changes with cr.
func WithStatus(cr *unstructured.Unstructured, patch map[string]any) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: maps.Clone(cr.Object)}
	status, _ := cr.Object["status"].(map[string]any)
	status = maps.Clone(status)
	if status == nil {
		status = map[string]any{}
	}
	MergeStatus(status, patch)
	out.Object["status"] = status
	return out
}
