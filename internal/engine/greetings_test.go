package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// The handlers example: one handler each in Python, bash and Go.
func TestGreetingsExampleRunsItsPythonBashAndGoHandlers(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, "../../examples/handlers/operator.yaml")
	cleanUpAll(t, env, "demo.example.com/v1", "Greeting")

	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "world", "namespace": env.Namespace},
		"spec":     map[string]any{"name": "World", "language": "en"},
	}}
	create(t, env, g)
	greeting := func(want string) {
		t.Helper()
		eventually(t, 60*time.Second, "status.greeting "+want, func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return false, err
			}
			got, _, _ := unstructured.NestedString(g.Object, "status", "greeting")
			return got == want, nil
		})
	}
	greeting("Hello, World!")
	setSpec(t, env, g, "language", "fr")
	greeting("Bonjour, World!")

	eventually(t, 30*time.Second, "Greeted and Audited events", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "world" {
				reasons[e.Reason] = true
			}
		}
		return reasons["Greeted"] && reasons["Audited"], nil
	})
	page, err := store.List(t.Context(), archive.Query{Handler: "greet"})
	if err != nil || len(page.Runs) != 2 {
		t.Fatalf("greet runs %+v, %v; want create and update", page.Runs, err)
	}
	logs, _ := logData(store.Logs(t.Context(), page.Runs[0].ID, 0))
	if !strings.Contains(string(logs), "update (attempt 1): Bonjour, World!") || !strings.Contains(string(logs), "change spec.language") {
		t.Errorf("the Python handler's log %q", logs)
	}

	if err := env.Client.Delete(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, g, 120*time.Second, "the Greeting is gone after its Go delete handler")
	run := mustLatestRun(t, store, "world")
	logs, _ = logData(store.Logs(t.Context(), run.ID, 0))
	if run.Handler != "goodbye" || run.Outcome != archive.Succeeded || !strings.Contains(string(logs), "goodbye, "+env.Namespace+"/world (delete") {
		t.Errorf("the last run %+v, log %q", run, logs)
	}
}
