package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// choresOperator is a life cycle where work gives up: its enter handler
// fails for good, a guard on the run's outcome moves the Chore into a
// state that needs a person, whose enter handler pages someone. prepare,
// a create handler declared between them, gives up too, on the object's
// generation: it stays given up until opkit retry or a new generation.
func choresOperator(t *testing.T, out string) string {
	t.Helper()
	never := filepath.Join(t.TempDir(), "never") // FAIL_UNTIL: fails for as long as it does not exist
	def := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: chores}
spec:
  resource:
    group: stalls.example.com
    kind: Chore
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  states:
  - name: Working
    initial: true
    transitions:
    - {to: Done, reason: Worked, when: "run.outcome == 'Succeeded'"}
    - {to: Stuck, reason: WorkGaveUp, when: "run.outcome == 'GaveUp'"}
  - name: Stuck
    needsPerson: {question: "The work gave up. Drop the chore?"}
    transitions:
    - {to: Done, reason: Dropped, description: give it up for good}
  - {name: Done, final: true}
  handlers:
  - name: work
    on: [enter]
    states: [Working]
    retry: {maxAttempts: 1}
    %s
  - name: prepare
    on: [create]
    retry: {maxAttempts: 1}
    %s
  - name: page
    on: [enter]
    states: [Stuck]
    %s
`, recorderExec(t, out, "FAIL_UNTIL="+never), recorderExec(t, out, "FAIL_UNTIL="+never), recorderExec(t, out))
	file := filepath.Join(t.TempDir(), "chores.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func chore(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("stalls.example.com/v1")
	u.SetKind("Chore")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// TestHandlerThatGaveUpHoldsBackNeitherTheNextStateNorADecision: a
// handler that gave up (work's enter run, and prepare's create run,
// declared before page) does not hold back the enter handler of the state
// entered, and a person's decision there is taken, with who decided and
// why; prepare is left given up.
func TestHandlerThatGaveUpHoldsBackNeitherTheNextStateNorADecision(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, choresOperator(t, filepath.Join(t.TempDir(), "records.jsonl")))

	create(t, env, chore(env.Namespace, "dishes"))
	read := func(ctx context.Context) (*unstructured.Unstructured, *v1alpha1.ObjectState, error) {
		return objectState(ctx, env, chore(env.Namespace, "dishes"))
	}
	var u *unstructured.Unstructured
	eventually(t, 60*time.Second, "dishes Stuck, after work gave up", func(ctx context.Context) (bool, error) {
		var s *v1alpha1.ObjectState
		var err error
		u, s, err = read(ctx)
		return err == nil && s.Name == "Stuck" && s.Seq == 2, err
	})
	uid := string(u.GetUID())
	eventually(t, 60*time.Second, "page run on entering Stuck (prepare gave up before it)", func(ctx context.Context) (bool, error) {
		return store.Succeeded(ctx, uid+"/state/2/page")
	})

	// The decision, as opkit decide writes it: against the object as read,
	// read again when the engine wrote it meanwhile.
	writeDecision(t, env, chore(env.Namespace, "dishes"), "Done", "nobody needs it done")
	var done *v1alpha1.ObjectState
	eventually(t, 30*time.Second, "the decision taken: dishes Done, the annotation removed", func(ctx context.Context) (bool, error) {
		u, s, err := read(ctx)
		if err != nil {
			return false, err
		}
		_, has := u.GetAnnotations()[v1alpha1.DecisionAnnotation]
		done = s
		return s.Name == "Done" && !has, nil
	})
	if done.Seq != 3 || done.Trigger != v1alpha1.TransitionDecision || done.By != "ana" || done.Message != "nobody needs it done" || done.Reason != "Dropped" {
		t.Errorf("Done: %+v; want seq 3, decided by ana (nobody needs it done), reason Dropped", done)
	}
	rec, err := store.Get(t.Context(), done.Run)
	if err != nil || rec.Actor != "ana" || rec.Trigger != v1alpha1.TransitionDecision || rec.Key != uid+"/state/3" {
		t.Errorf("the decision's record: %+v (%v); want actor ana, trigger decision, key %s/state/3", rec, err, uid)
	}
	eventually(t, 30*time.Second, "a Decided Event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, env, "dishes", "Decided", "ana chose Done in Stuck: nobody needs it done"), nil
	})

	// prepare is left given up: it ran once, and the object says so.
	runs, err := archive.ListAll(t.Context(), store, archive.Query{UID: uid, Handler: "prepare"})
	if err != nil || len(runs) != 1 || runs[0].Outcome != archive.GaveUp {
		t.Errorf("prepare's runs: %+v (%v); want one, given up", runs, err)
	}
	u, _, err = read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if stalled, _, _ := unstructured.NestedBool(u.Object, "status", "opkit", "handlers", "prepare", "stalled"); !stalled {
		t.Errorf("prepare's record after the decision: %v; want it still given up", u.Object["status"])
	}
}
