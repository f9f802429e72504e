package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/executor"
)

// What opkit test needs of the engine: engines side by side, one per
// namespace (Options.Namespace); a clock a test steps (Options.Clock and
// ClockStepped); handlers whose actions a test replaces (Options.Stubs).

// runsOf lists an archive's runs matching q, newest first.
func runsOf(t *testing.T, store archive.Store, q archive.Query) []archive.Run {
	t.Helper()
	q.Limit = 1000
	page, err := store.List(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}

// consistently fails the test if cond comes true within d: what must not
// happen, given the time to happen.
func consistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			t.Fatalf("%s", what)
		}
	}
}

func TestEnginesOfTwoNamespacesEachHandleOnlyTheirOwnObjects(t *testing.T) {
	t.Parallel()
	envA, envB := clustertest.New(t), clustertest.New(t)
	file, out := tasksOperator(t)
	// A watch whose definition names another namespace: each engine
	// watches its own instead.
	watchFile := filepath.Join(t.TempDir(), "watch.yaml")
	writeFile(t, watchFile, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: scoped-configmaps}
spec:
  watch:
    apiVersion: v1
    kind: ConfigMap
    namespaces: [prod]
    selector: {matchLabels: {scoped: "yes"}}
  handlers:
  - name: seen
    on: [create]
    `+recorderExec(t, out)+"\n")
	storeA, storeB := newArchive(t), newArchive(t)
	start := time.Now()
	engA, _ := runEngineWith(t, engine.Options{Config: envA.Config, Archive: storeA, Namespace: envA.Namespace, AdmissionFinalizers: true})
	engB, _ := runEngineWith(t, engine.Options{Config: envB.Config, Archive: storeB, Namespace: envB.Namespace, AdmissionFinalizers: true})
	// The same definitions applied to both at once, as opkit test starts
	// its scenarios: the CRD and the admission policies are applied twice
	// concurrently.
	defs, err := definition.CompileFiles(file, watchFile)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, e := range []*engine.Engine{engA, engB} {
		wg.Go(func() {
			for _, d := range defs {
				if err := e.Apply(t.Context(), d); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("two engines running: %s", time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		// Once the Tasks are gone: each engine removes its own policy.
		engA.Remove(context.Background(), "tasks")
		engB.Remove(context.Background(), "tasks")
	})
	cleanUpTasks(t, envA)
	cleanUpTasks(t, envB)
	// Each engine's admission policy gives its namespace's Tasks the
	// finalizer, and only those.
	for _, ns := range []string{envA.Namespace, envB.Namespace} {
		policy := &admissionv1.MutatingAdmissionPolicy{}
		if err := envA.Client.Get(t.Context(), client.ObjectKey{Name: "opkit-finalizer.tasks." + ns}, policy); err != nil {
			t.Fatalf("the admission policy of the engine of %s: %v", ns, err)
		}
		if sel := policy.Spec.MatchConstraints.NamespaceSelector; sel == nil || sel.MatchLabels[corev1.LabelMetadataName] != ns {
			t.Errorf("the admission policy of the engine of %s selects namespaces %v", ns, sel)
		}
	}

	// The same name in both namespaces, and one of each's own.
	create(t, envA, task(envA.Namespace, "same", "", "a"))
	create(t, envB, task(envB.Namespace, "same", "", "b"))
	create(t, envA, task(envA.Namespace, "only-a", "", "a"))
	create(t, envB, task(envB.Namespace, "only-b", "", "b"))
	for _, ns := range []string{envA.Namespace, envB.Namespace} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: ns, Labels: map[string]string{"scoped": "yes"}}}
		create(t, envA, cm)
	}
	handled := func(store archive.Store, ns string, names ...string) bool {
		for _, name := range names {
			if len(runsOf(t, store, archive.Query{Namespace: ns, Name: name, Outcome: archive.Succeeded})) == 0 {
				return false
			}
		}
		return true
	}
	eventually(t, 60*time.Second, "each engine handles its namespace's Tasks and ConfigMap", func(context.Context) (bool, error) {
		return handled(storeA, envA.Namespace, "same", "only-a", "watched") && handled(storeB, envB.Namespace, "same", "only-b", "watched"), nil
	})
	t.Logf("both namespaces handled: %s", time.Since(start).Round(100*time.Millisecond))
	// Each engine's runs are of its own namespace only, and each object
	// was handled once, by one engine.
	consistently(t, 1500*time.Millisecond, "an engine ran a handler for another namespace's object", func() bool {
		return len(runsOf(t, storeA, archive.Query{Namespace: envB.Namespace}))+len(runsOf(t, storeB, archive.Query{Namespace: envA.Namespace})) > 0
	})
	for _, c := range []struct {
		store archive.Store
		ns    string
	}{{storeA, envA.Namespace}, {storeB, envB.Namespace}} {
		for _, r := range runsOf(t, c.store, archive.Query{}) {
			if r.Namespace != c.ns {
				t.Errorf("the engine of %s ran %s for %s", c.ns, r.Handler, r.Object())
			}
		}
	}
	if n := len(records(t, out, "same")); n != 2 {
		t.Errorf("the Tasks named same were handled %d times, want twice: once in each namespace", n)
	}
	for _, name := range []string{"same", "only-a"} {
		obj := task(envA.Namespace, name, "", "")
		if err := envA.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if c := condition(obj, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Task %s/%s: Ready %+v", envA.Namespace, name, c)
		}
	}

	// What every engine would see is refused.
	for _, def := range []string{`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: clusterwide}
