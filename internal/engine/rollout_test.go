package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// pagesV1 is an operator with a staged rollout: a Page has a ConfigMap
// whose data says which definition wrote it.
const pagesV1 = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: pages}
spec:
  resource:
    group: rollout.example.com
    kind: Page
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
  rollout:
    steps: [{count: 2}, {percent: 50}]
    settle: 2s
  children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-content"}
      data: {text: "${self.spec.text}", definition: "one"}
`

// pagesYAML is pagesV1 with the ConfigMap's definition key set to def,
// and extra appended to the children.
func pagesYAML(def, extra string) string {
	return strings.Replace(pagesV1, `definition: "one"}`, fmt.Sprintf(`definition: %q}`, def), 1) + extra
}

// brokenChild is a child the API server refuses: a ConfigMap key cannot
// hold a space.
const brokenChild = `  - id: broken
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-broken"}
      data: {"not a key": "x"}
`

// readRollout reads the Rollout of the pages operator of env's engine.
func readRollout(t *testing.T, env *clustertest.Env) *v1alpha1.RolloutObject {
	t.Helper()
	return readRolloutOf(t, env, "pages")
}

// readRolloutOf reads the Rollout of the operator op of env's engine.
func readRolloutOf(t *testing.T, env *clustertest.Env, op string) *v1alpha1.RolloutObject {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: op + "." + env.Namespace}, u); err != nil {
		t.Fatal(err)
	}
	r, err := v1alpha1.ReadRollout(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRollout waits until the Rollout of the pages operator satisfies
// ok, and returns it.
func waitRollout(t *testing.T, env *clustertest.Env, within time.Duration, what string, ok func(*v1alpha1.RolloutStatus) bool) *v1alpha1.RolloutObject {
	t.Helper()
	return waitRolloutOf(t, env, "pages", within, what, ok)
}

// waitRolloutOf waits until the Rollout of the operator op satisfies ok,
// and returns it.
func waitRolloutOf(t *testing.T, env *clustertest.Env, op string, within time.Duration, what string, ok func(*v1alpha1.RolloutStatus) bool) *v1alpha1.RolloutObject {
	t.Helper()
	var last *v1alpha1.RolloutObject
	eventually(t, within, what, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
		if err := env.Client.Get(ctx, client.ObjectKey{Name: op + "." + env.Namespace}, u); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		r, err := v1alpha1.ReadRollout(u)
		if err != nil {
			return false, err
		}
		last = r
		return ok(&r.Status), nil
	})
	return last
}

// requestRollout asks the rollout for req, as opkit rollout does.
func requestRollout(t *testing.T, env *clustertest.Env, req string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	u.SetName("pages." + env.Namespace)
	patch := fmt.Appendf(nil, `{"spec": {"request": %q, "requestedBy": "a test"}}`, req)
	if err := env.Client.Patch(t.Context(), u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// pagesState returns, for each Page, the definition its status says it
// is on and its ConfigMap's definition key.
func pagesState(t *testing.T, env *clustertest.Env) (on, content map[string]string) {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("rollout.example.com/v1")
	list.SetKind("PageList")
	if err := env.Client.List(t.Context(), list, client.InNamespace(env.Namespace)); err != nil {
		t.Fatal(err)
	}
	on, content = map[string]string{}, map[string]string{}
	for _, p := range list.Items {
		on[p.GetName()], _, _ = unstructured.NestedString(p.Object, "status", "opkit", "definition")
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: p.GetName() + "-content"}, cm); err == nil {
			content[p.GetName()] = cm.Data["definition"]
		}
	}
	return on, content
}

// TestARolloutPausesOnItsCanaryAndIsUndoneAndAGoodOneGoesThrough: 20
// Pages; a definition whose new child the API server refuses reaches the
// canary's 2, which go Degraded, and the rollout pauses with the 18
// others untouched; undo returns the 2 to the previous children; a good
// definition then goes through every step, and an engine restarted
// mid-rollout goes on from its step.
func TestARolloutPausesOnItsCanaryAndIsUndoneAndAGoodOneGoesThrough(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	opts := engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: newArchive(t)}
	e, stop := runEngineWith(t, opts)
	ctx := t.Context()
	one := compileYAML(t, pagesYAML("one", ""))
	if err := e.Apply(ctx, one); err != nil {
		t.Fatal(err)
	}
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("page%02d", i)
		create(t, env, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rollout.example.com/v1", "kind": "Page",
			"metadata": map[string]any{"name": names[i], "namespace": env.Namespace},
			"spec":     map[string]any{"text": names[i]},
		}})
	}
	r := waitRollout(t, env, 30*time.Second, "the Rollout of the first definition", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutComplete })
	if r.Status.To.Hash != one.Hash() || r.Status.MovedCount != 0 {
		t.Fatalf("the first definition's Rollout: %+v; want Complete on %s with nothing moved", r.Status, one.Hash())
	}
	eventually(t, time.Minute, "every Page on the first definition", func(context.Context) (bool, error) {
		on, content := pagesState(t, env)
		for _, name := range names {
			if on[name] != one.Hash() || content[name] != "one" {
				return false, nil
			}
		}
		return true, nil
	})

	// A broken definition: the canary's 2 go Degraded, and it pauses.
	broken := compileYAML(t, pagesYAML("two", brokenChild))
	if err := e.Apply(ctx, broken); err != nil {
		t.Fatal(err)
	}
	r = waitRollout(t, env, time.Minute, "the broken definition's rollout paused", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutPaused })
	if want := []string{env.Namespace + "/page00", env.Namespace + "/page01"}; !slices.Equal(r.Status.Moved, want) || r.Status.Step != 1 || r.Status.Steps != 3 {
		t.Errorf("paused at step %d of %d with %v moved; want step 1 of 3 with %v", r.Status.Step, r.Status.Steps, r.Status.Moved, want)
	}
	if !strings.Contains(r.Status.Reason, "Degraded") || !strings.Contains(r.Status.Reason, "not a key") {
		t.Errorf("paused because %q; want the canary's Degraded, naming the refused key", r.Status.Reason)
	}
	time.Sleep(3 * time.Second) // more than settle: nothing moves while paused
	on, content := pagesState(t, env)
	for _, name := range names {
		canary := name == "page00" || name == "page01"
		switch {
		case canary && (on[name] != broken.Hash() || content[name] != "two"):
			t.Errorf("canary %s is on %q with content %q; want %s and two", name, on[name], content[name], broken.Hash())
		case !canary && (on[name] != one.Hash() || content[name] != "one"):
			t.Errorf("%s is on %q with content %q; want the first definition's %s and one", name, on[name], content[name], one.Hash())
		}
	}
	if r := readRollout(t, env); r.Status.Phase != v1alpha1.RolloutPaused || r.Status.MovedCount != 2 {
		t.Errorf("the rollout went on while paused: %+v", r.Status)
	}

	// Undo: the canary returns to the first definition's children.
	requestRollout(t, env, v1alpha1.RolloutUndo)
	r = waitRollout(t, env, 30*time.Second, "the rollout undone", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutRolledBack })
	if r.Spec.Request != "" || !strings.Contains(r.Status.Reason, "undone by a test") || r.Status.MovedCount != 0 {
		t.Errorf("undone: %+v %+v", r.Spec, r.Status)
	}
	eventually(t, time.Minute, "the canary back on the first definition", func(context.Context) (bool, error) {
		on, content := pagesState(t, env)
		for _, name := range names {
			if on[name] != one.Hash() || content[name] != "one" {
				return false, nil
			}
		}
		return true, nil
	})
	for _, name := range []string{"page00", "page01"} {
		cr := &unstructured.Unstructured{}
		cr.SetAPIVersion("rollout.example.com/v1")
		cr.SetKind("Page")
		eventually(t, 30*time.Second, name+" no longer Degraded", func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, cr); err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(cr.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Degraded" {
					return m["status"] == "False", nil
				}
			}
			return false, nil
		})
	}

	// A good definition goes through every step; the engine restarted
	// after its second step goes on from there.
	three := compileYAML(t, pagesYAML("three", ""))
	if err := e.Apply(ctx, three); err != nil {
		t.Fatal(err)
	}
	r = waitRollout(t, env, time.Minute, "the good definition at step 2", func(s *v1alpha1.RolloutStatus) bool { return s.Step >= 2 })
	if r.Status.To.Hash != three.Hash() || r.Status.From.Hash != one.Hash() {
		t.Errorf("rolls out %s from %s; want %s from %s", r.Status.To.Hash, r.Status.From.Hash, three.Hash(), one.Hash())
	}
	stop()
	at := readRollout(t, env).Status
	if at.Step == 2 && at.MovedCount != n/2 {
		t.Errorf("step 2 (50%%) moved %d objects; want %d", at.MovedCount, n/2)
	}
	e, _ = runEngineWith(t, opts)
	if err := e.Apply(ctx, compileYAML(t, pagesYAML("three", ""))); err != nil {
		t.Fatal(err)
	}
	if again := readRollout(t, env).Status; again.Step < at.Step || again.MovedCount < at.MovedCount {
		t.Errorf("after a restart at step %d with %d moved, the rollout is at step %d with %d moved", at.Step, at.MovedCount, again.Step, again.MovedCount)
	}
	r = waitRollout(t, env, 2*time.Minute, "the good definition rolled out", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutComplete })
	if r.Status.MovedCount != n || r.Status.Step != 3 {
		t.Errorf("complete with %d moved at step %d; want %d at step 3", r.Status.MovedCount, r.Status.Step, n)
	}
	eventually(t, time.Minute, "every Page on the good definition", func(context.Context) (bool, error) {
		on, content := pagesState(t, env)
		for _, name := range names {
			if on[name] != three.Hash() || content[name] != "three" {
				return false, nil
			}
		}
		return true, nil
	})
	// No broken child was ever made, and none is left.
	for _, name := range names {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name + "-broken"}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s-broken: %v; want none", name, err)
		}
	}
}

// canaryPages runs an engine with the Page operator whose rollout has one
// step, the canary (the Pages labelled canary: yes), and creates n Pages,
// page0 to page<n-1>, the odd ones the canary. It returns the engine and
// that definition, for the test to change.
func canaryPages(t *testing.T, env *clustertest.Env, n int) (*engine.Engine, string) {
	t.Helper()
	e := startEngine(t, env)
	canaryFirst := strings.Replace(pagesV1, "steps: [{count: 2}, {percent: 50}]", "steps: [{selector: {matchLabels: {canary: \"yes\"}}}]", 1)
	if err := e.Apply(t.Context(), compileYAML(t, canaryFirst)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rollout.example.com/v1", "kind": "Page",
			"metadata": map[string]any{"name": fmt.Sprintf("page%d", i), "namespace": env.Namespace},
			"spec":     map[string]any{"text": "hello"},
		}}
		if i%2 == 1 {
			p.SetLabels(map[string]string{"canary": "yes"})
		}
		create(t, env, p)
	}
	return e, canaryFirst
}

// TestARolloutRunsANewHandlerOnlyForTheObjectsItMoved: a definition that
// adds a create handler runs it for the canary (the Pages labelled
// canary) alone; the handler failing pauses the rollout, naming it; a
// person continuing moves the others, whose failing runs pause it again,
// while the canary's, accepted, no longer do.
func TestARolloutRunsANewHandlerOnlyForTheObjectsItMoved(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e, canaryFirst := canaryPages(t, env, 4)
	ctx := t.Context()
	waitConfigMapData(t, env, "page3-content", "the last Page's ConfigMap", map[string]string{"definition": "one"})

	out := filepath.Join(t.TempDir(), "runs")
	never := filepath.Join(t.TempDir(), "never")
	withHandler := canaryFirst + fmt.Sprintf(`  handlers:
  - name: announce
    on: [create]
    %s
