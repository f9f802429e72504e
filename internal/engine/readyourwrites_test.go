package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// counterHandlerEnv makes the test binary the counting handler: it reads
// status.count from the object of its binding context, records what it
// saw to the file $OUT, and returns count+1 as the status.
const counterHandlerEnv = "OPKIT_TEST_COUNTER_HANDLER"

// counted is one counting run, as the handler saw it.
type counted struct {
	Handler string `json:"handler"`
	Trigger string `json:"trigger"`
	RunID   string `json:"runId"`
	Saw     int64  `json:"saw"`
}

func testCounterHandler() int {
	var in struct {
		Handler string `json:"handler"`
		Trigger string `json:"trigger"`
		RunID   string `json:"runId"`
		Object  struct {
			Status struct {
				Count int64 `json:"count"`
			} `json:"status"`
		} `json:"object"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "bad binding context:", err)
		return 2
	}
	line, _ := json.Marshal(counted{Handler: in.Handler, Trigger: in.Trigger, RunID: in.RunID, Saw: in.Object.Status.Count})
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf(`{"status": {"count": %d}}`+"\n", in.Object.Status.Count+1)
	return 0
}

// countingOperator writes a definition of Counters whose handlers each
// add one to status.count, one handler per entry of triggers (its on:
// list, and its extra lines).
func countingOperator(t *testing.T, name string, out string, handlers ...string) string {
	t.Helper()
	bin := clustertest.HandlerBinary(t)
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  resource:
    group: %s.rw.example.com
    kind: Counter
    versions:
    - name: v1
      schema: {type: object, properties: {n: {type: integer}}}
      statusSchema: {properties: {count: {type: integer}}}
  handlers:
`, name, name)
	for i, h := range handlers {
		fmt.Fprintf(&b, "  - name: c%d\n    on: %s\n    exec: {command: [%q], env: [{name: %s, value: \"1\"}, {name: OUT, value: %q}]}\n",
			i+1, h, bin, counterHandlerEnv, out)
	}
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// counter is a Counter of the operator named name (countingOperator),
// named as it.
func counter(ns, name string, n int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": name + ".rw.example.com/v1", "kind": "Counter",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"n": n},
	}}
}

// readCounted reads the counting runs recorded in out, in the order they
// ran (one object's runs never overlap).
func readCounted(t *testing.T, out string) []counted {
	t.Helper()
	return readLines[counted](t, out)
}

// checkNoLostWrite checks read-your-writes over the counting runs: the
// n-th run saw the n-1 writes before it, and status.count holds them all.
func checkNoLostWrite(t *testing.T, runs []counted, count int64) {
	t.Helper()
	for i, r := range runs {
		if r.Saw != int64(i) {
			var b strings.Builder
			for j, r := range runs {
				fmt.Fprintf(&b, "\n  run %d: %s (%s) saw count %d", j+1, r.Handler, r.Trigger, r.Saw)
			}
			t.Fatalf("run %d (%s, %s) saw status.count %d, not the %d writes of the runs before it:%s", i+1, r.Handler, r.Trigger, r.Saw, i, b.String())
		}
	}
	if count != int64(len(runs)) {
		t.Fatalf("status.count is %d after %d runs that each added one", count, len(runs))
	}
}

