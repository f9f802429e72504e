package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/inventory"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/request"
	"github.com/opkit-dev/opkit/internal/run"
)

// updateStatus writes the status fields, observedGeneration and the
// conditions, only when they changed. It returns the object as its write
// left it, also recorded in r.memory; nil when it wrote nothing.
func (r *reconciler) updateStatus(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, children []inventory.Ref, waiting, notReady []string, failure error, step *run.Step, sv *lifecycle.Visit) (*unstructured.Unstructured, error) {
	d := r.statusFor(cr, vars, children, waiting, notReady, failure, step, sv)
	oldStatus, _ := cr.Object["status"].(map[string]any)
	status, precondition := d.status, d.precondition
	if compare.SameValue(oldStatus, status) {
		return nil, nil // also a status written already: cr is read through r.memory
	}
	// Only what this reconcile changes is written: the object read may be
	// older than a handler's result, whose status fields a whole-status
	// patch would set back.
	newJSON, err := json.Marshal(compare.StatusDelta(oldStatus, status))
	if err != nil {
		return nil, err
	}
	head := []byte(`{"status":`)
	if precondition {
		// The state moves: only over the object it was decided from.
		rv, _ := json.Marshal(cr.GetResourceVersion())
		head = append(append([]byte(`{"metadata":{"resourceVersion":`), rv...), `},"status":`...)
	}
	patch := append(append(head, newJSON...), '}')
	// Patched as metadata: the API server answers with the object's
	// metadata only, in protobuf, which is cheaper for both sides to
	// encode and decode than the whole object as JSON; nothing reads the
	// answer but its error.
	answer, err := r.patch(ctx, r.def.GVK, cr.GetNamespace(), cr.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errGone
		}
		return nil, err
	}
	// The object as the write left it: what was read, with this status and
	// the answer's resourceVersion (the answer has no content to read).
	written := withStatus(cr, status)
	written.SetResourceVersion(answer.GetResourceVersion())
	r.memory.Record(written.DeepCopy()) // cr's maps are shared, and its caller's
	return written, nil
}

// desiredStatus is the status a reconcile writes.
type desiredStatus struct {
	status map[string]any
	// precondition: the write is made only over the resourceVersion read
	// (the object's state moves).
	precondition bool
}

// statusFor is the status a reconcile writes: the status fields,
// observedGeneration, opkit's own record (the inventory, the handlers')
// and the conditions, over the status read. It changes nothing cr holds.
func (r *reconciler) statusFor(cr *unstructured.Unstructured, vars definition.Vars, children []inventory.Ref, waiting, notReady []string, failure error, step *run.Step, sv *lifecycle.Visit) desiredStatus {
	// Read, not copied: nothing below changes what oldStatus holds.
	oldStatus, _ := cr.Object["status"].(map[string]any)
	status := make(map[string]any, len(oldStatus)+len(r.def.Status)+3)
	for k, v := range oldStatus {
		status[k] = v
	}
	if step != nil && step.Status != nil {
		run.MergeStatus(status, step.Status) // the run's result, in this one patch
	}
	for _, f := range r.def.Status {
		v, err := f.Evaluate(vars)
		if errors.Is(err, definition.ErrChildMissing) {
			continue // keep the last value until the child exists
		}
		if err != nil {
			failure = errors.Join(failure, err)
			continue
		}
		status[f.Name] = v
	}
	status["observedGeneration"] = cr.GetGeneration()
	own, _ := status["opkit"].(map[string]any)
	own = maps.Clone(own)
	if own == nil {
		own = map[string]any{}
	}
	if len(children) == 0 {
		delete(own, "children")
	} else {
		own["children"] = inventory.Generic(children)
	}
	if step != nil {
		step.State.WriteTo(own)
	}
	if r.rolloutHash != "" {
		own["definition"] = r.rolloutHash
	} else {
		delete(own, "definition")
	}
	if len(own) == 0 {
		delete(status, "opkit")
	} else {
		status["opkit"] = own
	}

	conds := compare.Conditions(cr)
	set := conditionsToSet(&conds, r.def.Operator.Name, waiting, notReady, failure, step)
	precondition := false
	if sv != nil {
		set, precondition = sv.WriteTo(status, set)
	}
	for _, c := range set {
		c.ObservedGeneration = cr.GetGeneration()
		meta.SetStatusCondition(&conds, c) // keeps lastTransitionTime when the status is unchanged
	}
	status["conditions"] = compare.ConditionValues(conds)
	return desiredStatus{status: status, precondition: precondition}
}

