package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

const gatesOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: gates}
spec:
  resource:
    group: states.example.com
    kind: Gate
    versions:
    - name: v1
      schema: {type: object, properties: {ask: {type: boolean}}}
  status:
    seen: "${self.status.state.name}"
  states:
  - name: Open
    initial: true
    transitions:
    - {to: Asking, reason: Asked, when: "self.spec.ask"}
  - name: Asking
    needsPerson: {question: "Close the gate?"}
    transitions:
    - {to: Closed, reason: Closing, description: close it for good}
    - {to: Open, reason: Reopened}
  - {name: Closed, final: true}
`

// gateState reads a Gate's status.state and status.seen.
func gateState(t *testing.T, env *clustertest.Env, name string) (v1alpha1.ObjectState, *unstructured.Unstructured) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("states.example.com/v1")
	u.SetKind("Gate")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	raw, _, _ := unstructured.NestedMap(u.Object, "status", "state")
	data, _ := json.Marshal(raw)
	var s v1alpha1.ObjectState
	_ = json.Unmarshal(data, &s)
	return s, u
}

// annotate sets (or, with value "", removes) an annotation of the Gate.
func annotate(t *testing.T, env *clustertest.Env, name, key, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("states.example.com/v1")
	u.SetKind("Gate")
	u.SetNamespace(env.Namespace)
	u.SetName(name)
	if err := env.Client.Patch(t.Context(), u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func decisionJSON(d v1alpha1.Decision) string {
	data, _ := json.Marshal(d)
	return string(data)
}

// TestStateDecisionsRecoveryAndPause: a transition written by an engine
// that died before recording it is recorded by the next engine from
// status.state; a stale decision is refused with a Warning and removed; a
// decision waits while the object is paused, saying so, and is taken, with
// who and why, once it is resumed; status fields read the state entered.
func TestStateDecisionsRecoveryAndPause(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "gates.yaml")
	if err := os.WriteFile(file, []byte(gatesOperator), 0o644); err != nil {
		t.Fatal(err)
	}
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)

	g := &unstructured.Unstructured{}
	g.SetAPIVersion("states.example.com/v1")
	g.SetKind("Gate")
	g.SetNamespace(env.Namespace)
	g.SetName("front")
	_ = unstructured.SetNestedField(g.Object, false, "spec", "ask")
	create(t, env, g)
	waitGate := func(what string, ok func(v1alpha1.ObjectState, *unstructured.Unstructured) bool) (v1alpha1.ObjectState, *unstructured.Unstructured) {
		t.Helper()
		var s v1alpha1.ObjectState
		var u *unstructured.Unstructured
		eventually(t, 30*time.Second, what, func(context.Context) (bool, error) {
			s, u = gateState(t, env, "front")
			return ok(s, u), nil
		})
		return s, u
	}
	_, u := waitGate("front Open", func(s v1alpha1.ObjectState, u *unstructured.Unstructured) bool {
		seen, _, _ := unstructured.NestedString(u.Object, "status", "seen")
		return s.Name == "Open" && s.Seq == 1 && seen == "Open"
	})
	uid := string(u.GetUID())
	eventually(t, 30*time.Second, "the initial state recorded", func(ctx context.Context) (bool, error) {
		return store.Succeeded(ctx, uid+"/state/1")
	})

	// An engine that wrote the transition to Asking and died before its
	// record: the status says it, the archive does not.
	stop()
	lost := v1alpha1.ObjectState{Name: "Asking", Seq: 2, Since: time.Now().UTC().Format(time.RFC3339), Reason: "Asked", From: "Open", Trigger: v1alpha1.TransitionGuard,
		Run: archive.NewID(time.Now()), Question: "Close the gate?", Choices: []string{"Closed", "Open"}}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"state": lost}})
	if err := env.Client.Status().Patch(t.Context(), u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file) // stopped when the test ends
	eventually(t, 30*time.Second, "the lost transition recorded", func(ctx context.Context) (bool, error) {
		ok, err := store.Succeeded(ctx, uid+"/state/2")
		return ok, err
	})
	rec, err := store.Get(t.Context(), lost.Run)
	if err != nil {
		t.Fatalf("the record of the lost transition is not under its status.state.run %s: %v", lost.Run, err)
	}
	if rec.Handler != v1alpha1.TransitionHandler || rec.Trigger != v1alpha1.TransitionGuard || len(rec.Diff) != 1 || rec.Diff[0].Old != "Open" || rec.Diff[0].New != "Asking" {
		t.Errorf("the recovered record: %+v", rec)
	}
	// Its log is written right after the record: it may follow the
	// record's Succeeded by a moment.
	eventually(t, 30*time.Second, "the recovered record's log saying why", func(ctx context.Context) (bool, error) {
		l, err := store.Logs(ctx, lost.Run, 0)
		return err == nil && strings.Contains(string(l.Data), "recorded from status.state"), err
	})

	// A decision for another visit: refused, removed, nothing moves.
	annotate(t, env, "front", v1alpha1.DecisionAnnotation, decisionJSON(v1alpha1.Decision{State: "Asking", Seq: 1, Choose: "Closed", Reason: "old", By: "ann"}))
	waitGate("the stale decision removed", func(s v1alpha1.ObjectState, u *unstructured.Unstructured) bool {
		_, has := u.GetAnnotations()[v1alpha1.DecisionAnnotation]
		return !has
	})
	eventually(t, 30*time.Second, "a DecisionRefused Event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, env, "front", "DecisionRefused", "visit 1"), nil
	})
	if s, _ := gateState(t, env, "front"); s.Name != "Asking" || s.Seq != 2 {
		t.Fatalf("after a stale decision: %+v, want Asking at seq 2", s)
	}

	// Paused: a valid decision waits.
	annotate(t, env, "front", v1alpha1.PauseAnnotation, "true")
	annotate(t, env, "front", v1alpha1.DecisionAnnotation, decisionJSON(v1alpha1.Decision{State: "Asking", Seq: 2, Choose: "Closed", Reason: "winter", By: "bob"}))
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		s, u := gateState(t, env, "front")
		if _, has := u.GetAnnotations()[v1alpha1.DecisionAnnotation]; s.Name != "Asking" || !has {
			t.Fatalf("while paused: %+v, annotations %v; want Asking, the decision kept", s, u.GetAnnotations())
		}
	}
	// It says why it waits, once.
	eventually(t, 30*time.Second, "a DecisionWaits Event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, env, "front", "DecisionWaits", "the decision of bob (Asking, visit 2: choose Closed) waits: the object is paused"), nil
	})
	annotate(t, env, "front", v1alpha1.PauseAnnotation, "")
	// The decision is removed by a write after the transition's: both
	// are waited for.
	closed, _ := waitGate("front Closed, the decision taken removed", func(s v1alpha1.ObjectState, u *unstructured.Unstructured) bool {
		seen, _, _ := unstructured.NestedString(u.Object, "status", "seen")
		_, has := u.GetAnnotations()[v1alpha1.DecisionAnnotation]
		return s.Name == "Closed" && seen == "Closed" && !has
	})
	if closed.Seq != 3 || closed.Trigger != v1alpha1.TransitionDecision || closed.By != "bob" || closed.Message != "winter" || closed.Reason != "Closing" {
		t.Errorf("closed: %+v; want seq 3 by bob (winter), reason Closing", closed)
	}
	rec, err = store.Get(t.Context(), closed.Run)
	if err != nil || rec.Actor != "bob" || rec.Trigger != v1alpha1.TransitionDecision || rec.Key != uid+"/state/3" {
		t.Errorf("the decision's record: %+v (%v); want actor bob, trigger decision, key %s/state/3", rec, err, uid)
	}
	eventually(t, 30*time.Second, "a Decided Event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, env, "front", "Decided", "bob chose Closed in Asking: winter"), nil
	})
	page, err := store.List(t.Context(), archive.Query{UID: uid, Handler: v1alpha1.TransitionHandler})
	if err != nil || len(page.Runs) != 3 {
		t.Errorf("transition records: %+v (%v); want 3 (initial, the recovered one, the decision)", page, err)
	}
}

// hasEvent reports whether an Event of reason whose message holds text is
// about the object name.
func hasEvent(ctx context.Context, env *clustertest.Env, name, reason, text string) bool {
	var events corev1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}
