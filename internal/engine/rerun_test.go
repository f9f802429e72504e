package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// askRerun writes a re-run request on obj, as opkit rerun does: over the
// resourceVersion read, read again when the engine wrote meanwhile.
func askRerun(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, r v1alpha1.Rerun) {
	t.Helper()
	eventually(t, 30*time.Second, "the re-run request written", func(ctx context.Context) (bool, error) {
		u := obj.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return false, err
		}
		if _, pending := u.GetAnnotations()[v1alpha1.RerunAnnotation]; pending {
			return false, nil // the last one is not taken yet
		}
		return env.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, r.Patch(u.GetResourceVersion()))) == nil, nil
	})
}

// rerunEvent waits for the engine's answer to a re-run request: the
// message of the Event of that reason naming it.
func rerunEvent(t *testing.T, env *clustertest.Env, reason, request string) string {
	t.Helper()
	var message string
	eventually(t, 60*time.Second, reason+" for request "+request, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Message, "request "+request+" ") {
				message = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	return message
}

// TestRerunRunsTheHandlerAgainWithTheObjectNowOrTheRecordedInput: a
// succeeded create run asked again runs the handler once more, with the
// object as it is now, then with the binding context the run got
// (--same-input); each re-run is keyed <key>/rerun/<n>, records who asked
// and why, and is linked both ways to the run it repeats. The request is
// removed once taken, the handler's own records are untouched (no update
// run comes of it), and a request naming another object's run is refused
// with why.
func TestRerunRunsTheHandlerAgainWithTheObjectNowOrTheRecordedInput(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	file, out := tasksOperator(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)

	a := task(env.Namespace, "a", "", "one")
	create(t, env, a)
	waitRecords(t, out, "a", 1, "a's create run")
	setSpec(t, env, a, "text", "two")
	waitRecords(t, out, "a", 2, "a's update run")
	create(t, env, task(env.Namespace, "b", "", "other"))
	waitRecords(t, out, "b", 1, "b's create run")

	var created, other *archive.Run
	eventually(t, 30*time.Second, "a's create run and b's, succeeded", func(ctx context.Context) (bool, error) {
		runs, err := archive.ListAll(ctx, store, archive.Query{Operator: "tasks", Handler: "work", Trigger: v1alpha1.OnCreate, Outcome: archive.Succeeded})
		for i := range runs {
			switch runs[i].Name {
			case "a":
				created = &runs[i]
			case "b":
				other = &runs[i]
			}
		}
		return created != nil && other != nil, err
	})

	// With the object as it is now.
	askRerun(t, env, a, v1alpha1.Rerun{Request: "req-now", Run: created.ID, Reason: "the notifier was down", By: "jane@example.com"})
	rerunEvent(t, env, v1alpha1.EventRerunStarted, "req-now")
	recs := waitRecords(t, out, "a", 3, "the re-run with the object now")
	if got := recs[2]; got.Trigger != v1alpha1.TriggerRerun || got.Key != created.Key+"/rerun/1" || got.NewText != "two" {
		t.Errorf("the re-run got trigger %q key %q text %q; want rerun, %s/rerun/1 and the object now (two)", got.Trigger, got.Key, got.NewText, created.Key)
	}
	// With the binding context the create run got.
	askRerun(t, env, a, v1alpha1.Rerun{Request: "req-same", Run: created.ID, SameInput: true, By: "jane@example.com"})
	rerunEvent(t, env, v1alpha1.EventRerunStarted, "req-same")
	recs = waitRecords(t, out, "a", 4, "the re-run with the recorded input")
	if got := recs[3]; got.Trigger != v1alpha1.TriggerRerun || got.Key != created.Key+"/rerun/2" || got.NewText != "one" {
		t.Errorf("the re-run --same-input got trigger %q key %q text %q; want rerun, %s/rerun/2 and the recorded object (one)", got.Trigger, got.Key, got.NewText, created.Key)
	}

	var orig *archive.Run
	eventually(t, 30*time.Second, "both re-runs succeeded, linked to the create run", func(ctx context.Context) (bool, error) {
		var err error
		if orig, err = store.Get(ctx, created.ID); err != nil || len(orig.Reruns) != 2 {
			return false, err
		}
		for _, id := range orig.Reruns {
			r, err := store.Get(ctx, id)
			if err != nil || r.Outcome != archive.Succeeded {
				return false, err
			}
		}
		return true, nil
	})
	now, err := store.Get(t.Context(), orig.Reruns[0])
	if err != nil {
		t.Fatal(err)
	}
	if now.RerunOf != created.ID || now.Actor != "jane@example.com" || now.Reason != "the notifier was down" || now.Trigger != v1alpha1.TriggerRerun {
		t.Errorf("the re-run's record: rerunOf %q actor %q reason %q trigger %q; want %s, jane@example.com, its reason, rerun", now.RerunOf, now.Actor, now.Reason, now.Trigger, created.ID)
	}
	var input struct {
		RerunOf string `json:"rerunOf"`
		Trigger string `json:"trigger"`
		RunID   string `json:"runId"`
	}
	if err := json.Unmarshal(now.Input, &input); err != nil || input.RerunOf != created.ID || input.Trigger != v1alpha1.TriggerRerun || input.RunID != now.ID {
		t.Errorf("the re-run's recorded input %s (%v); want rerunOf %s, trigger rerun, its own run id", now.Input, err, created.ID)
	}
	if len(now.Result) == 0 || len(created.Input) != 0 {
		// List gives no input; Get gives the result.
		t.Errorf("the re-run's result %q, the listed run's input %q; want the result recorded, and List without input", now.Result, created.Input)
	}

	// Another object's run, asked on a: refused, with why; nothing runs.
	askRerun(t, env, a, v1alpha1.Rerun{Request: "req-other", Run: other.ID, By: "jane@example.com"})
	if msg := rerunEvent(t, env, v1alpha1.EventRerunRefused, "req-other"); !strings.Contains(msg, "ran for another object") {
		t.Errorf("refusal %q; want it to say the run ran for another object", msg)
	}
	cur := task(env.Namespace, "a", "", "")
	eventually(t, 30*time.Second, "the request removed once answered", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			return false, err
		}
		_, pending := cur.GetAnnotations()[v1alpha1.RerunAnnotation]
		return !pending, nil
	})
	if n := len(records(t, out, "a")); n != 4 {
		t.Errorf("a's handler ran %d times; want 4: create, update and the two re-runs (a refused request and a re-run's own write run nothing)", n)
	}
}

