package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

func TestScheduleResumeAndHTTPHandlers(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	var mu sync.Mutex
	var posted []map[string]any
	var keys []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ctx map[string]any
		_ = json.Unmarshal(body, &ctx)
		mu.Lock()
		posted, keys = append(posted, ctx), append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"events": [{"reason": "Hooked", "message": "posted"}]}`))
	}))
	defer hook.Close()

	dir := t.TempDir()
	out := filepath.Join(dir, "records.jsonl")
	bin := clustertest.HandlerBinary(t)
	exec := fmt.Sprintf(`exec: {command: [%q], env: [{name: %s, value: "1"}, {name: OUT, value: %q}]}`, bin, handlerEnv, out)
	def := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: ticks}
spec:
  resource:
    group: handlers.example.com
    kind: Tick
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  handlers:
  - name: hook
    on: [create]
    http: {url: "` + hook.URL + `/created"}
  - name: tick
    on: [schedule]
    schedule: {every: 1s}
    ` + exec + `
  - name: hello
    on: [resume]
    ` + exec + "\n"
	file := filepath.Join(dir, "ticks.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)

	obj := task(env.Namespace, "clock", "", "tick")
	obj.SetAPIVersion("handlers.example.com/v1")
	obj.SetKind("Tick")
	create(t, env, obj)
	eventually(t, 30*time.Second, "the create hook is posted", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(posted) == 1, nil
	})
	mu.Lock()
	meta, _ := posted[0]["object"].(map[string]any)["metadata"].(map[string]any)
	if posted[0]["trigger"] != "create" || meta["name"] != "clock" || keys[0] != string(obj.GetUID())+"/1/hook" {
		t.Errorf("posted %v with key %q", posted[0], keys[0])
	}
	mu.Unlock()

	recs := waitRecords(t, out, "clock", 3, "three scheduled runs")
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Handler != "tick" || r.Trigger != "schedule" || seen[r.Key] {
			t.Errorf("scheduled run %+v (keys must differ)", r)
		}
		seen[r.Key] = true
	}
	// One run per slot, a second apart: the slot is the key's last part
	// (its Unix time). When each handler process started is the
	// machine's, not the schedule's.
	slot := func(r record) int64 {
		n, err := strconv.ParseInt(r.Key[strings.LastIndex(r.Key, "/")+1:], 10, 64)
		if err != nil {
			t.Fatalf("scheduled run key %q: no slot: %v", r.Key, err)
		}
		return n
	}
	if first, third := slot(recs[0]), slot(recs[2]); third-first < 2 {
		t.Errorf("three runs of an every-1s schedule in slots %d and %d: want each of its own second", first, third)
	}

	// A restart resumes the object once; the create hook does not run again.
	stop()
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	eventually(t, 30*time.Second, "the resume run", func(context.Context) (bool, error) {
		for _, r := range records(t, out, "clock") {
			if r.Trigger == "resume" {
				return true, nil
			}
		}
		return false, nil
	})
	time.Sleep(2 * time.Second)
	resumes := 0
	for _, r := range records(t, out, "clock") {
		if r.Trigger == "resume" {
			resumes++
		}
	}
	mu.Lock()
	if resumes != 1 || len(posted) != 1 {
		t.Errorf("%d resume runs and %d create hooks after a restart; want 1 and 1", resumes, len(posted))
	}
	mu.Unlock()

	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "opkit_run") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operator" && l.GetValue() == "ticks" {
					found = append(found, mf.GetName())
				}
			}
		}
	}
	for _, want := range []string{"opkit_runs_total", "opkit_run_duration_seconds", "opkit_runs_in_flight"} {
		if !strings.Contains(strings.Join(found, " "), want) {
			t.Errorf("no %s for operator ticks in %v", want, found)
		}
	}
	// Stop the schedule before the namespace goes.
	cleanUpAll(t, env, "handlers.example.com/v1", "Tick")
}