spec:
  resource:
    group: handlers.example.com
    kind: Clusterwide
    scope: Cluster
    versions:
    - name: v1
      schema: {type: object}
`, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: namespaces}
spec:
  watch: {apiVersion: v1, kind: Namespace}
  handlers:
  - name: seen
    on: [create]
    ` + recorderExec(t, out) + "\n"} {
		d := compileYAML(t, def)
		err := engA.Apply(t.Context(), d)
		if err == nil || !strings.Contains(err.Error(), "cluster-scoped") || !strings.Contains(err.Error(), envA.Namespace) {
			t.Errorf("operator %s applied to an engine of one namespace: %v; want refused as cluster-scoped", d.Operator.Name, err)
		}
	}
}

// hourlyOperator writes an operator whose handler tick runs on create and
// every hour, recording its runs to out.
func hourlyOperator(t *testing.T, out string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "hourly.yaml")
	writeFile(t, file, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: hourly}
spec:
  resource:
    group: handlers.example.com
    kind: Hourly
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  handlers:
  - name: tick
    on: [create, schedule]
    schedule: {every: 1h}
    `+recorderExec(t, out)+"\n")
	return file
}

func TestAStepOfTheClockRunsAnObjectsScheduleAtOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	clock := clocktesting.NewFakeClock(time.Now())
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, Clock: clock}, hourlyOperator(t, out))
	cleanUpAll(t, env, "handlers.example.com/v1", "Hourly")

	obj := task(env.Namespace, "clock", "", "x")
	obj.SetAPIVersion("handlers.example.com/v1")
	obj.SetKind("Hourly")
	unstructured.RemoveNestedField(obj.Object, "spec", "mode")
	create(t, env, obj)
	recs := waitRecords(t, out, "clock", 1, "the create run")
	if recs[0].Trigger != "create" {
		t.Fatalf("first run %+v, want the create run", recs[0])
	}

	// Half an hour: nothing is due.
	clock.Step(30 * time.Minute)
	e.ClockStepped()
	consistently(t, 1500*time.Millisecond, "the hourly handler ran after half an hour", func() bool {
		return len(records(t, out, "clock")) > 1
	})

	// The hour is up (counted from the creationTimestamp, the API
	// server's time, a little after the clock's start): it runs at once.
	clock.Step(31 * time.Minute)
	stepped := time.Now()
	e.ClockStepped()
	recs = waitRecords(t, out, "clock", 2, "the scheduled run after the hour")
	t.Logf("scheduled run %s after the step", time.Since(stepped).Round(10*time.Millisecond))
	if recs[1].Trigger != "schedule" {
		t.Errorf("second run %+v, want a scheduled one", recs[1])
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	// Its slot is an hour after the object's creation.
	slot := obj.GetCreationTimestamp().Add(time.Hour)
	if want := fmt.Sprintf("/tick/%d", slot.Unix()); !strings.HasSuffix(recs[1].Key, want) {
		t.Errorf("scheduled run's key %s, want it to end with %s", recs[1].Key, want)
	}

	// The next hour: the next slot.
	clock.Step(time.Hour)
	e.ClockStepped()
	recs = waitRecords(t, out, "clock", 3, "the scheduled run of the next hour")
	if want := fmt.Sprintf("/tick/%d", slot.Add(time.Hour).Unix()); recs[2].Trigger != "schedule" || !strings.HasSuffix(recs[2].Key, want) {
		t.Errorf("third run %+v, want a scheduled one whose key ends with %s", recs[2], want)
	}
	eventually(t, 30*time.Second, "status.opkit records the last slot, by the clock", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		last, _, _ := unstructured.NestedString(obj.Object, "status", "opkit", "handlers", "tick", "lastScheduled")
		at, err := time.Parse(time.RFC3339Nano, last)
		return err == nil && at.Equal(slot.Add(time.Hour)), nil
	})
}

func TestAStepOfTheClockRunsAnOperatorWideScheduleAtOnce(t *testing.T) {
	t.Parallel()
	// The first slot is the clock's next full hour.
	clock := clocktesting.NewFakeClock(time.Now())
	boundary := clock.Now().Truncate(time.Hour).Add(time.Hour)
	file := filepath.Join(t.TempDir(), "chime.yaml")
	writeFile(t, file, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: chime}
spec:
  handlers:
  - name: ring
    on: [schedule]
    schedule: {every: 1h}
    `+recorderExec(t, filepath.Join(t.TempDir(), "records.jsonl"))+"\n")
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: clustertest.Cluster(t).RESTConfig(), Archive: store, Clock: clock}, file)
	rings := func() []archive.Run {
		return runsOf(t, store, archive.Query{Operator: "chime", Outcome: archive.Succeeded})
	}

	clock.Step(boundary.Sub(clock.Now()) - 2*time.Second)
	e.ClockStepped()
	consistently(t, 1500*time.Millisecond, "the hourly schedule ran before its slot", func() bool { return len(rings()) > 0 })

	clock.Step(3 * time.Second)
	stepped := time.Now()
	e.ClockStepped()
	eventually(t, 30*time.Second, "the slot's run", func(context.Context) (bool, error) { return len(rings()) == 1, nil })
	t.Logf("the slot ran %s after the step", time.Since(stepped).Round(10*time.Millisecond))
	if got, want := rings()[0].Key, fmt.Sprintf("chime/schedule/ring/%d", boundary.Unix()); got != want {
		t.Errorf("key %s, want %s", got, want)
	}

	clock.Step(time.Hour)
	e.ClockStepped()
	eventually(t, 30*time.Second, "the next slot's run", func(context.Context) (bool, error) { return len(rings()) == 2, nil })
	if got, want := rings()[0].Key, fmt.Sprintf("chime/schedule/ring/%d", boundary.Add(time.Hour).Unix()); got != want {
		t.Errorf("key %s, want %s", got, want)
	}
}

