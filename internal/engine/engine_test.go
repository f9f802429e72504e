package engine_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

func TestMain(m *testing.M) {
	if os.Getenv(handlerEnv) == "1" {
		clustertest.Exit(testHandler())
	}
	if os.Getenv(jobHandlerEnv) == "1" {
		clustertest.Exit(testJobHandler())
	}
	if os.Getenv(eventHandlerEnv) == "1" {
		clustertest.Exit(testEventHandler())
	}
	if os.Getenv(traceHandlerEnv) == "1" {
		clustertest.Exit(testTraceHandler())
	}
	if os.Getenv(counterHandlerEnv) == "1" {
		clustertest.Exit(testCounterHandler())
	}
	if mode := os.Getenv(admissionHandlerEnv); mode != "" {
		clustertest.Exit(testAdmissionHandler(mode))
	}
	// Four tests at a time: each runs an engine of its own namespace, and
	// waits most of its time (for a handler, a retry, the plane).
	clustertest.DefaultParallel(4)
	clustertest.Main(m)
}

var eventually = clustertest.Eventually

// startEngine runs an engine of env's namespace (runEngine) with the
// definitions in files until the test ends.
func startEngine(t *testing.T, env *clustertest.Env, files ...string) *engine.Engine {
	t.Helper()
	e, _ := runEngine(t, env, files...)
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
	t.Parallel()
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/printer/operator.yaml")
	ctx := t.Context()
	start := time.Now()
	step := func(what string) { t.Logf("%-40s %s", what, time.Since(start).Round(100*time.Millisecond)) }
	text := `Hello Kube! $(rm -rf /); echo "pwned" 'x'`
	p := printer(env.Namespace, "hello", text)
	create(t, env, p)

	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: env.Namespace, Name: "hello-print"}
	eventually(t, 60*time.Second, "the Pod succeeds", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, key, pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	})
	step("Pod succeeded")
	// Every $ doubled, for the kubelet's $(VAR) expansion to undo.
	if got, want := pod.Spec.Containers[0].Command, strings.ReplaceAll(text, "$", "$$"); len(got) != 2 || got[0] != "echo" || got[1] != want {
		t.Errorf("command %q, want [echo %q]", got, want)
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
	table := kubectl(t, "get", "printers.demo.example.com", "-n", env.Namespace) // the group: other tests install other Printers
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
	waitGone(t, env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, 60*time.Second, "the Pod is garbage-collected")
	step("Pod garbage-collected")
}

// compileYAML compiles one definition given inline.
func compileYAML(t *testing.T, yaml string) *definition.Definition {
	t.Helper()
	srcs, err := definition.Load("inline.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const notesV1 = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes}
spec:
  resource:
    group: notes.example.com
    kind: Note
    versions:
    - name: v1
      schema:
        type: object
        properties:
          a: {type: string}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-note"}
      data: {a: "${self.spec.a}"}
`

func TestDefinitionsChangeAndGoWithoutRestart(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	ctx := t.Context()
	if err := e.Apply(ctx, compileYAML(t, notesV1)); err != nil {
		t.Fatal(err)
	}
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "notes.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "n1", "namespace": env.Namespace},
		"spec":     map[string]any{"a": "first"},
	}}
	create(t, env, note)
	waitConfigMapData(t, env, "n1-note", "the ConfigMap of v1", map[string]string{"a": "first"})

	// A changed definition, schema included, takes over at once.
	v2 := strings.Replace(notesV1, "          a: {type: string}\n", "          a: {type: string}\n          b: {type: string}\n", 1)
	v2 = strings.Replace(v2, `data: {a: "${self.spec.a}"}`, `data: {a: "${self.spec.a}", b: "${self.spec.b}"}`, 1)
	if err := e.Apply(ctx, compileYAML(t, v2)); err != nil {
		t.Fatal(err)
	}
	setSpec(t, env, note, "b", "second")
	waitConfigMapData(t, env, "n1-note", "the ConfigMap of v2", map[string]string{"a": "first", "b": "second"})

	// Removed: the controller stops; changes are no longer acted on.
	e.Remove(ctx, "notes")
	setSpec(t, env, note, "a", "third")
	time.Sleep(3 * time.Second)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "n1-note"}, cm); err != nil || cm.Data["a"] != "first" {
		t.Errorf("after Remove the ConfigMap changed: %v %v", cm.Data, err)
	}
}

func TestChildKindNotServedIsRefusedAndOthersRun(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	bad := strings.Replace(notesV1, "name: notes}", "name: notes-bad}", 1)
	bad = strings.Replace(bad, "group: notes.example.com", "group: badnotes.example.com", 1)
	bad = strings.Replace(bad, "apiVersion: v1\n      kind: ConfigMap", "apiVersion: nosuch.example.com/v1\n      kind: Widget", 1)
	err := e.Apply(t.Context(), compileYAML(t, bad))
	if err == nil || !strings.Contains(err.Error(), "nosuch.example.com") || !strings.Contains(err.Error(), "not served") {
		t.Fatalf("Apply with an unserved child kind: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "notes.badnotes.example.com"}, crd); !apierrors.IsNotFound(err) {
		t.Errorf("the refused definition's CRD was installed: %v", err)
	}
	// The engine still runs other operators.
	good := strings.Replace(notesV1, "name: notes}", "name: notes-good}", 1)
	good = strings.Replace(good, "group: notes.example.com", "group: goodnotes.example.com", 1)
	if err := e.Apply(t.Context(), compileYAML(t, good)); err != nil {
		t.Fatalf("a valid operator after a refused one: %v", err)
	}
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "goodnotes.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "n2", "namespace": env.Namespace},
		"spec":     map[string]any{"a": "ok"},
	}}
	create(t, env, note)
	eventually(t, 30*time.Second, "its ConfigMap", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "n2-note"}, &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})
}

func TestChildFieldsAreCheckedAgainstTheClustersSchemas(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	def := strings.NewReplacer("name: notes}", "name: typed}", "group: notes.example.com", "group: typed.example.com").Replace(notesV1) +
		"  - id: copy\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"${self.metadata.name}-copy\"}\n      data: {a: \"${children.config.spec.a}\"}\n"
	// Compiled offline, children are not typed; the engine types them with
	// the schemas the API server publishes.
	err := e.Apply(t.Context(), compileYAML(t, def))
	if err == nil || !strings.Contains(err.Error(), "inline.yaml:") || !strings.Contains(err.Error(), "spec.children[1].template.data.a") || !strings.Contains(err.Error(), "undefined field 'spec'") {
		t.Fatalf("Apply reading a field a ConfigMap does not have: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "notes.typed.example.com"}, crd); !apierrors.IsNotFound(err) {
		t.Errorf("the refused definition's CRD was installed: %v", err)
	}
	fixed := strings.Replace(def, "children.config.spec.a", "children.config.data.a", 1)
	if err := e.Apply(t.Context(), compileYAML(t, fixed)); err != nil {
		t.Fatalf("a child read through its kind's fields: %v", err)
	}
}