`, recorderExec(t, out, "FAIL_UNTIL="+never))
	if err := e.Apply(ctx, compileYAML(t, withHandler)); err != nil {
		t.Fatal(err)
	}
	r := waitRollout(t, env, time.Minute, "the rollout paused on the canary's handler", func(s *v1alpha1.RolloutStatus) bool { return s.Phase == v1alpha1.RolloutPaused })
	if want := []string{env.Namespace + "/page1", env.Namespace + "/page3"}; !slices.Equal(r.Status.Moved, want) {
		t.Errorf("moved %v; want the canary %v", r.Status.Moved, want)
	}
	if !strings.Contains(r.Status.Reason, "handler announce failed") {
		t.Errorf("paused because %q; want the handler announce's failure", r.Status.Reason)
	}
	time.Sleep(3 * time.Second)
	ran := map[string]bool{}
	for _, rec := range readLines[record](t, out) {
		ran[rec.Name] = true
	}
	if !ran["page1"] || !ran["page3"] || ran["page0"] || ran["page2"] {
		t.Errorf("announce ran for %v; want the canary page1 and page3 alone", ran)
	}

	requestRollout(t, env, v1alpha1.RolloutContinue)
	r = waitRollout(t, env, time.Minute, "paused again by the objects the continue moved", func(s *v1alpha1.RolloutStatus) bool {
		return s.Phase == v1alpha1.RolloutPaused && s.Step == 2
	})
	// page0 and page2 both fail: whichever failed first, on a loaded
	// machine either, is the one named.
	if named := strings.Contains(r.Status.Reason, "/page0: handler announce failed") || strings.Contains(r.Status.Reason, "/page2: handler announce failed"); r.Status.MovedCount != 4 || !named {
		t.Errorf("after continue: %d moved, paused because %q; want 4, page0's or page2's handler", r.Status.MovedCount, r.Status.Reason)
	}
	if want := []string{env.Namespace + "/page1", env.Namespace + "/page3"}; !slices.Equal(r.Status.Accepted, want) {
		t.Errorf("accepted %v; want the canary %v, unhealthy when continued", r.Status.Accepted, want)
	}
	eventually(t, 30*time.Second, "announce run for every Page", func(context.Context) (bool, error) {
		for _, rec := range readLines[record](t, out) {
			ran[rec.Name] = true
		}
		return len(ran) == 4, nil
	})
}

// TestAHandlerSlowerThanSettleHoldsTheStepUntilItsRunEnds: the canary's
// new handler takes longer than settle; the next step is not taken while
// its run is under way (its outcome, not its start, is what the step is
// judged on), and is once it has succeeded. On a loaded machine a run
// waiting to start was taken for a healthy canary, and the rollout moved
// every object past a handler that then failed.
func TestAHandlerSlowerThanSettleHoldsTheStepUntilItsRunEnds(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e, canaryFirst := canaryPages(t, env, 2)
	ctx := t.Context()
	waitConfigMapData(t, env, "page1-content", "the canary's ConfigMap", map[string]string{"definition": "one"})

	out := filepath.Join(t.TempDir(), "runs")
	withHandler := canaryFirst + fmt.Sprintf(`  handlers:
  - name: announce
    on: [create]
    timeout: 1m
    %s
