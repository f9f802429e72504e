package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// An Operator whose rollout waits for a person says so where kubectl get
// operators shows it: paused, Ready's reason is RolloutPaused; undone,
// RolledBack, naming the definition its objects run; Degraded is True
// with the same words, and the operator still runs. A good definition
// after it puts Running and "no errors" back. (One at a time with the
// other tests that run the cluster's Operators: runsClusterOperators.)
func TestAnOperatorSaysItsRolloutIsPausedOrUndone(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	e := startEngine(t, env)
	watchOperators(t, e)
	c := env.Client
	put := func(def, extra string) {
		t.Helper()
		putOperator(t, c, operatorObject(t, pagesYAML(def, extra)))
	}
	put("one", "")
	waitOperator(t, c, "pages", metav1.ConditionTrue, engine.ReasonRunning)
	for i := range 4 {
		create(t, env, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rollout.example.com/v1", "kind": "Page",
			"metadata": map[string]any{"name": fmt.Sprintf("page%02d", i), "namespace": env.Namespace},
			"spec":     map[string]any{"text": "x"},
		}})
	}
	waitRollout(t, env, time.Minute, "the first definition complete", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutComplete })

	conditions := func(op *v1alpha1.Operator) (ready, degraded *metav1.Condition) {
		return meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady), meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionDegraded)
	}
	put("two", brokenChild)
	waitRollout(t, env, time.Minute, "the broken definition's rollout paused", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutPaused })
	ready, degraded := conditions(waitOperator(t, c, "pages", metav1.ConditionTrue, engine.ReasonRolloutPaused))
	if !strings.Contains(ready.Message, "is paused") || !strings.Contains(ready.Message, "opkit rollout continue pages") ||
		degraded == nil || degraded.Status != metav1.ConditionTrue || degraded.Reason != engine.ReasonRolloutPaused {
		t.Errorf("paused: Ready %+v, Degraded %+v; want Ready True RolloutPaused saying what to do, Degraded True", ready, degraded)
	}

	requestRollout(t, env, v1alpha1.RolloutUndo)
	r := waitRollout(t, env, time.Minute, "the rollout undone", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutRolledBack })
	ready, degraded = conditions(waitOperator(t, c, "pages", metav1.ConditionTrue, engine.ReasonRolledBack))
	if !strings.Contains(ready.Message, "running definition "+r.Status.From.Hash) || degraded == nil || degraded.Status != metav1.ConditionTrue {
		t.Errorf("undone: Ready %+v, Degraded %+v; want Ready True RolledBack naming %s, Degraded True", ready, degraded, r.Status.From.Hash)
	}

	put("three", "")
	waitRollout(t, env, 2*time.Minute, "the good definition complete", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutComplete })
	eventually(t, time.Minute, "Running and no errors again", func(ctx context.Context) (bool, error) {
		op := &v1alpha1.Operator{}
		if err := c.Get(ctx, client.ObjectKey{Name: "pages"}, op); err != nil {
			return false, err
		}
		ready, degraded := conditions(op)
		return ready != nil && ready.Reason == engine.ReasonRunning && degraded != nil && degraded.Status == metav1.ConditionFalse, nil
	})
	if err := c.Delete(t.Context(), &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: "pages"}}); err != nil {
		t.Error(err)
	}
}