func TestAStubThatFailsStallsTheObjectAndASucceedingOneReadiesItOnRetry(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, out := tasksOperator(t)
	// Retries ten minutes apart, which the test skips with the clock.
	def, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Replace(string(def), "initialDelay: 400ms, maxDelay: 10s", "initialDelay: 10m, maxDelay: 1h", 1)
	if long == string(def) {
		t.Fatal("the Task operator's retry policy is not the one this test changes")
	}
	writeFile(t, file, long)
	clock := clocktesting.NewFakeClock(time.Now())
	stubs := &engine.Stubs{}
	failing := executor.NewCanned(executor.CannedResult{Failure: &executor.Failure{Message: "boom: stubbed"}, Log: "the stub fails"})
	stubs.Set("tasks", "work", failing)
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, Clock: clock, Stubs: stubs}, file)
	cleanUpTasks(t, env)

	obj := task(env.Namespace, "stubbed", "", "x")
	create(t, env, obj)
	// Each retry waits by the clock: step it past the delay until the
	// handler gives up.
	start := time.Now()
	eventually(t, 60*time.Second, "the stubbed handler gives up", func(context.Context) (bool, error) {
		if len(runsOf(t, store, archive.Query{Name: "stubbed", Outcome: archive.GaveUp})) > 0 {
			return true, nil
		}
		clock.Step(10 * time.Minute)
		e.ClockStepped()
		return false, nil
	})
	t.Logf("three failed attempts: %s", time.Since(start).Round(100*time.Millisecond))
	runs := runsOf(t, store, archive.Query{Name: "stubbed", Handler: "work"})
	if len(runs) != 3 {
		t.Fatalf("%d runs of work, want 3: %+v", len(runs), runs)
	}
	for i, r := range runs { // newest first
		outcome := archive.Failed
		if i == 0 {
			outcome = archive.GaveUp
		}
		if r.Attempt != 3-i || r.Outcome != outcome || r.Error != "boom: stubbed" || r.Action != "exec" || r.Key != runs[2].Key {
			t.Errorf("run %d: attempt %d, %s, %q, action %s, key %s; want attempt %d, %s, the stub's error, one key", i, r.Attempt, r.Outcome, r.Error, r.Action, r.Key, 3-i, outcome)
		}
		if (outcome == archive.Failed) == r.NextRetryAt.IsZero() {
			t.Errorf("run %d (%s): nextRetryAt %s", i, r.Outcome, r.NextRetryAt)
		}
		if logs, err := logData(store.Logs(t.Context(), r.ID, 0)); err != nil || !strings.Contains(string(logs), "the stub fails") {
			t.Errorf("run %d's log %q (%v), want the stub's line", i, logs, err)
		}
	}
	if n := failing.Runs(); n != 3 {
		t.Errorf("the stub ran %d times, want 3", n)
	}
	if recs := records(t, out, "stubbed"); len(recs) > 0 {
		t.Errorf("the real action ran: %+v", recs)
	}
	eventually(t, 30*time.Second, "the Task is Stalled, with a HandlerGaveUp Event", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		c := condition(obj, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "gave up after 3 attempts: boom: stubbed") {
			return false, nil
		}
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(ev corev1.Event) bool {
			return ev.Reason == "HandlerGaveUp" && ev.InvolvedObject.Name == "stubbed"
		}), nil
	})

	// A stub that succeeds, and opkit retry: the Task is Ready, with the
	// status the result patches.
	result, err := executor.ParseResult([]byte(`{"status": {"recorded": "by the stub"}}`))
	if err != nil {
		t.Fatal(err)
	}
	stubs.Set("tasks", "work", executor.NewCanned(executor.CannedResult{Result: result}))
	goodbye := executor.NewCanned()
	stubs.Set("tasks", "goodbye", goodbye)
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RetryAnnotation + `":"now"}}}`)
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Task is Ready with the stub's status", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		recorded, _, _ := unstructured.NestedString(obj.Object, "status", "recorded")
		ready, stalled := condition(obj, v1alpha1.ConditionReady), condition(obj, v1alpha1.ConditionStalled)
		_, retry := obj.GetAnnotations()[v1alpha1.RetryAnnotation]
		return recorded == "by the stub" && ready != nil && ready.Status == metav1.ConditionTrue &&
			stalled != nil && stalled.Status == metav1.ConditionFalse && !retry, nil
	})
	if r := runsOf(t, store, archive.Query{Name: "stubbed", Handler: "work"})[0]; r.Outcome != archive.Succeeded || r.Attempt != 1 || !slices.Contains(r.Writes, "status: recorded") {
		t.Errorf("the run after the retry: %+v; want Succeeded, attempt 1, writing status", r)
	}

	// A stubbed delete handler lets the finalizer go once it succeeds.
	if err := env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, obj, 30*time.Second, "the Task is gone after its stubbed delete handler")
	if runs := runsOf(t, store, archive.Query{Name: "stubbed", Handler: "goodbye"}); len(runs) != 1 || runs[0].Outcome != archive.Succeeded || runs[0].Trigger != "delete" || goodbye.Runs() != 1 {
		t.Errorf("delete runs %+v (the stub ran %d times); want one, Succeeded", runs, goodbye.Runs())
	}
}
