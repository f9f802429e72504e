package engine_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// writeLog records the engine's writes by method and path.
type writeLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []string
}

func (w *writeLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.mu.Lock()
		w.all = append(w.all, req.Method+" "+req.URL.Path)
		w.mu.Unlock()
	}
	return w.next.RoundTrip(req)
}

// about returns the writes whose path has part in it.
func (w *writeLog) about(part string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.all {
		if strings.Contains(s, part) {
			out = append(out, s)
		}
	}
	return out
}

// TestAHandlerRunCostsNoWriteBeyondItsObjects: a Printer with a child
// and a handler on create whose result sets status is written once when
// the run ends within the reconcile's wait (Options.RunWait): the first
// reconcile's status, the handler's record and the result's status go in
// one patch. A run that outlasts the wait (here: a reconcile that never
// waits) costs one write more, its end's. Neither posts an Event.
func TestAHandlerRunCostsNoWriteBeyondItsObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		wait   time.Duration
		writes int
	}{
		{"ended within the wait", time.Minute, 1},
		{"not waited for", -1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := clustertest.New(t)
			cfg := rest.CopyConfig(env.Config)
			log := &writeLog{}
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
			runEngineWith(t, engine.Options{Config: cfg, Namespace: env.Namespace, RunWait: tc.wait}, "../../bench/printer-exec.yaml")
			p := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "bench.opkit.dev/v1", "kind": "Printer",
				"metadata": map[string]any{"name": "one", "namespace": env.Namespace},
				"spec":     map[string]any{"text": "x"},
			}}
			create(t, env, p)
			eventually(t, 60*time.Second, "status.touched and the handler's record", func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
					return false, err
				}
				touched, _, _ := unstructured.NestedBool(p.Object, "status", "touched")
				outcome, _, _ := unstructured.NestedString(p.Object, "status", "opkit", "lastRun", "outcome")
				cm, _, _ := unstructured.NestedString(p.Object, "status", "configMap")
				return touched && outcome == "Succeeded" && cm == "one-text", nil
			})
			time.Sleep(2 * time.Second) // a write that would follow
			status, events := log.about("/printers/one/status"), log.about("/events")
			if len(status) != tc.writes || len(events) != 0 {
				t.Errorf("the Printer's status written %d times and %d Events posted: %v; want %d status writes and no Event", len(status), len(events), log.about(""), tc.writes)
			}
		})
	}
}
