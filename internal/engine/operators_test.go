package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// clusterOperators is held by the test whose engine runs the cluster's
// Operators (watchOperators): such an engine runs every Operator object
// of the cluster, another test's too.
var clusterOperators sync.Mutex

// runsClusterOperators makes t a parallel test that runs with the
// others, but with none that runs the cluster's Operators too: call it
// first, before the test's plane and engine, whose clean-ups then run
// before the next such test starts.
func runsClusterOperators(t *testing.T) {
	t.Parallel()
	clusterOperators.Lock()
	t.Cleanup(clusterOperators.Unlock)
}

// watchOperators runs the engine's Operator watch until the test ends.
func watchOperators(t *testing.T, e *engine.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.WatchOperators(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchOperators: %v", err)
		}
	})
}

// operatorObject decodes an Operator given inline, as kubectl would send it.
func operatorObject(t *testing.T, yaml string) *v1alpha1.Operator {
	t.Helper()
	srcs, err := definition.Load("inline.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return srcs[0].Operator.DeepCopy()
}

// putOperator creates the Operator or replaces its spec.
func putOperator(t *testing.T, c client.Client, op *v1alpha1.Operator) {
	t.Helper()
	eventually(t, 30*time.Second, "put Operator "+op.Name, func(ctx context.Context) (bool, error) {
		live := &v1alpha1.Operator{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(op), live); err != nil {
			return c.Create(ctx, op.DeepCopy()) == nil, nil
		}
		live.Spec = op.Spec
		return c.Update(ctx, live) == nil, nil
	})
}

// waitOperator waits until the Operator's status describes its current
// generation with the Ready status and reason given, and returns it.
func waitOperator(t *testing.T, c client.Client, name string, status metav1.ConditionStatus, reason string) *v1alpha1.Operator {
	t.Helper()
	op := &v1alpha1.Operator{}
	eventually(t, 60*time.Second, "Operator "+name+" Ready="+string(status)+" "+reason, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, op); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ready := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady)
		return op.Status.ObservedGeneration == op.Generation && ready != nil && ready.Status == status && ready.Reason == reason, nil
	})
	return op
}

func TestOperatorsInTheClusterAreAddedChangedAndDeletedWithoutRestart(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	e := startEngine(t, env)
	watchOperators(t, e)
	ctx := t.Context()
	books := strings.NewReplacer("name: notes}", "name: books}", "group: notes.example.com", "group: books.example.com").Replace(notesV1)

	// Added: its CRD is installed and its controller runs.
	putOperator(t, env.Client, operatorObject(t, books))
	op := waitOperator(t, env.Client, "books", metav1.ConditionTrue, engine.ReasonRunning)
	if op.Status.CRD != "notes.books.example.com" {
		t.Errorf("status.crd = %q", op.Status.CRD)
	}
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "books.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "b1", "namespace": env.Namespace},
		"spec":     map[string]any{"a": "first"},
	}}
	if err := env.Client.Create(ctx, note); err != nil {
		t.Fatal(err)
	}
	waitData := func(what string, want map[string]string) {
		t.Helper()
		waitConfigMapData(t, env, "b1-note", what, want)
	}
	waitData("the ConfigMap of the first generation", map[string]string{"a": "first"})
	set := func(field, value string) {
		t.Helper()
		setSpec(t, env, note, field, value)
	}

	// Changed, schema too: the new generation takes over.
	v2 := strings.Replace(books, "          a: {type: string}\n", "          a: {type: string}\n          b: {type: string}\n", 1)
	v2 = strings.Replace(v2, `data: {a: "${self.spec.a}"}`, `data: {a: "${self.spec.a}", b: "${self.spec.b}"}`, 1)
	putOperator(t, env.Client, operatorObject(t, v2))
	waitOperator(t, env.Client, "books", metav1.ConditionTrue, engine.ReasonRunning)
	set("b", "second")
	waitData("the ConfigMap of the second generation", map[string]string{"a": "first", "b": "second"})

	// Changed to an invalid definition: the status names the field, and the
	// last valid generation keeps running.
	broken := strings.Replace(v2, `b: "${self.spec.b}"`, `b: "${self.spec.nosuch}"`, 1)
	putOperator(t, env.Client, operatorObject(t, broken))
	op = waitOperator(t, env.Client, "books", metav1.ConditionFalse, engine.ReasonInvalid)
	msg := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady).Message
	for _, want := range []string{"spec.children[0].template.data.b", "nosuch", "keeps running"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q does not say %q", msg, want)
		}
	}
	if d := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %+v, want True", d)
	}
	set("a", "still served")
	waitData("the ConfigMap while the new generation is invalid", map[string]string{"a": "still served"})

	// Another invalid Operator, a cycle, is refused by name and stops nothing.
	cycle := strings.NewReplacer("name: notes}", "name: cycle}", "group: notes.example.com", "group: cycle.example.com").Replace(notesV1)
	cycle = strings.Replace(cycle, `data: {a: "${self.spec.a}"}`, `data: {a: "${children.other.data.a}"}`, 1) +
		"  - id: other\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"${self.metadata.name}-other\"}\n      data: {a: \"${children.config.data.a}\"}\n"
	putOperator(t, env.Client, operatorObject(t, cycle))
	op = waitOperator(t, env.Client, "cycle", metav1.ConditionFalse, engine.ReasonInvalid)
	if msg := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "config -> other -> config") && !strings.Contains(msg, "other -> config -> other") {
		t.Errorf("the cycle's message %q does not name the cycle", msg)
	}
	set("a", "after the cycle")
	waitData("the ConfigMap after an invalid Operator was added", map[string]string{"a": "after the cycle"})

	// Deleted: the controller stops; the CRD and the custom resources stay.
	if err := env.Client.Delete(ctx, &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: "books"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: "cycle"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the watch event reaches the engine
	set("a", "not acted on")
	time.Sleep(3 * time.Second)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "b1-note"}, cm); err != nil || cm.Data["a"] != "after the cycle" {
		t.Errorf("after the Operator was deleted the ConfigMap changed: %v %v", cm.Data, err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(note), note); err != nil {
		t.Errorf("the custom resource was lost with its Operator: %v", err)
	}
}