// TestRunsSeeEveryEarlierStatusWrite is guarantee 11 (read-your-writes):
// handlers of one object that each read status.count and write count+1,
// run one after the other, lose no write: each run sees the status the
// run before it wrote, also when the next run starts in the reconcile
// that records the previous one's end.
func TestRunsSeeEveryEarlierStatusWrite(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("%d handlers", n), func(t *testing.T) {
			t.Parallel()
			env := clustertest.New(t)
			out := filepath.Join(t.TempDir(), "counted.jsonl")
			handlers := make([]string, n)
			for i := range handlers {
				handlers[i] = "[create, update]"
			}
			name := fmt.Sprintf("counters-%d", n)
			file := countingOperator(t, name, out, handlers...)
			startEngine(t, env, file)
			obj := counter(env.Namespace, name, 0)
			create(t, env, obj)
			const updates = 3
			for u := 1; u <= updates; u++ {
				want := n * u
				eventually(t, 60*time.Second, fmt.Sprintf("%d counting runs", want), func(context.Context) (bool, error) {
					return len(readCounted(t, out)) >= want, nil
				})
				setSpec(t, env, obj, "n", int64(u))
			}
			want := n * (updates + 1)
			eventually(t, 60*time.Second, fmt.Sprintf("%d counting runs", want), func(context.Context) (bool, error) {
				return len(readCounted(t, out)) >= want, nil
			})
			// The last run's write follows its record: give it time to land,
			// then say what was lost, if anything was.
			got := counter(env.Namespace, name, 0)
			var c int64
			for deadline := time.Now().Add(clustertest.Scaled(30 * time.Second)); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(got), got); err != nil {
					t.Fatal(err)
				}
				if c, _, _ = unstructured.NestedInt64(got.Object, "status", "count"); c >= int64(want) {
					break
				}
			}
			runs := readCounted(t, out)
			checkNoLostWrite(t, runs, c)
			if len(runs) != want {
				t.Fatalf("%d counting runs; want %d: %d handlers, each once on create and on each of %d updates", len(runs), want, n, updates)
			}
		})
	}
}

// TestEveryTriggerSeesTheLastStatusWrite: a run of any trigger — update,
// schedule, when, resume — that follows a status write sees it, in
// whatever order they come.
func TestEveryTriggerSeesTheLastStatusWrite(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	out := filepath.Join(t.TempDir(), "counted.jsonl")
	file := countingOperator(t, "mixed", out,
		"[create, update]",
		"[schedule]\n    schedule: {every: 1s}",
		"[when]\n    when: \"has(self.status.count) && self.status.count >= 3\"",
		"[resume]",
	)
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	obj := counter(env.Namespace, "mixed", 0)
	create(t, env, obj)
	eventually(t, 60*time.Second, "a create, schedule and when run", func(context.Context) (bool, error) {
		seen := map[string]bool{}
		for _, r := range readCounted(t, out) {
			seen[r.Trigger] = true
		}
		return seen["create"] && seen["schedule"] && seen["when"], nil
	})
	setSpec(t, env, obj, "n", int64(1))
	eventually(t, 60*time.Second, "the update run", func(context.Context) (bool, error) {
		return slices.ContainsFunc(readCounted(t, out), func(r counted) bool { return r.Trigger == "update" }), nil
	})
	// Stopped while paused, no run is cut short: every run recorded wrote.
	setPaused(t, env, obj, true)
	stop()
	// A second engine resumes the object: its resume run sees the count
	// the first engine's runs left.
	_, stop = runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	setPaused(t, env, obj, false)
	eventually(t, 60*time.Second, "the resume run and one more schedule run", func(context.Context) (bool, error) {
		runs := readCounted(t, out)
		i := slices.IndexFunc(runs, func(r counted) bool { return r.Trigger == "resume" })
		return i >= 0 && i < len(runs)-1, nil
	})
	setPaused(t, env, obj, true)
	stop()
	got := counter(env.Namespace, "mixed", 0)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(got), got); err != nil {
		t.Fatal(err)
	}
	c, _, _ := unstructured.NestedInt64(got.Object, "status", "count")
	checkNoLostWrite(t, readCounted(t, out), c)
}

// setPaused pauses or resumes obj's handlers, and waits until the engine
// says so: paused, no run is in flight nor starts.
func setPaused(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, paused bool) {
	t.Helper()
	value := "null"
	if paused {
		value = `"true"`
	}
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.PauseAnnotation + `":` + value + `}}}`)
	if err := env.Client.Patch(t.Context(), obj.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if !paused {
		return
	}
	eventually(t, 60*time.Second, "the Paused condition", func(ctx context.Context) (bool, error) {
		got := obj.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == v1alpha1.ConditionPaused && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}
