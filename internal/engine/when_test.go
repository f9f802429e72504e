package engine_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestWhenRunsOncePerTransitionToTrue gives a handler the condition that
// a child ConfigMap holds the word "go": it runs when that becomes true,
// not again while it stays true, and again after it was false.
func TestWhenRunsOncePerTransitionToTrue(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	bin := clustertest.HandlerBinary(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	def := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: gates}
spec:
  resource:
    group: when.example.com
    kind: Gate
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
          word: {type: string}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-gate"}
      data: {word: "${self.spec.word}"}
  handlers:
  - name: open
    on: [when]
    when: "children.config.data.word == 'go'"
    exec:
      command: [%q]
      env: [{name: %s, value: "1"}, {name: OUT, value: %q}]
`, bin, handlerEnv, out)
	if err := e.Apply(t.Context(), compileYAML(t, def)); err != nil {
		t.Fatal(err)
	}
	name := env.Namespace
	gate := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "when.example.com/v1", "kind": "Gate",
		"metadata": map[string]any{"name": name, "namespace": env.Namespace},
		"spec":     map[string]any{"word": "wait", "text": "a"},
	}}
	create(t, env, gate)
	waitConfigMapData(t, env, name+"-gate", "the child", map[string]string{"word": "wait"})
	time.Sleep(time.Second)
	if n := len(records(t, out, name)); n != 0 {
		t.Fatalf("%d runs while the condition is false", n)
	}

	setSpec(t, env, gate, "word", "go")
	first := waitRecords(t, out, name, 1, "the run for the condition becoming true")
	// True still, after another change: no run.
	setSpec(t, env, gate, "text", "b")
	time.Sleep(2 * time.Second)
	if n := len(records(t, out, name)); n != 1 {
		t.Fatalf("%d runs while the condition stayed true; want 1", n)
	}
	// False, then true again: a second run, with a key of its own.
	setSpec(t, env, gate, "word", "stop")
	waitConfigMapData(t, env, name+"-gate", "the child", map[string]string{"word": "stop"})
	time.Sleep(time.Second)
	setSpec(t, env, gate, "word", "go")
	runs := waitRecords(t, out, name, 2, "the run for the second transition")
	if runs[0].Trigger != "when" || runs[1].Trigger != "when" || runs[0].Key == runs[1].Key || first[0].Key != runs[0].Key {
		t.Errorf("runs %+v; want two when runs with their own keys", runs)
	}
}
