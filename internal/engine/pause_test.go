package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// TestAPausedOperatorRunsNothingUntilResumedAndRecordsEachObjectOnce
// pauses a whole operator through its Operator's annotation: a change of
// an object and an object created while paused run no handler, each object
// is recorded paused once naming the operator's pause (who, why) and says
// so in its Paused condition; the resume runs what was held back, each
// object recorded resumed once by who resumed, and the record of the resume
// is removed from the Operator.
//
// One at a time with the other tests that run the cluster's Operators
// (runsClusterOperators): an engine watching Operators runs every
// Operator of the plane, so two such tests at once would each run the
// other's.
func TestAPausedOperatorRunsNothingUntilResumedAndRecordsEachObjectOnce(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	var mu sync.Mutex
	var ran []string // name/trigger/generation
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var bc struct {
			Trigger string `json:"trigger"`
			Object  struct {
				Metadata struct {
					Name       string `json:"name"`
					Generation int64  `json:"generation"`
				} `json:"metadata"`
			} `json:"object"`
		}
		_ = json.Unmarshal(body, &bc)
		mu.Lock()
		ran = append(ran, bc.Object.Metadata.Name+"/"+bc.Trigger+"/"+strconv.FormatInt(bc.Object.Metadata.Generation, 10))
		mu.Unlock()
		_, _ = w.Write([]byte(`{}`))
	}))
	defer hook.Close()
	runs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	watchOperators(t, e)
	name := "pauseop-" + strings.ToLower(archive.NewID(time.Now())[12:])
	putOperator(t, env.Client, operatorObject(t, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: `+name+`}
spec:
  resource:
    group: `+name+`.example.com
    kind: Task
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
  handlers:
  - name: work
    on: [create, update]
    http: {url: "`+hook.URL+`/work"}
`))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.WithoutCancel(t.Context()), &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	op := waitOperator(t, env.Client, name, metav1.ConditionTrue, engine.ReasonRunning)
	task := func(n, text string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": name + ".example.com/v1", "kind": "Task",
			"metadata": map[string]any{"name": n, "namespace": env.Namespace},
			"spec":     map[string]any{"text": text},
		}}
	}
	ranAll := func(what string, want ...string) {
		t.Helper()
		eventually(t, time.Minute, what, func(context.Context) (bool, error) {
			got := strings.Join(runs(), " ")
			for _, w := range want {
				if !strings.Contains(got, w) {
					return false, nil
				}
			}
			return true, nil
		})
	}
	annotate := func(annotations map[string]any) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err := env.Client.Patch(t.Context(), op.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	// pausedAt waits until obj, at generation, shows Paused as want.
	pausedAt := func(obj *unstructured.Unstructured, generation int64, want bool) *unstructured.Unstructured {
		t.Helper()
		live := obj.DeepCopy()
		eventually(t, time.Minute, obj.GetName()+" reconciled at its generation with Paused="+map[bool]string{true: "True", false: "absent"}[want], func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			observed, _, _ := unstructured.NestedInt64(live.Object, "status", "observedGeneration")
			c := condition(live, v1alpha1.ConditionPaused)
			return observed == generation && (c != nil && c.Status == metav1.ConditionTrue) == want, nil
		})
		return live
	}
	records := func(trigger string) map[string][]archive.Run {
		t.Helper()
		page, err := store.List(t.Context(), archive.Query{Operator: name, Handler: v1alpha1.PauseHandler, Trigger: trigger, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string][]archive.Run{}
		for _, r := range page.Runs {
			by[r.Name] = append(by[r.Name], r)
		}
		return by
	}

	t1 := task("t1", "one")
	create(t, env, t1)
	ranAll("t1 created", "t1/create/1")

	// Paused: a change and a new object run nothing.
	annotate(map[string]any{v1alpha1.PauseAnnotation: v1alpha1.Pause{By: "jane", Reason: "the database migrates", At: "2025-01-02T08:00:00Z"}.Value()})
	live := pausedAt(t1, 1, true)
	msg := conditionMessage(live, v1alpha1.ConditionPaused)
	for _, want := range []string{"operator " + name, "by jane: the database migrates", "opkit resume --operator " + name + " --all"} {
		if !strings.Contains(msg, want) {
			t.Errorf("t1's Paused condition says %q; want it to say %q", msg, want)
		}
	}
	if err := env.Client.Patch(t.Context(), live, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"text":"two"}}`))); err != nil {
		t.Fatal(err)
	}
	t2 := task("t2", "new")
	create(t, env, t2)
	// A re-run asked while paused waits too (an object's own pause holds
	// its re-run; so does its operator's).
	created, err := store.List(t.Context(), archive.Query{Operator: name, Handler: "work", Name: "t1", Trigger: v1alpha1.OnCreate, Limit: 1})
	if err != nil || len(created.Runs) != 1 {
		t.Fatalf("t1's create run: %+v, %v", created, err)
	}
	askRerun(t, env, t1, v1alpha1.Rerun{Request: "req-paused", Run: created.Runs[0].ID, By: "jane", Reason: "asked while paused"})
	live = pausedAt(t1, 2, true)
	pausedAt(t2, 1, true)
	if got := runs(); len(got) != 1 {
		t.Fatalf("handlers ran while the operator was paused: %v", got)
	}
	if live.GetAnnotations()[v1alpha1.RerunAnnotation] == "" {
		t.Errorf("t1's re-run request was taken while its operator was paused; want it to wait for the resume")
	}
	paused := records(v1alpha1.TriggerPaused)
	for _, n := range []string{"t1", "t2"} {
		if len(paused[n]) != 1 {
			t.Fatalf("%s recorded paused %d times, want once: %+v", n, len(paused[n]), paused[n])
		}
		r := paused[n][0]
		data, _ := logData(store.Logs(t.Context(), r.ID, 0))
		if r.Actor != "jane" || !strings.Contains(string(data), "with all of operator "+name+"'s, by jane: the database migrates") {
			t.Errorf("%s's pause is recorded by %q, log %q; want jane and the operator's pause", n, r.Actor, data)
		}
	}

	// Resumed: what was held back runs, once.
	annotate(map[string]any{v1alpha1.PauseAnnotation: nil, v1alpha1.ResumedAnnotation: v1alpha1.Pause{By: "joe", Reason: "done"}.Value()})
	ranAll("the held-back runs and the re-run after the resume", "t1/update/2", "t2/create/1", "t1/rerun/2")
	rerunEvent(t, env, v1alpha1.EventRerunStarted, "req-paused")
	pausedAt(t1, 2, false)
	pausedAt(t2, 1, false)
	eventually(t, 30*time.Second, "the record of the resume removed from the Operator", func(ctx context.Context) (bool, error) {
		live := &v1alpha1.Operator{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, live); err != nil {
			return false, err
		}
		_, ok := live.Annotations[v1alpha1.ResumedAnnotation]
		return !ok, nil
	})
	resumed := records(v1alpha1.TriggerResumed)
	for _, n := range []string{"t1", "t2"} {
		if len(resumed[n]) != 1 || resumed[n][0].Actor != "joe" {
			t.Errorf("%s recorded resumed %+v; want once, by joe", n, resumed[n])
		}
	}
	if got := records(v1alpha1.TriggerPaused); len(got["t1"]) != 1 || len(got["t2"]) != 1 {
		t.Errorf("pauses recorded again after the resume: %+v", got)
	}
	if got := runs(); len(got) != 4 {
		t.Errorf("handler runs %v; want t1's create, then t1's update, its re-run and t2's create once each", got)
	}
}
