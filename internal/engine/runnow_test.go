package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/request"
)

// TestRunNowRunsAScheduleOnceAsManualWithWhoAndWhy asks, through the
// annotation opkit schedule run writes, for a run now of an operator-wide
// schedule whose slots are an hour apart: the handler runs at once with the
// trigger manual and the request's key, retried with that key, its record
// naming who asked and why; the engine answers with an Event and removes
// the request; a request that cannot apply is refused the same way.
func TestRunNowRunsAScheduleOnceAsManualWithWhoAndWhy(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var bc map[string]any
		_ = json.Unmarshal(body, &bc)
		mu.Lock()
		got = append(got, bc)
		first := len(got) == 1
		mu.Unlock()
		if first { // the first attempt fails: the retry keeps the key
			http.Error(w, "the registry is down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer hook.Close()
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	watchOperators(t, e)
	name := "runnow-" + strings.ToLower(archive.NewID(time.Now())[12:])
	putOperator(t, env.Client, operatorObject(t, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: `+name+`}
spec:
  handlers:
  - name: import
    on: [schedule]
    schedule: {every: 1h, catchUp: Skip}
    retry: {maxAttempts: 3, initialDelay: 1s}
    http: {url: "`+hook.URL+`/import"}
`))
	op := waitOperator(t, env.Client, name, metav1.ConditionTrue, engine.ReasonRunning)

	ask := func(annotation string, value string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotation: value}}})
		if err := env.Client.Patch(t.Context(), op.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(mark string) corev1.Event {
		t.Helper()
		var found corev1.Event
		eventually(t, time.Minute, "the Event answering "+mark, func(ctx context.Context) (bool, error) {
			var list corev1.EventList
			if err := env.Client.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
				return false, err
			}
			for _, ev := range list.Items {
				if ev.InvolvedObject.Name == name && strings.Contains(ev.Message, mark) {
					found = ev
					return true, nil
				}
			}
			return false, nil
		})
		return found
	}
	annotations := func() map[string]string {
		t.Helper()
		live := &v1alpha1.Operator{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, live); err != nil {
			t.Fatal(err)
		}
		return live.Annotations
	}

	req := v1alpha1.RunNow{ID: "r1", By: "jane", Reason: "the 8:00 import failed", At: time.Now().UTC().Format(time.RFC3339)}
	ask(v1alpha1.RunNowAnnotation("import"), req.Value())
	ev := answer("(request r1,")
	if ev.Reason != request.RunNow.Taken || !strings.Contains(ev.Message, "asked by jane: the 8:00 import failed") || !strings.Contains(ev.Message, "Succeeded, run ") {
		t.Errorf("the answer is %s %q; want RanNow naming who, why, the outcome and the run", ev.Reason, ev.Message)
	}
	eventually(t, 30*time.Second, "the request removed", func(context.Context) (bool, error) {
		_, ok := annotations()[v1alpha1.RunNowAnnotation("import")]
		return !ok, nil
	})

	key := v1alpha1.RunNowKey(name, "import", req)
	page, err := store.List(t.Context(), archive.Query{Operator: name, Handler: "import", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 2 {
		t.Fatalf("%d runs, want 2 (a failed attempt and its retry): %+v", len(page.Runs), page.Runs)
	}
	for _, r := range page.Runs {
		if r.Trigger != v1alpha1.TriggerManual || r.Key != key || r.Actor != "jane" {
			t.Errorf("run %s: trigger %s, key %s, actor %q; want manual, %s, jane", r.ID, r.Trigger, r.Key, r.Actor, key)
		}
		if data, _ := logData(store.Logs(t.Context(), r.ID, 0)); !strings.HasPrefix(string(data), "run now by jane: the 8:00 import failed (request r1") {
			t.Errorf("run %s's log starts %q; want who asked and why", r.ID, data)
		}
	}
	mu.Lock()
	bc := got[len(got)-1]
	mu.Unlock()
	schedule, _ := bc["schedule"].(map[string]any)
	manual, _ := schedule["manual"].(map[string]any)
	if bc["trigger"] != v1alpha1.TriggerManual || bc["idempotencyKey"] != key || manual["by"] != "jane" || manual["reason"] != "the 8:00 import failed" || manual["request"] != "r1" {
		t.Errorf("the handler got trigger %v, key %v, schedule %v; want manual, %s, and who asked and why", bc["trigger"], bc["idempotencyKey"], schedule, key)
	}

	// What cannot apply is refused, with why, and the request removed.
	ask(v1alpha1.RunNowAnnotation("nosuch"), v1alpha1.RunNow{ID: "r2", By: "jane", At: req.At}.Value())
	if ev := answer("(request r2,"); ev.Reason != request.RunNow.Refused || !strings.Contains(ev.Message, "has no handler nosuch (its handlers: import)") {
		t.Errorf("a request for no handler is answered %s %q; want RunNowRefused naming the handlers", ev.Reason, ev.Message)
	}
	ask(v1alpha1.RunNowAnnotation("import"), `{"id":"r3"}`)
	if ev := answer("request ?, asked by someone"); ev.Reason != request.RunNow.Refused || !strings.Contains(ev.Message, "names nobody") {
		t.Errorf("a request naming nobody is answered %s %q; want RunNowRefused saying so", ev.Reason, ev.Message)
	}
	eventually(t, 30*time.Second, "the refused requests removed", func(context.Context) (bool, error) {
		for k := range annotations() {
			if strings.HasPrefix(k, v1alpha1.RunNowAnnotationPrefix) {
				return false, nil
			}
		}
		return true, nil
	})

	// The operator paused as a whole, a request is refused saying by whom.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.PauseAnnotation: v1alpha1.Pause{By: "joe", Reason: "the registry migrates"}.Value()}}})
	if err := env.Client.Patch(t.Context(), op.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	ask(v1alpha1.RunNowAnnotation("import"), v1alpha1.RunNow{ID: "r4", By: "jane", At: req.At}.Value())
	if ev := answer("(request r4,"); ev.Reason != request.RunNow.Refused || !strings.Contains(ev.Message, "is paused (by joe: the registry migrates)") {
		t.Errorf("a request to a paused operator is answered %s %q; want RunNowRefused naming who paused it", ev.Reason, ev.Message)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Errorf("the handler ran %d times, want 2: the refused requests run nothing", len(got))
	}
}
