package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// metricsEnv is the environment variable that sets --metrics-addr's
// default.
const metricsEnv = "OPKIT_METRICS_ADDR"

// defaultMetricsAddr is --metrics-addr's default, as docs/metrics.md gives it.
const defaultMetricsAddr = "127.0.0.1:7381"

// Every opkit run and opkit dev this package's tests start serves its
// metrics on a free port, not on the default one, so that tests running at
// once (or an opkit on the machine) do not take each other's port. The
// tests of the default address take the variable out of their command's
// environment. (Not in the commands themselves: their environment is the
// test's.)
func init() {
	if os.Getenv(metricsEnv) == "" {
		_ = os.Setenv(metricsEnv, "127.0.0.1:0")
	}
}

// startOpkitWithDefaultMetrics is startOpkit with --metrics-addr's default
// left as the command has it, and env added.
func startOpkitWithDefaultMetrics(t *testing.T, env []string, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(cliBinary, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, metricsEnv+"=") }), archiveEnv(t))
	cmd.Env = append(cmd.Env, env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// sampleNames are the metric names of an exposition's samples.
func sampleNames(s map[string]float64) map[string]bool {
	names := map[string]bool{}
	for k := range s {
		name, _, _ := strings.Cut(k, "{")
		names[name] = true
	}
	return names
}

func notesObjects(condition, status string) string {
	return fmt.Sprintf(`opkit_objects{condition=%q,operator="notes",status=%q}`, condition, status)
}

// gaugedNotes writes in dir the Notes operator with a handler that gives up
// on the Note named bad, and succeeds on the others.
func gaugedNotes(t *testing.T, dir string) string {
	t.Helper()
	handler := filepath.Join(dir, "check.sh")
	if err := os.WriteFile(handler, []byte(`#!/bin/bash
case "$(cat)" in *'"name":"bad"'*) echo "bad on purpose" >&2; exit 1;; esac
echo '{}'
`), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "notes.yaml")
	if err := os.WriteFile(def, []byte(notesOperator+`  handlers:
  - name: check
    on: [create]
    retry: {maxAttempts: 1}
    exec: {command: [`+strconv.Quote(handler)+`]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return def
}

// waitGauges creates the Notes ok and bad with c, and waits until metrics
// (a /metrics URL) shows one Ready, one Stalled, and their runs counted;
// it returns that scrape. A run is counted once the archive recorded its
// end, which is after its status patch: a scrape may show the Note Ready
// before its run is counted.
func waitGauges(t *testing.T, c client.Client, metrics string) map[string]float64 {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, "the Note CRD served", func(ctx context.Context) (bool, error) {
		return c.Create(ctx, noteObject("ok")) == nil, nil
	})
	createNote(t, c, "bad", "x")
	var last map[string]float64
	want := map[string]float64{
		notesObjects("Ready", "True"): 1, notesObjects("Ready", "False"): 1,
		notesObjects("Stalled", "True"): 1, notesObjects("Stalled", "False"): 1,
		`opkit_runs_in_flight{operator="notes"}`:                                 0,
		`opkit_runs_total{handler="check",operator="notes",outcome="Succeeded"}`: 1,
		`opkit_runs_total{handler="check",operator="notes",outcome="GaveUp"}`:    1,
	}
	clustertest.Eventually(t, 60*time.Second, "/metrics showing one Note Ready and one Stalled, and their runs", func(context.Context) (bool, error) {
		code, body := clustertest.Get(t, metrics)
		if code != http.StatusOK {
			return false, fmt.Errorf("GET %s: %d\n%s", metrics, code, body)
		}
		last = clustertest.Samples(body)
		for k, v := range want {
			if got, ok := last[k]; !ok || got != v {
				return false, nil
			}
		}
		return true, nil
	})
	return last
}

// noteObject is a Note of notesOperator in the default namespace.
func noteObject(name string) client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "notes.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": map[string]any{"a": name},
	}}
}

// metricURL finds the URL of /metrics in a command's output, after prefix.
func metricURL(t *testing.T, output, prefix string) string {
	t.Helper()
	for line := range strings.Lines(output) {
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok && strings.HasPrefix(u, "http://") {
			return strings.Fields(u)[0]
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, output)
	return ""
}

// TestRunAndDevServeMetricsAndHealthOnTheirDefaultAddresses runs opkit run
// with its default --metrics-addr, loopback: /metrics shows a Note Ready
// and one Stalled, the runs, and every metric the shipped Prometheus rules
// use; /healthz and /readyz pass. A second opkit run on the same address
// fails at once, naming the flag. opkit dev, started meanwhile, finds its
// default taken and serves on another loopback port, with the same gauges.
func TestRunAndDevServeMetricsAndHealthOnTheirDefaultAddresses(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	if ln, err := net.Listen("tcp", defaultMetricsAddr); err != nil {
		t.Skipf("the default metrics address is taken on this machine: %v", err)
	} else {
		_ = ln.Close()
	}
	dir := t.TempDir()
	def := gaugedNotes(t, dir)
	run, out := startOpkitWithDefaultMetrics(t, nil, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", filepath.Join(dir, "runs.db"))
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	metrics := metricURL(t, out.String(), "metrics: ")
	if want := "http://" + defaultMetricsAddr + "/metrics"; metrics != want {
		t.Errorf("opkit run serves its metrics at %s; want %s", metrics, want)
	}
	scraped := waitGauges(t, c, metrics)
	// opkit's runs, and controller-runtime's metrics of the operator's
	// controller.
	for _, prefix := range []string{
		`opkit_runs_total{handler="check",operator="notes",outcome="GaveUp"}`,
		`opkit_runs_total{handler="check",operator="notes",outcome="Succeeded"}`,
		`opkit_api_reachable`, `opkit_archive_writable`,
		`controller_runtime_reconcile_total{controller="operator-notes",`,
		`workqueue_depth{controller="operator-notes",`,
	} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(scraped)), func(k string) bool { return strings.HasPrefix(k, prefix) }) {
			t.Errorf("/metrics of opkit run lacks %s", prefix)
		}
	}
	if age := scraped[`opkit_oldest_failing_object_age_seconds{operator="notes"}`]; age <= 0 {
		t.Errorf("opkit_oldest_failing_object_age_seconds{operator=\"notes\"} %v; want the Stalled Note's age", age)
	}
	// Every metric the rules use is one the engine serves.
	served := sampleNames(scraped)
	for _, name := range ruleMetrics(t, "../../deploy/prometheus-rules.yaml") {
		if !served[name] && name != "up" { // up is Prometheus's own, per target
			t.Errorf("deploy/prometheus-rules.yaml uses %s, which opkit run does not serve", name)
		}
	}
	base := strings.TrimSuffix(metrics, "/metrics")
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := clustertest.Get(t, base+path+"?verbose"); code != http.StatusOK {
			t.Errorf("GET %s: %d\n%s", path, code, body)
		} else if path == "/readyz" && (!strings.Contains(body, "[+]api-server ok") || !strings.Contains(body, "[+]archive ok")) {
			t.Errorf("/readyz?verbose does not list its checks:\n%s", body)
		}
	}

	// The address taken: a second opkit run fails at start, naming the flag.
	second := opkitWithEnv(t, []string{metricsEnv + "="}, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", filepath.Join(dir, "second.db"), "--metrics-addr", defaultMetricsAddr)
	if want := "--metrics-addr " + defaultMetricsAddr + ": "; second.code != 1 || !strings.Contains(second.stderr, want) || !strings.Contains(second.stderr, "address already in use") {
		t.Errorf("a second opkit run on %s: exit %d, stderr:\n%s\nwant 1 and %q ... address already in use", defaultMetricsAddr, second.code, second.stderr, want)
	}

	// opkit dev, its default taken by opkit run, serves on another
	// loopback port.
	devDir := t.TempDir()
	gaugedNotes(t, devDir)
	dev, devOut := startOpkitWithDefaultMetrics(t, []string{"OPKIT_STATE_DIR=" + t.TempDir()}, "dev", devDir, "--console", "127.0.0.1:0", "--archive", filepath.Join(dir, "dev.db"))
	waitOutput(t, devOut, "Stop it with Ctrl-C", 3*time.Minute)
	devMetrics := metricURL(t, devOut.String(), "Metrics: ")
	if !strings.HasPrefix(devMetrics, "http://127.0.0.1:") || devMetrics == metrics {
		t.Errorf("opkit dev serves its metrics at %s; want another port on 127.0.0.1 than opkit run's %s", devMetrics, metrics)
	}
	var kubeconfig string
	for line := range strings.Lines(devOut.String()) {
		if kc, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			kubeconfig = strings.Trim(kc, "'")
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	devClient, err := client.New(cfg, client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	waitGauges(t, devClient, devMetrics)
	if code, body := clustertest.Get(t, strings.TrimSuffix(devMetrics, "/metrics")+"/readyz"); code != http.StatusOK {
		t.Errorf("opkit dev's /readyz: %d\n%s", code, body)
	}

	for _, p := range []*exec.Cmd{dev, run} {
		if err := p.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Errorf("%v after Ctrl-C: %v", p.Args[1], err)
		}
	}
}

func TestAMetricsAddrThatIsNoAddressIsRefused(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"dev", t.TempDir()}} {
		r := opkit(t, t.TempDir(), append(cmd, "--metrics-addr", "7381")...)
		if want := `--metrics-addr "7381": want HOST:PORT or :PORT, or 0 to serve none`; r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("opkit %s --metrics-addr 7381: exit %d, stderr %q; want 1 and %q", cmd[0], r.code, r.stderr, want)
		}
	}
}

// ruleMetrics returns the metric names the expressions of a Prometheus
// rules file use, after checking that it holds the alerts of docs/metrics.md,
// each with an expression and a summary.
func ruleMetrics(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var alerts, names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("%s: alert %q lacks an expr, a summary or a severity", path, r.Alert)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: alert %s: for %q: %v", path, r.Alert, r.For, err)
			}
			for _, n := range exprMetrics(r.Expr) {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	for _, want := range []string{"OpkitObjectsStalled", "OpkitHandlerFailureRate", "OpkitEngineNotReady", "OpkitEngineDown"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s (it has %v)", path, want, alerts)
		}
	}
	slices.Sort(names)
	if want := []string{"opkit_api_reachable", "opkit_archive_writable", "opkit_leader", "opkit_objects", "opkit_oldest_failing_object_age_seconds", "opkit_runs_total", "up"}; !slices.Equal(names, want) {
		t.Errorf("%s uses the metrics %v; want %v (the test's list follows the file)", path, names, want)
	}
	return names
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// exprMetrics returns the metric names a PromQL expression reads: its
// identifiers less functions, keywords, grouping labels, label matchers,
// strings and ranges.
func exprMetrics(expr string) []string {
	expr = promString.ReplaceAllString(expr, `""`)
	expr = promMatchers.ReplaceAllString(expr, " ")
	expr = promGrouping.ReplaceAllString(expr, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" || slices.Contains(promKeywords, strings.ToLower(m[0])) {
			continue // a function, or a keyword
		}
		out = append(out, m[0])
	}
	return out
}

func TestExprMetricsFindsTheMetricsOfAnExpression(t *testing.T) {
	got := exprMetrics(`sum by (job, operator) (rate(opkit_runs_total{outcome=~"Failed|GaveUp", x="a{b}"}[15m])) / on (job) group_left() up > 0.25 and absent(opkit_objects == 1) or vector(0)`)
	if want := []string{"opkit_runs_total", "up", "opkit_objects"}; !slices.Equal(got, want) {
		t.Errorf("exprMetrics: %v, want %v", got, want)
	}
}
