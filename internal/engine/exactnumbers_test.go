package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// An integer a handler writes into the status reaches the object as
// written, also above 2^53, where a float64 would round it
// (9007199254740993 became 9007199254740992), and a fraction stays a
// fraction.
func TestAHandlersIntegerReachesTheStatusExactly(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	def := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(def, []byte(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: exact}
spec:
  resource:
    group: exact.example.com
    kind: Counter
    versions:
    - name: v1
      schema:
        type: object
        properties:
          n: {type: integer}
  handlers:
  - name: count
    on: [create]
    exec:
      command: [/bin/echo, '{"status": {"bytes": 9007199254740993, "big": [-9223372036854775808, 1e3], "ratio": 0.5}}']
`), 0o644); err != nil {
		t.Fatal(err)
	}
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: newArchive(t)}, def)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "exact.example.com/v1", "kind": "Counter",
		"metadata": map[string]any{"name": "c", "namespace": env.Namespace}, "spec": map[string]any{"n": int64(1)},
	}}
	create(t, env, obj)
	var status map[string]any
	eventually(t, time.Minute, "the handler's status written", func(ctx context.Context) (bool, error) {
		u := obj.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
			return false, err
		}
		status, _, _ = unstructured.NestedMap(u.Object, "status")
		_, ok := status["bytes"]
		return ok, nil
	})
	if got := status["bytes"]; got != int64(9007199254740993) {
		t.Errorf("status.bytes = %v (%T), want 9007199254740993 exactly", got, got)
	}
	if got, _ := status["big"].([]any); len(got) != 2 || got[0] != int64(-9223372036854775808) || got[1] != int64(1000) {
		t.Errorf("status.big = %v, want [-9223372036854775808 1000]", status["big"])
	}
	if got := status["ratio"]; got != 0.5 {
		t.Errorf("status.ratio = %v (%T), want 0.5", got, got)
	}
}
