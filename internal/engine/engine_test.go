package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

var eventually = clustertest.Eventually

// startEngine runs an engine with the definitions in files until the test ends.
func startEngine(t *testing.T, env *clustertest.Env, files ...string) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Options{Config: env.Config})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	for _, f := range files {
		srcs, err := definition.LoadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range srcs {
			d, err := definition.Compile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Apply(t.Context(), d); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

// kubectl runs the plane's kubectl and fails the test if it fails.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// must keeps the output of a command whose failure is reported elsewhere.
func must(out string, _ error) string { return out }

func printer(ns, name, text string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Printer",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"text": text},
	}}
	return p
}

func TestPrinterPrintsItsTextAndFollowsChanges(t *testing.T) {
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/printer/operator.yaml")
	ctx := t.Context()
	start := time.Now()
	step := func(what string) { t.Logf("%-40s %s", what, time.Since(start).Round(100*time.Millisecond)) }
	text := `Hello Kube! $(rm -rf /); echo "pwned" 'x'`
	p := printer(env.Namespace, "hello", text)
	eventually(t, 30*time.Second, "create Printer", func(ctx context.Context) (bool, error) {
		return env.Client.Create(ctx, p) == nil, nil
	})

	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: env.Namespace, Name: "hello-print"}
	eventually(t, 60*time.Second, "the Pod succeeds", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, key, pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	})
	step("Pod succeeded")
	if got := pod.Spec.Containers[0].Command; len(got) != 2 || got[0] != "echo" || got[1] != text {
		t.Errorf("command %q, want [echo %q]", got, text)
	}
	if !metav1.IsControlledBy(pod, p) {
		t.Errorf("the Pod is not controlled by the Printer: %+v", pod.OwnerReferences)
	}
	if log := kubectl(t, "logs", "-n", env.Namespace, "hello-print"); log != text+"\n" {
		t.Errorf("log %q, want %q", log, text+"\n")
	}
	defer func() {
		if t.Failed() {
			t.Logf("printer: %v\nevents:\n%s", p.Object["status"], must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "events", "-n", env.Namespace)))
		}
	}()
	eventually(t, 30*time.Second, "status.phase follows the Pod", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		return phase == "Succeeded", nil
	})
	step("status.phase Succeeded")
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	if len(conds) != 2 {
		t.Errorf("conditions %v, want Ready and Degraded", conds)
	}
	table := kubectl(t, "get", "printers", "-n", env.Namespace)
	for _, col := range []string{"TEXT", "PHASE", "AGE", "Succeeded"} {
		if !strings.Contains(table, col) {
			t.Errorf("kubectl get printers lacks %s:\n%s", col, table)
		}
	}

	// A new text replaces the Pod.
	oldUID := pod.UID
	if err := unstructured.SetNestedField(p.Object, "second text", "spec", "text"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the Pod is replaced and succeeds", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, key, pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return pod.UID != oldUID && pod.Status.Phase == corev1.PodSucceeded, nil
	})
	step("Pod replaced and succeeded")
	if log := kubectl(t, "logs", "-n", env.Namespace, "hello-print"); log != "second text\n" {
		t.Errorf("log after the change %q", log)
	}

	// Deleting the Printer deletes its Pod.
	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the Pod is garbage-collected", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, key, &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	step("Pod garbage-collected")
}