func TestAnOperatorCannotTakeAnotherOperatorsCRD(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	e := startEngine(t, env)
	first := strings.NewReplacer("name: notes}", "name: owner-a}", "group: notes.example.com", "group: taken.example.com").Replace(notesV1)
	if err := e.Apply(t.Context(), compileYAML(t, first)); err != nil {
		t.Fatal(err)
	}
	second := strings.Replace(first, "name: owner-a}", "name: owner-b}", 1)
	err := e.Apply(t.Context(), compileYAML(t, second))
	if err == nil || !strings.Contains(err.Error(), "belongs to operator owner-a") {
		t.Fatalf("a second Operator for the same CRD: %v", err)
	}
}

// TestEnginesWithSelectorsEachRunTheirOwnOperators: two engines share the
// cluster, each with its Operator selector (opkit run --selector): each
// runs the Operators its selector matches and no other, and an Operator
// relabelled from one team to the other stops in the first engine and
// runs in the second, which handles its objects from then on.
func TestEnginesWithSelectorsEachRunTheirOwnOperators(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	engineOf := func(team string) *engine.Engine {
		sel := labels.SelectorFromSet(labels.Set{"team": team})
		e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, OperatorSelector: sel})
		watchOperators(t, e)
		return e
	}
	a, b := engineOf("a"), engineOf("b")
	for name, team := range map[string]string{"sel-one": "a", "sel-two": "b"} {
		op := operatorObject(t, strings.NewReplacer("name: notes}", "name: "+name+"}", "group: notes.example.com", "group: "+name+".example.com").Replace(notesV1))
		op.Labels = map[string]string{"team": team}
		putOperator(t, env.Client, op)
		waitOperator(t, env.Client, name, metav1.ConditionTrue, engine.ReasonRunning)
	}
	if !a.Runs("sel-one") || a.Runs("sel-two") || !b.Runs("sel-two") || b.Runs("sel-one") {
		t.Fatalf("engine a runs sel-one %v, sel-two %v; engine b runs sel-one %v, sel-two %v; want each its team's alone",
			a.Runs("sel-one"), a.Runs("sel-two"), b.Runs("sel-one"), b.Runs("sel-two"))
	}

	// Relabelled to team b: a stops it, b runs it.
	eventually(t, 30*time.Second, "relabel sel-one to team b", func(ctx context.Context) (bool, error) {
		live := &v1alpha1.Operator{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "sel-one"}, live); err != nil {
			return false, err
		}
		live.Labels["team"] = "b"
		return env.Client.Update(ctx, live) == nil, nil
	})
	eventually(t, 30*time.Second, "sel-one run by engine b alone", func(context.Context) (bool, error) {
		return !a.Runs("sel-one") && b.Runs("sel-one"), nil
	})
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sel-one.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "moved", "namespace": env.Namespace},
		"spec":     map[string]any{"a": "handled by b"},
	}}
	if err := env.Client.Create(t.Context(), note); err != nil {
		t.Fatal(err)
	}
	waitConfigMapData(t, env, "moved-note", "the ConfigMap of a Note of the moved Operator", map[string]string{"a": "handled by b"})
}