`, recorderExec(t, out, "SLEEP=8s"))
	if err := e.Apply(ctx, compileYAML(t, withHandler)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the canary's announce run started", func(context.Context) (bool, error) {
		return len(readLines[record](t, out)) > 0, nil
	})
	// settle is 2s: the step would have been taken by now, were a run
	// under way taken for a healthy canary.
	time.Sleep(5 * time.Second)
	r := waitRollout(t, env, 10*time.Second, "the rollout", func(*v1alpha1.RolloutStatus) bool { return true })
	if r.Status.MovedCount != 1 || !strings.Contains(r.Status.Reason, "/page1: handler announce not done with generation 1 yet") {
		t.Errorf("while the canary's run is under way: %d moved, %q; want 1, waiting for page1's handler announce", r.Status.MovedCount, r.Status.Reason)
	}
	if recs := readLines[record](t, out); len(recs) != 1 || recs[0].Name != "page1" {
		t.Errorf("announce runs %+v; want the canary's alone", recs)
	}
	waitRollout(t, env, time.Minute, "the rollout complete once the canary's run succeeded", func(s *v1alpha1.RolloutStatus) bool {
		return s.Phase == v1alpha1.RolloutComplete
	})
}

// TestAnObjectWaitingForAPersonTakesTheDecisionOnItsOwnDefinition: two
// Parcels wait for a person; a definition that adds an enter handler of
// the state they go to rolls out to the first alone (settle holds the
// next step). A decision on each is taken by the definition it is on:
// both move, and the new handler runs for the moved one alone.
func TestAnObjectWaitingForAPersonTakesTheDecisionOnItsOwnDefinition(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	ctx := t.Context()
	const parcels = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: parcels}
spec:
  resource:
    group: rolloutstates.example.com
    kind: Parcel
    versions:
    - name: v1
      schema: {type: object, properties: {to: {type: string}}}
  rollout:
    steps: [{count: 1}]
    settle: 1h
  states:
  - name: Waiting
    initial: true
    needsPerson: {question: "Ship it?"}
    transitions:
    - {to: Shipped, reason: Approved, description: ship it}
  - {name: Shipped, final: true}
`
	if err := e.Apply(ctx, compileYAML(t, parcels)); err != nil {
		t.Fatal(err)
	}
	parcel := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("rolloutstates.example.com/v1")
		u.SetKind("Parcel")
		u.SetNamespace(env.Namespace)
		u.SetName(name)
		return u
	}
	stateOf := func(ctx context.Context, name string) (*unstructured.Unstructured, *v1alpha1.ObjectState, error) {
		return objectState(ctx, env, parcel(name))
	}
	names := []string{"parcel0", "parcel1"}
	for _, name := range names {
		create(t, env, parcel(name))
		eventually(t, time.Minute, name+" waiting for a person", func(ctx context.Context) (bool, error) {
			_, s, err := stateOf(ctx, name)
			return err == nil && s.Name == "Waiting", err
		})
	}

	out := filepath.Join(t.TempDir(), "runs")
	withShip := parcels + fmt.Sprintf(`  handlers:
  - name: ship
    on: [enter]
    states: [Shipped]
    %s
`, recorderExec(t, out))
	next := compileYAML(t, withShip)
	if err := e.Apply(ctx, next); err != nil {
		t.Fatal(err)
	}
	r := waitRolloutOf(t, env, "parcels", time.Minute, "the first step", func(s *v1alpha1.RolloutStatus) bool { return s.Step == 1 })
	if want := []string{env.Namespace + "/parcel0"}; !slices.Equal(r.Status.Moved, want) {
		t.Fatalf("moved %v; want %v", r.Status.Moved, want)
	}
	eventually(t, time.Minute, "parcel0 reconciled by the new definition", func(ctx context.Context) (bool, error) {
		u, _, err := stateOf(ctx, "parcel0")
		if err != nil {
			return false, err
		}
		on, _, _ := unstructured.NestedString(u.Object, "status", "opkit", "definition")
		return on == next.Hash(), nil
	})
	for _, name := range names {
		writeDecision(t, env, parcel(name), "Shipped", "approved")
		eventually(t, time.Minute, name+" Shipped", func(ctx context.Context) (bool, error) {
			_, s, err := stateOf(ctx, name)
			return err == nil && s.Name == "Shipped", err
		})
	}
	eventually(t, time.Minute, "ship run for parcel0", func(context.Context) (bool, error) {
		return len(records(t, out, "parcel0")) == 1, nil
	})
	time.Sleep(2 * time.Second)
	if recs := records(t, out, "parcel1"); len(recs) != 0 {
		t.Errorf("ship ran for parcel1, which is on the previous definition: %+v", recs)
	}
	if r := readRolloutOf(t, env, "parcels"); r.Status.Phase != v1alpha1.RolloutProgressing || r.Status.Step != 1 {
		t.Errorf("the rollout moved on: %s at step %d: %s", r.Status.Phase, r.Status.Step, r.Status.Reason)
	}
}
