package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// A run the archive holds as Succeeded whose result the object's status
// lacks (the engine was killed after it recorded the run and before it
// merged the status) is not run again, and its recorded result is merged:
// the handler's status fields are there, as if the engine had not died.
// The crash is played by its outcome: the status fields and the
// handler's record removed from the object while no engine runs, the
// archive's run kept.
func TestARunRecordedSucceededHasItsRecordedResultAppliedAfterACrash(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	script := filepath.Join(dir, "mark.sh")
	if err := os.WriteFile(script, fmt.Appendf(nil, "#!/bin/sh\ncat > /dev/null\necho x >> %q\necho '{\"status\":{\"handled\":true,\"by\":\"mark\"}}'\n", marks), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "operator.yaml")
	if err := os.WriteFile(def, fmt.Appendf(nil, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: recorded}
spec:
  resource:
    group: recorded.example.com
    kind: Mark
    versions:
    - name: v1
      schema:
        type: object
        properties:
          n: {type: integer}
  handlers:
  - name: mark
    on: [create]
    exec:
      command: [%q]
`, script), 0o644); err != nil {
		t.Fatal(err)
	}
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, def)

	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "recorded.example.com/v1", "kind": "Mark",
		"metadata": map[string]any{"name": "m", "namespace": env.Namespace}, "spec": map[string]any{"n": int64(1)},
	}}
	create(t, env, obj)
	status := func(ctx context.Context) (handled bool, record bool, err error) {
		u := obj.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
			return false, false, err
		}
		handled, _, _ = unstructured.NestedBool(u.Object, "status", "handled")
		_, record, _ = unstructured.NestedMap(u.Object, "status", "opkit", "handlers", "mark")
		return handled, record, nil
	}
	eventually(t, time.Minute, "mark handled the Mark", func(ctx context.Context) (bool, error) {
		handled, record, err := status(ctx)
		return handled && record, err
	})
	stop()

	// The crash's outcome: the run Succeeded in the archive, the status
	// without its result nor the handler's record.
	patch := []byte(`{"status":{"handled":null,"by":null,"opkit":{"handlers":null}}}`)
	if err := env.Client.Status().Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if handled, record, err := status(t.Context()); err != nil || handled || record {
		t.Fatalf("after the patch: handled %v, record %v, %v; want neither", handled, record, err)
	}

	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, def)
	eventually(t, time.Minute, "the recorded result merged and the handler's record written again", func(ctx context.Context) (bool, error) {
		handled, record, err := status(ctx)
		return handled && record, err
	})
	u := obj.DeepCopy()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), u); err != nil {
		t.Fatal(err)
	}
	if by, _, _ := unstructured.NestedString(u.Object, "status", "by"); by != "mark" {
		t.Errorf("status.by is %q; want the recorded result's mark", by)
	}
	if data, _ := os.ReadFile(marks); strings.Count(string(data), "x") != 1 {
		t.Errorf("the handler ran %d times; want once: its success was recorded", strings.Count(string(data), "x"))
	}
}
