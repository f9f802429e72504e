package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// fetch GETs a path of the engine's metrics address and returns its
// status code and body.
func fetch(t *testing.T, e *engine.Engine, path string) (int, string) {
	t.Helper()
	return clustertest.Get(t, "http://"+e.MetricsAddr()+path)
}

// objects is the key of an opkit_objects sample.
func objects(operator, condition, status string) string {
	return fmt.Sprintf(`opkit_objects{condition=%q,operator=%q,status=%q}`, condition, operator, status)
}

// TestMetricsShowEachOperatorsObjectsByConditionAndTheirRuns runs the Task
// operator with metrics served: one Task whose handler succeeds is Ready,
// one whose handler gives up is Stalled, and /metrics shows both, the
// oldest failure's age and the runs; pausing one shows Paused until it is
// resumed, deleting the Stalled one takes it out. A watch operator's object whose handler gave
// up shows as Stalled too.
func TestMetricsShowEachOperatorsObjectsByConditionAndTheirRuns(t *testing.T) {
	env := clustertest.New(t)
	file, _ := tasksOperator(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Archive: newArchive(t), MetricsAddr: "127.0.0.1:0"}, file)
	cleanUpTasks(t, env)
	if e.MetricsAddr() == "" || strings.HasSuffix(e.MetricsAddr(), ":0") {
		t.Fatalf("MetricsAddr() = %q, want the address bound", e.MetricsAddr())
	}
	var last map[string]float64
	waitMetrics := func(what string, want map[string]float64) {
		t.Helper()
		clustertest.Eventually(t, 60*time.Second, what, func(context.Context) (bool, error) {
			code, body := fetch(t, e, "/metrics")
			last = clustertest.Samples(body)
			if code != http.StatusOK {
				return false, fmt.Errorf("/metrics answered %d: %s", code, body)
			}
			for k, v := range want {
				if got, ok := last[k]; !ok || got != v {
					return false, nil
				}
			}
			return true, nil
		})
	}
	defer func() {
		if t.Failed() {
			var opkit []string
			for k, v := range last {
				if strings.HasPrefix(k, "opkit_") {
					opkit = append(opkit, fmt.Sprintf("%s %v", k, v))
				}
			}
			slices.Sort(opkit)
			t.Logf("the last scrape's opkit series:\n%s", strings.Join(opkit, "\n"))
		}
	}()

	// The run counters are the process's: earlier tests' Tasks count too.
	_, body := fetch(t, e, "/metrics")
	base := clustertest.Samples(body)
	gaveUp := `opkit_runs_total{handler="work",operator="tasks",outcome="GaveUp"}`
	succeeded := `opkit_runs_total{handler="work",operator="tasks",outcome="Succeeded"}`
	create(t, env, task(env.Namespace, "fine", "", "a"))
	create(t, env, task(env.Namespace, "broken", "broken", "b"))
	waitMetrics("one Task Ready, one Stalled", map[string]float64{
		objects("tasks", "Ready", "True"):        1,
		objects("tasks", "Ready", "False"):       1,
		objects("tasks", "Stalled", "True"):      1,
		objects("tasks", "Stalled", "False"):     1,
		objects("tasks", "Degraded", "True"):     0,
		objects("tasks", "Degraded", "False"):    2,
		objects("tasks", "Paused", "True"):       0,
		`opkit_runs_in_flight{operator="tasks"}`: 0,
		gaveUp:                                   base[gaveUp] + 1,
		succeeded:                                base[succeeded] + 1,
	})
	age := last[`opkit_oldest_failing_object_age_seconds{operator="tasks"}`]
	broken := &unstructured.Unstructured{}
	broken.SetAPIVersion("handlers.example.com/v1")
	broken.SetKind("Task")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: "broken"}, broken); err != nil {
		t.Fatal(err)
	}
	stalled := condition(broken, v1alpha1.ConditionStalled)
	if want := time.Since(stalled.LastTransitionTime.Time).Seconds(); age <= 0 || age > want+1 {
		t.Errorf("opkit_oldest_failing_object_age_seconds %v; want about %v (the Stalled condition's age)", age, want)
	}
	// Liveness and readiness, with the checks named.
	if code, body := fetch(t, e, "/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "[+]api-server ok") || !strings.Contains(body, "[+]archive ok") {
		t.Errorf("/readyz?verbose: %d\n%s", code, body)
	}
	if code, body := fetch(t, e, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d\n%s", code, body)
	}

	fine := task(env.Namespace, "fine", "", "a")
	if err := env.Client.Patch(t.Context(), fine, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"`+v1alpha1.PauseAnnotation+`":"true"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitMetrics("the paused Task counted Paused", map[string]float64{objects("tasks", "Paused", "True"): 1})
	// Resumed, so that its delete handler can run when the test ends.
	if err := env.Client.Patch(t.Context(), fine, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"`+v1alpha1.PauseAnnotation+`":null}}}`))); err != nil {
		t.Fatal(err)
	}
	waitMetrics("the resumed Task no longer Paused", map[string]float64{objects("tasks", "Paused", "True"): 0, objects("tasks", "Paused", "False"): 2})

	if err := env.Client.Delete(t.Context(), broken); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, broken, 60*time.Second, "the Stalled Task deleted")
	waitMetrics("the deleted Task no longer counted", map[string]float64{
		objects("tasks", "Stalled", "True"):                         0,
		objects("tasks", "Ready", "True"):                           1,
		objects("tasks", "Ready", "False"):                          0,
		`opkit_oldest_failing_object_age_seconds{operator="tasks"}`: 0,
	})

	// A watch operator's object whose handler gave up.
	if err := e.Apply(t.Context(), compileYAML(t, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: gauged-watch}
spec:
  watch:
    apiVersion: v1
    kind: ConfigMap
    namespaces: [`+env.Namespace+`]
    selector: {matchLabels: {gauged: "yes"}}
  handlers:
  - name: check
    on: [create]
    retry: {maxAttempts: 1}
    exec: {command: ["false"]}
`)); err != nil {
		t.Fatal(err)
	}
	create(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "watched", Labels: map[string]string{"gauged": "yes"}}})
	waitMetrics("the watched ConfigMap Stalled", map[string]float64{
		objects("gauged-watch", "Stalled", "True"):  1,
		objects("gauged-watch", "Stalled", "False"): 0,
	})
	if _, ok := last[objects("gauged-watch", "Ready", "True")]; ok {
		t.Errorf("a watch operator's objects have no Ready condition, yet %s is served", objects("gauged-watch", "Ready", "True"))
	}
	// An operator removed has no series.
	e.Remove(t.Context(), "gauged-watch")
	clustertest.Eventually(t, 10*time.Second, "the removed operator's series gone", func(context.Context) (bool, error) {
		_, body := fetch(t, e, "/metrics")
		return !strings.Contains(body, `operator="gauged-watch",status=`), nil
	})
}