// TestARerunOfAWatchedObjectsRunLeavesTheObjectUnwritten: a re-run asked
// on a watched Deployment runs its handler again, keyed as a re-run; the
// engine writes nothing to the Deployment (the request stays, answered
// once: an unrelated change of the object runs nothing more).
func TestARerunOfAWatchedObjectsRunLeavesTheObjectUnwritten(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Namespace: a.Namespace, Archive: store})
	if err := e.Apply(ctx, compileYAML(t, fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: rerun-%s}
spec:
  watch: {apiVersion: apps/v1, kind: Deployment, namespaces: [%s]}
  handlers:
  - name: created
    on: [create]
    %s
`, a.Namespace, a.Namespace, recorderExec(t, out)))); err != nil {
		t.Fatal(err)
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, deployment(a.Namespace, name, "nginx:1"))
	waitRecords(t, out, name, 1, "the create run")
	var created *archive.Run
	eventually(t, 30*time.Second, "the create run succeeded", func(ctx context.Context) (bool, error) {
		runs, err := archive.ListAll(ctx, store, archive.Query{Name: name, Outcome: archive.Succeeded})
		if len(runs) == 1 {
			created = &runs[0]
		}
		return created != nil, err
	})

	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	dep.SetNamespace(a.Namespace)
	dep.SetName(name)
	askRerun(t, a, dep, v1alpha1.Rerun{Request: "req-watched", Run: created.ID, Reason: "redo", By: "jane@example.com"})
	rerunEvent(t, a, v1alpha1.EventRerunStarted, "req-watched")
	recs := waitRecords(t, out, name, 2, "the re-run")
	if recs[1].Trigger != v1alpha1.TriggerRerun || recs[1].Key != created.Key+"/rerun/1" {
		t.Errorf("the re-run got trigger %q key %q; want rerun and %s/rerun/1", recs[1].Trigger, recs[1].Key, created.Key)
	}

	// An unrelated change reconciles it again: the request, still there,
	// was answered.
	if err := a.Client.Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // nothing should come: no event to wait for
	if n := len(records(t, out, name)); n != 2 {
		t.Errorf("%d runs; want 2: a request answered asks for nothing more", n)
	}
	got := &appsv1.Deployment{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[v1alpha1.RerunAnnotation]; !ok {
		t.Errorf("annotations %v; want the request left on the watched object", got.Annotations)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == engine.FieldManager {
			t.Errorf("opkit wrote the Deployment: %+v", mf)
		}
	}
}