// withStatus is cr with status in place of its own, sharing cr's maps
// but its metadata and status.
func withStatus(cr *unstructured.Unstructured, status map[string]any) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: maps.Clone(cr.Object)}
	md, _ := cr.Object["metadata"].(map[string]any)
	out.Object["metadata"] = maps.Clone(md)
	out.Object["status"] = status
	return out
}

// conditionsToSet are the conditions a reconcile sets: Ready and
// Degraded, and with handlers Stalled and Paused (by the object or by its
// operator's pause, operator naming it); Paused is removed from
// conds while the handlers are not paused.
func conditionsToSet(conds *[]metav1.Condition, operator string, waiting, notReady []string, failure error, step *run.Step) []metav1.Condition {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "ChildrenReady", Message: "all children exist and are ready"}
	switch {
	case failure != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ReconcileFailed", cause.Truncate(failure.Error())
	case len(waiting) > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ChildrenPending", "waiting for: "+strings.Join(waiting, ", ")
	case step != nil && step.Stalled != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Stalled", step.Stalled
	case len(notReady) > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ChildrenNotReady", "not ready: "+strings.Join(notReady, ", ")
	}
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "NoErrors", Message: "the last reconcile succeeded"}
	if failure != nil {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, "ReconcileFailed", cause.Truncate(failure.Error())
	}
	set := []metav1.Condition{ready, degraded}
	if c, ok := stalledCondition(*conds, step); ok {
		set = append(set, c)
	}
	switch {
	case step != nil && step.Paused && step.OperatorPause != nil:
		set = append(set, metav1.Condition{Type: v1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: "OperatorPaused",
			Message: OperatorPausedMessage(operator, *step.OperatorPause)})
	case step != nil && step.Paused:
		set = append(set, metav1.Condition{Type: v1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: "PausedByAnnotation",
			Message: "handlers are paused: no run starts until the annotation " + v1alpha1.PauseAnnotation + " is removed"})
	default:
		meta.RemoveStatusCondition(conds, v1alpha1.ConditionPaused)
	}
	return set
}

// stalledCondition is the Stalled condition to set, if any: True while a
// handler has given up; False once it no longer has, for an object that
// was Stalled (lastTransitionTime says since when). An object that never
// was has none, which reads as False (kstatus): every status write of
// an operator with handlers is the smaller for it.
func stalledCondition(conds []metav1.Condition, step *run.Step) (metav1.Condition, bool) {
	switch {
	case step == nil:
		return metav1.Condition{}, false
	case step.Stalled != "":
		return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "HandlerGaveUp", Message: cause.Truncate(step.Stalled)}, true
	case meta.FindStatusCondition(conds, v1alpha1.ConditionStalled) != nil:
		return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: "NoStalledHandler", Message: "no handler has given up"}, true
	}
	return metav1.Condition{}, false
}

// OperatorPausedMessage is the Paused condition's message of an object
// paused by its Operator's pause p.
func OperatorPausedMessage(operator string, p v1alpha1.Pause) string {
	return cause.Truncate(fmt.Sprintf("handlers are paused with all of operator %s's, by %s%s: no run starts until it is resumed (opkit resume --operator %s --all)",
		operator, request.PauseOperator.Who(p.By), request.ReasonSuffix(p.Reason), operator))
}