// TestReadyzFailsWhileTheAPIServerIsCutOff runs an engine through a proxy
// that the test cuts: /readyz fails within seconds, naming the api-server
// check and, at /readyz/api-server, why; /healthz does not; once the proxy
// lets connections through again, /readyz passes.
func TestReadyzFailsWhileTheAPIServerIsCutOff(t *testing.T) {
	env := clustertest.New(t)
	proxy := clustertest.NewProxy(t, strings.TrimPrefix(env.Config.Host, "https://"))
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.Addr()
	e, _ := runEngineWith(t, engine.Options{Config: cfg, Archive: newArchive(t), MetricsAddr: "127.0.0.1:0"})
	ready := func(want int, what string) string {
		t.Helper()
		var body string
		clustertest.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) {
			var code int
			code, body = fetch(t, e, "/readyz")
			return code == want, nil
		})
		return body
	}
	ready(http.StatusOK, "/readyz passing")

	proxy.Freeze()
	cut := time.Now()
	body := ready(http.StatusInternalServerError, "/readyz failing once the API server is cut off")
	t.Logf("/readyz failed %s after the cut:\n%s", time.Since(cut).Round(100*time.Millisecond), body)
	if !strings.Contains(body, "[-]api-server failed") || strings.Contains(body, "[-]archive") {
		t.Errorf("/readyz while cut off; want the api-server check failing, and it alone:\n%s", body)
	}
	if code, why := fetch(t, e, "/readyz/api-server"); code != http.StatusInternalServerError || !strings.Contains(why, "the API server is unreachable") {
		t.Errorf("/readyz/api-server while cut off: %d %q; want 500 and why", code, why)
	}
	if code, body := fetch(t, e, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while cut off: %d %s; want 200: liveness is the process's", code, body)
	}
	if _, body := fetch(t, e, "/metrics"); clustertest.Samples(body)["opkit_api_reachable"] != 0 {
		t.Errorf("opkit_api_reachable while cut off: %v; want 0", clustertest.Samples(body)["opkit_api_reachable"])
	}

	proxy.Thaw()
	ready(http.StatusOK, "/readyz passing again once the API server is back")
}
