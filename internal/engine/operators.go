package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/rollout"
)

// Reasons of an Operator's Ready condition.
const (
	ReasonRunning     = "Running"
	ReasonInvalid     = "InvalidDefinition"
	ReasonApplyFailed = "ApplyFailed"
	// ReasonRolloutPaused and ReasonRolledBack: the operator runs, and
	// its rollout waits for a person (rollout.Note).
	ReasonRolloutPaused = rollout.ReasonPaused
	ReasonRolledBack    = rollout.ReasonRolledBack
)

// WatchOperators installs the CRD of operators.opkit.dev and runs every
// Operator object of the cluster (those of Options.OperatorSelector, when
// set; the others' status is left alone) until ctx ends: an Operator created or
// changed is compiled and applied (its controller restarted), a deleted one
// is removed (its CRD and custom resources stay). Each Operator's status
// says whether it runs: Ready=True with reason Running, or Ready=False and
// Degraded=True with reason InvalidDefinition (every error, by field; it is
// not retried until the Operator changes, and the last valid generation, if
// one ran, keeps running), BreakingChange (its CRD would break the
// installed one's clients or lose data, and Options.AllowBreaking is
// false: each change by field; checked again each minute, the last
// generation that ran keeps running) or ApplyFailed (retried with
// back-off). An invalid Operator never stops the others.
//
// Call it after Run has started, and not together with Apply for the same
// names.
func (e *Engine) WatchOperators(ctx context.Context) error {
	if err := e.waitStarted(ctx); err != nil {
		return err
	}
	if err := e.crds.Own(ctx, v1alpha1.CustomResourceDefinition(), v1alpha1.Kind); err != nil {
		return err
	}
	c, err := controller.NewTypedUnmanaged("operators", e.queues.Options(&operatorReconciler{engine: e}, 1))
	if err != nil {
		return err
	}
	if err := c.Watch(source.Kind[client.Object](e.mgr.GetCache(), &v1alpha1.Operator{}, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.stopped: // the engine stopped: so does the watch
			cancel()
		case <-watchCtx.Done():
		}
	}()
	err = c.Start(watchCtx)
	if ctx.Err() == nil && watchCtx.Err() != nil {
		return errStopped
	}
	return err
}

// selects reports whether this engine runs op: every Operator, or those
// that Options.OperatorSelector matches.
func (e *Engine) selects(op *v1alpha1.Operator) bool {
	return e.opts.OperatorSelector == nil || e.opts.OperatorSelector.Matches(labels.Set(op.Labels))
}

type operatorReconciler struct {
	engine *Engine
}

func (r *operatorReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	e := r.engine
	op := &v1alpha1.Operator{}
	if err := e.client.Get(ctx, req.NamespacedName, op); err != nil {
		if client.IgnoreNotFound(err) == nil {
			e.Remove(ctx, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if op.DeletionTimestamp != nil || !e.selects(op) {
		// Deleted, or another engine's (Options.OperatorSelector): one
		// that stopped matching stops here, as a deleted one does.
		e.Remove(ctx, req.Name)
		return reconcile.Result{}, nil
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonRunning}
	var crdName string
	running := e.running.definition(op.Name)
	if running != nil && running.Operator.UID == op.UID && running.Operator.Generation == op.Generation {
		crdName = crdOf(running) // unchanged: nothing to restart
	} else if d, err := definition.Compile(definition.FromCluster(op)); err != nil {
		// Waits for the Operator to change. A previous generation that ran
		// keeps running: a typo does not stop a working operator.
		msg := err.Error()
		if running != nil && running.Operator.UID == op.UID {
			crdName = crdOf(running)
			msg = fmt.Sprintf("generation %d keeps running; generation %d is invalid: %s", running.Operator.Generation, op.Generation, msg)
		} else {
			e.Remove(ctx, op.Name)
		}
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonInvalid, cause.Truncate(msg)
	} else if err := e.Apply(ctx, d); err != nil {
		if _, breaking := errors.AsType[*BreakingChangeError](err); breaking {
			// Waits for the Operator to change, or for the installed CRD
			// to (its stored versions migrated): checked again each
			// minute. A previous generation that ran keeps running.
			msg := err.Error()
			if running != nil && running.Operator.UID == op.UID {
				crdName = crdOf(running)
				msg = fmt.Sprintf("generation %d keeps running; generation %d is refused: %s", running.Operator.Generation, op.Generation, msg)
			}
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonBreakingChange, cause.Truncate(msg)
			return reconcile.Result{RequeueAfter: time.Minute}, r.setStatus(ctx, op, ready, crdName)
		}
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonApplyFailed, cause.Truncate(err.Error())
		if serr := r.setStatus(ctx, op, ready, ""); serr != nil {
			err = errors.Join(err, serr)
		}
		return reconcile.Result{}, err // retried with back-off: the cluster may change
	} else {
		crdName = crdOf(d)
	}
	e.takePause(ctx, op)
	e.takeRunNow(ctx, op)
	if ready.Status == metav1.ConditionTrue {
		ready.Message = runningMessage(e.running.definition(op.Name), crdName)
	}
	return reconcile.Result{}, r.setStatus(ctx, op, ready, crdName)
}

// runningMessage is the message of a running operator's Ready.
func runningMessage(d *definition.Definition, crdName string) string {
	if d != nil && !d.Owns() {
		return "running: " + d.What()
	}
	return "the controller of " + crdName + " is running"
}

// crdOf is the name of an operator's CRD, or "" when it owns none.
func crdOf(d *definition.Definition) string {
	if !d.Owns() {
		return ""
	}
	return d.CRD().Name
}

// setStatus writes the Operator's conditions when they changed.
func (r *operatorReconciler) setStatus(ctx context.Context, op *v1alpha1.Operator, ready metav1.Condition, crdName string) error {
	status := op.Status.DeepCopy()
	status.ObservedGeneration = op.Generation
	status.CRD = crdName
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonRunning, Message: "no errors"}
	if ready.Status == metav1.ConditionTrue {
		// A rollout that waits for a person says so: the operator runs,
		// and is not as its definition says.
		if note := r.engine.running.rolloutNote(op.Name); note != nil {
			ready.Reason, ready.Message = note.Reason, cause.Truncate(note.Message)
			degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, note.Reason, ready.Message
		}
	} else {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, ready.Reason, ready.Message
	}
	for _, c := range []metav1.Condition{ready, degraded} {
		c.ObservedGeneration = op.Generation
		meta.SetStatusCondition(&status.Conditions, c)
	}
	if reflect.DeepEqual(compare.Normalize(op.Status), compare.Normalize(*status)) {
		return nil
	}
	before := op.DeepCopy()
	op.Status = *status
	return client.IgnoreNotFound(r.engine.client.Status().Patch(ctx, op, client.MergeFrom(before)))
}
