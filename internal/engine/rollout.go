package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/rollout"
)

// Staged rollouts (spec.rollout) are internal/rollout's: the engine gives
// a rollout its clients and what it needs of the engine, runs the two
// definitions it says in an operator's controller (start), and
// writes its note on the Operator.

// rolloutConfig is what the rollout of d needs of the engine.
func (e *Engine) rolloutConfig(d *definition.Definition) rollout.Config {
	return rollout.Config{
		Client: e.client, Reader: e.mgr.GetAPIReader(), Namespace: e.opts.Namespace,
		Clock: e.opts.Clock, Log: e.mgr.GetLogger(),
		InstallCRD: func(ctx context.Context) error { return e.crds.Own(ctx, v1alpha1.RolloutCRD(), v1alpha1.RolloutKind) },
		Compile:    e.typed,
		Noted:      func(ctx context.Context) error { return e.noteOnOperator(ctx, d) },
	}
}

// noteOnOperator writes the note of d's rollout on its Operator's
// conditions, as its reconcile would (setStatus): an Operator that is not
// Ready for another reason keeps that.
func (e *Engine) noteOnOperator(ctx context.Context, d *definition.Definition) error {
	op := &v1alpha1.Operator{}
	if err := e.client.Get(ctx, client.ObjectKey{Name: d.Operator.Name}, op); err != nil {
		return client.IgnoreNotFound(err)
	}
	ready := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != op.Generation {
		return nil // its reconcile writes it, with the note
	}
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonRunning, Message: runningMessage(d, op.Status.CRD)}
	return (&operatorReconciler{engine: e}).setStatus(ctx, op, c, op.Status.CRD)
}
