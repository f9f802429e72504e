package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestMain(m *testing.M) {
	// The suite starts its controllers by running this binary again.
	if os.Getenv(roleEnv) == "controller" {
		if err := controllerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(roleEnv) == agentRole {
		os.Exit(agentMain())
	}
	if os.Getenv(roleEnv) == peerRole {
		if err := peerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	clustertest.Main(m)
}

// TestEveryScenarioMeasures runs the whole suite, small, on the local
// control plane: every scenario gives its figures, opkit and both baseline
// settings converge every Printer, opkit writes about two requests per
// Printer, and neither it nor the baseline writes at steady state, nor
// to a watched Deployment (the watch scenario fails if either does);
// every webhook delivery is answered with the status of its kind; the
// archive and console scenarios measure SQLite and PostgreSQL alike; the
// peers (the Python operator, shell-operator) drain the handlers' Printers
// and watch the Deployments beside opkit, with the ratios among the
// targets; the handlers drains with a Python handler, a bare loop and on
// the SDK, drain beside them, with issue 55's target; the plan scenario
// plans both children of each Website changed, with issue 41's goal
// among the targets.
func TestEveryScenarioMeasures(t *testing.T) {
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	stores := archiveStores(t)
	storeFlag := make([]string, len(stores))
	for i, st := range stores {
		storeFlag[i] = string(st)
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := benchMain([]string{
		"-kubeconfig", kubeconfig, "-runs", "1", "-cold-objects", "50", "-objects", "100", "-memory-objects", "150", "-ceiling-objects", "100",
		"-live-rates", "50", "-live-duration", "2s", "-idle", "3s", "-handler-objects", "30", "-job-objects", "3",
		"-archive-sizes", "2000", "-archive-batch", "1000", "-archive-stores", strings.Join(storeFlag, ","), "-console-objects", "50", "-console-requests", "20",
		"-watch-objects", "30", "-watch-steady", "3s", "-webhook-deliveries", "60", "-webhook-rate", "30", "-source-messages", "100", "-plan-objects", "50", "-json", out,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	report := readReport(t, out)
	getFor, get := report.getFor, report.get
	for _, w := range [][3]string{
		{"ceiling", "client-go, concurrency 1", "writes/s"},
		{"ceiling", "client-go, concurrency 16", "writes/s"},
		{"drain 100", "opkit", "objects/s"},
		{"drain 100", "baseline-1", "objects/s"},
		{"drain 100", "baseline-8", "objects/s"},
		{"drain 100", "opkit", "start-up"},
		{"drain 100", "opkit", "API server CPU per object"},
		{"drain 100", "baseline-8", "CPU per object, with the API server"},
		{"drain 50", "opkit", "objects/s"},
		{"drain 50", "baseline-8", "objects/s"},
		{"drain 50", "baseline-8", "API server CPU per object"},
		{"memory 100 objects", "opkit", "peak RSS"},
		{"memory 150 objects", "baseline-8", "peak heap"},
		{"live", "opkit, 50/s", "status p99"},
		{"live", "baseline-8, 50/s", "child p50"},
		{"idle", "opkit", "CPU"},
		{"handlers", "exec, /bin/echo", "executor p50"},
		{"handlers", "exec, /bin/echo", "bare fork/exec CPU"},
		{"handlers", "exec, /bin/echo, warm runner", "runner p50"},
		{"handlers", "exec, /bin/echo, warm runner", "runner/local runs/s"},
		{"handlers drain", noHandlerSubject, "objects/s"},
		{"handlers drain", noHandlerSubject, "API server CPU per object"},
		{"handlers drain", "opkit, archive on (SQLite)", "objects/s"},
		{"handlers drain", "opkit, archive off", "objects/s"},
		{"handlers drain", "opkit, http handler", "objects/s"},
		{"handlers drain", "opkit, http handler", "API server CPU per object"},
		{"handlers drain", serveSubject, "objects/s"},
		{"handlers drain", serveSubject, "objects/s after the first"},
		{"handlers drain", runnersSubject, "objects/s"},
		{"handlers drain", runnersSubject, "objects/s after the first"},
		{"handlers", serveRunnerSubject, "runner p50"},
		{"handlers", serveRunnerSubject, "overhead p99"},
		{"handlers", "job", "change to Job created p99"},
		{"watch", "opkit", "first handled"},
		{"watch", "opkit", "all handled once"},
		{"watch", "opkit", "peak RSS"},
		{"watch", "opkit", "new image handled max"},
		{"watch", "baseline-8", "all handled once"},
		{"watch", opkitServe.Name, "all handled once"},
		{"watch", "baseline-8", "peak heap"},
		{"watch", "baseline-8", "new image handled p50"},
		{"watch", "opkit", "new image handled after its write p50"},
		{"watch", "opkit", "CPU to all handled, per object"},
		{"watch", opkitServe.Name, "CPU per change"},
		{"watch", "baseline-8", "CPU per change"},
		{"watch", "baseline-8", "API server CPU per change"},
	} {
		if v, ok := get(w[0], w[1], w[2]); !ok || v <= 0 {
			t.Errorf("%s / %s / %s: got %v (measured: %v), want a positive figure", w[0], w[1], w[2], v, ok)
		}
	}
	// The peers beside opkit, each doing the handlers drain's and the
	// watch's work; one that could not be prepared is left out with a
	// note, except under CI=true, where the suite fails instead.
	for _, peer := range []impl{pythonPeer, shellOperatorPeer} {
		if note := "peer " + peer.Name + " left out"; slices.ContainsFunc(report.Notes, func(n string) bool { return strings.HasPrefix(n, note) }) {
			t.Logf("%s: not measured on this machine: %v", peer.Name, report.Notes)
			continue
		}
		for _, w := range [][2]string{
			{"handlers drain", "objects/s"},
			{"handlers drain", "CPU per object, with its handlers"},
			{"watch", "all handled once"},
			{"watch", "new image handled p50"},
			{"watch", "peak RSS"},
		} {
			if v, ok := get(w[0], peer.Name, w[1]); !ok || v <= 0 {
				t.Errorf("%s / %s / %s: got %v (measured: %v), want a positive figure", w[0], peer.Name, w[1], v, ok)
			}
		}
		// The child and the status of each Printer, nothing else.
		if v, _ := get("handlers drain", peer.Name, "writes per object"); v != 2 {
			t.Errorf("%s reported %.2f writes per Printer, want 2", peer.Name, v)
		}
		if v, ok := get("watch", peer.Name, "steady writes/min"); !ok || v != 0 {
			t.Errorf("%s writes %v/min at the watch's steady state (measured: %v), want 0", peer.Name, v, ok)
		}
		if !slices.ContainsFunc(report.Targets, func(tg target) bool { return strings.HasSuffix(tg.Goal, "ahead of "+peer.Name) }) {
			t.Errorf("no target compares opkit with %s: %+v", peer.Name, report.Targets)
		}
	}
	for _, st := range stores {
		for _, w := range [][3]string{
			{"archive", "2k runs", "bulk fill"},
			{"archive", "2k runs", "size on disk"},
			{"archive", "2k runs", "runs recorded/s"},
			{"archive", "2k runs", "latest failures p99"},
			{"archive", "2k runs", "prune 1k oldest"},
			{"console 2k runs", "failures inbox", "page p99"},
			{"console 2k runs", "object timeline", "page p50"},
		} {
			if v, ok := getFor(st, w[0], w[1], w[2]); !ok || v <= 0 {
				t.Errorf("%s: %s / %s / %s: got %v (measured: %v), want a positive figure", st.title(), w[0], w[1], w[2], v, ok)
			}
		}
		if !strings.Contains(stdout.String(), strings.ToUpper(st.title())) {
			t.Errorf("no %s column in the archive stores' table:\n%s", st.title(), stdout.String())
		}
	}
	for _, subject := range []string{"opkit", "baseline-8"} {
		if v, ok := get("idle", subject, "writes/min"); !ok || v != 0 {
			t.Errorf("%s writes %v/min at steady state (measured: %v), want 0", subject, v, ok)
		}
		if v, ok := get("watch", subject, "steady writes/min"); !ok || v != 0 {
			t.Errorf("%s writes %v/min at the watch's steady state (measured: %v), want 0", subject, v, ok)
		}
	}
	checkWebhookFigures(t, report, "opkit, 30/s")
	checkPlanFigures(t, report, 50)
	// Each consumed source flooded at once and at the webhook's rate:
	// every message handled, once.
	for _, subject := range []string{"nats, 100 at once", "nats, 30/s", "kafka, 100 at once", "kafka, 30/s"} {
		want := map[string]float64{"handled": 100, "lost": 0, "handled twice": 0}
		if strings.HasSuffix(subject, "/s") {
			want["handled"] = 60
		}
		for metric, v := range want {
			if got, ok := get("sources", subject, metric); !ok || got != v {
				t.Errorf("sources / %s / %s: got %v (measured: %v), want %v", subject, metric, got, ok, v)
			}
		}
		for _, metric := range []string{"messages handled/s", "sent to handler started p99", "sent to handled p99"} {
			if v, ok := get("sources", subject, metric); !ok || v <= 0 {
				t.Errorf("sources / %s / %s: got %v (measured: %v), want a positive figure", subject, metric, v, ok)
			}
		}
	}
	// A child and a status per Printer; an Event per child created, or a
	// status written again over a stale cache, would make it 3.
	if v, _ := get("drain 100", "opkit", "writes per object"); v < 1.95 || v > 2.5 {
		t.Errorf("opkit wrote %.2f requests per Printer, want 2 (1.95 to 2.5)", v)
	}
	// With a handler on create: the child, and the status with the run's
	// record and result, the run ending within the reconcile's wait; no
	// Event. A run that outlasts the wait costs one write more, its end's:
	// under this suite's load (a race-built engine, the other packages'
	// tests beside it) many do. The engine's few writes at its start count
	// over 30 Printers. More than 3 would be a write no run explains.
	if v, _ := get("handlers drain", "opkit, archive on (SQLite)", "writes per object"); v < 1.95 || v > 3.1 {
		t.Errorf("opkit wrote %.2f requests per Printer with a handler, want 2, 3 for a run that outlasts the wait (1.95 to 3.1)", v)
	}
	if len(report.Targets) == 0 || !strings.Contains(stdout.String(), "TARGET") {
		t.Errorf("no targets in the report:\n%s", stdout.String())
	}
	// The watch's target says what the forks alone take: the baseline
	// forks nothing.
	if !slices.ContainsFunc(report.Targets, func(tg target) bool {
		return tg.Goal == "watch, all handled once: at most 2.0x baseline-8" && strings.Contains(tg.Got, "30 forks/execs alone take")
	}) {
		t.Errorf("the watch's target does not say what its forks take: %+v", report.Targets)
	}
	// The watch's Serve target is there, without forks: it makes none
	// per run. (The handlers drains' targets need -objects and
	// -handler-objects alike, which this suite does not give.)
	if goal := "watch with exec mode Serve, all handled once: at most 1.5x baseline-8"; !slices.ContainsFunc(report.Targets, func(tg target) bool { return tg.Goal == goal && !strings.Contains(tg.Got, "fork") }) {
		t.Errorf("no target %q without forks: %+v", goal, report.Targets)
	}
	if v, _ := get("handlers drain", serveSubject, "writes per object"); v < 1.95 || v > 3.1 {
		t.Errorf("opkit wrote %.2f requests per Printer with a Serve handler, want 2, 3 for a run that outlasts the wait (1.95 to 3.1)", v)
	}
	// Each handlers drain against the drain of the same Printers without
	// a handler, in the same run (issue 53): its rate, and the API
	// server's CPU per Printer.
	for _, goal := range []string{
		"handlers drain, a process per run, at least 0.8x the drain of the same Printers without a handler",
		"handlers drain with an http handler at least 0.9x the drain without a handler",
		"handlers drain with an exec handler in mode Serve at least 0.9x the drain without a handler",
		"handlers drain, exec mode Serve: API server CPU per Printer within 0.3 ms of the drain without a handler",
		"handlers drain, http handler: API server CPU per Printer within 0.3 ms of the drain without a handler",
	} {
		if !slices.ContainsFunc(report.Targets, func(tg target) bool { return tg.Goal == goal }) {
			t.Errorf("no target %q: %+v", goal, report.Targets)
		}
	}
	checkPythonHandlerFigures(t, report)
}

// checkPythonHandlerFigures checks the handlers drains with a Python
// handler in mode Serve, a bare loop and on the SDK: each drained, its
// handler's processes measured, and issue 55's target among the targets.
// Without a python3 the SDK runs on they are left out with a note, except
// under CI=true, where the suite fails instead.
func checkPythonHandlerFigures(t *testing.T, report benchReport) {
	t.Helper()
	if i := slices.IndexFunc(report.Notes, func(n string) bool { return strings.HasPrefix(n, "handlers drain, python: left out") }); i >= 0 {
		t.Logf("the Python handlers' drains: not measured on this machine: %s", report.Notes[i])
		return
	}
	if !slices.ContainsFunc(report.Notes, func(n string) bool { return strings.HasPrefix(n, "handlers drain, python: python3 ") }) {
		t.Errorf("no note says which python3 ran the Python handlers: %v", report.Notes)
	}
	for _, subject := range []string{pythonBareSubject, pythonSDKSubject} {
		for _, metric := range []string{"objects/s", "CPU per object", "API server CPU per object", "handler CPU per object", "handler processes"} {
			if v, ok := report.get("handlers drain", subject, metric); !ok || v <= 0 {
				t.Errorf("handlers drain / %s / %s: got %v (measured: %v), want a positive figure", subject, metric, v, ok)
			}
		}
		if v, _ := report.get("handlers drain", subject, "writes per object"); v < 1.95 || v > 3.1 {
			t.Errorf("%s: opkit wrote %.2f requests per Printer, want 2, 3 for a run that outlasts the wait (1.95 to 3.1)", subject, v)
		}
	}
	if goal := "handlers drain with a Python SDK handler within 10% of a bare Python loop"; !slices.ContainsFunc(report.Targets, func(tg target) bool { return tg.Goal == goal }) {
		t.Errorf("no target %q: %+v", goal, report.Targets)
	}
}

// TestPythonHandlersAnswerAsEcho runs the Python handlers' programs as
// the drains run them (written into a work directory with the SDK beside
// them, in mode Serve, on the machine's python3): each answers every
// binding context, a line each, with what the workload's /bin/echo
// prints (the SDK compact), and with an empty result /bin/true's empty
// one.
func TestPythonHandlersAnswerAsEcho(t *testing.T) {
	b := &bench{workDir: t.TempDir(), log: io.Discard}
	handlers, err := b.pythonHandlers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(handlers) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Python handlers under CI=true: %v", b.notes)
		}
		t.Skipf("no python3 for the SDK here: %v", b.notes)
	}
	data, err := workloads.ReadFile("printer-exec.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := definition.Load("printer-exec.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	echo := srcs[0].Operator.Spec.Handlers[0].Exec.Command
	if len(echo) != 2 || echo[0] != "/bin/echo" {
		t.Fatalf("printer-exec.yaml's handler is %v, not /bin/echo RESULT", echo)
	}
	var want any
	if err := json.Unmarshal([]byte(echo[1]), &want); err != nil {
		t.Fatal(err)
	}
	contexts := `{"trigger":"create","object":{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"p","namespace":"bench"},"spec":{"text":"hello"}}}` + "\n" +
		`{"trigger":"update","object":{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"q","namespace":"bench"},"spec":{"text":"hi"}}}` + "\n"
	for _, h := range handlers {
		for _, result := range []string{echo[1], ""} {
			op := srcs[0].Operator.DeepCopy()
			op.Spec.Handlers[0].Exec.Command = []string{"/bin/echo", result}
			var command []string
			if err := json.Unmarshal([]byte(h.im.ServeCommand), &command); err != nil {
				t.Fatal(err)
			}
			if err := serveMode(op, command); err != nil {
				t.Fatal(err)
			}
			e := op.Spec.Handlers[0].Exec
			if e.Mode != v1alpha1.ExecServe {
				t.Fatalf("%s: mode %q, want Serve", h.subject, e.Mode)
			}
			cmd := exec.Command(e.Command[0], e.Command[1:]...)
			cmd.Env = append(os.Environ(), "OPKIT_MODE=Serve")
			cmd.Stdin = strings.NewReader(contexts)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", h.subject, err, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("%s: %d answers to 2 contexts: %q", h.subject, len(lines), out)
			}
			for _, line := range lines {
				if result == "" {
					if line != "" && line != "{}" {
						t.Errorf("%s: answered %q to /bin/true's empty result, want an empty one", h.subject, line)
					}
					continue
				}
				var got any
				if err := json.Unmarshal([]byte(line), &got); err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("%s: answered %q, want %s (%v)", h.subject, line, echo[1], err)
				}
			}
		}
	}
}

// checkWebhookFigures checks the webhook scenario's figures for subject,
// of 60 deliveries: the count of each answer, each figure there and
// positive, percentiles in order, and each accepted delivery's handler
// started before its delivery was recorded Handled.
func checkWebhookFigures(t *testing.T, report benchReport, subject string) {
	t.Helper()
	get := func(metric string) float64 {
		t.Helper()
		v, ok := report.get("webhook", subject, metric)
		if !ok || v <= 0 {
			t.Errorf("webhook / %s / %s: got %v (measured: %v), want a positive figure", subject, metric, v, ok)
		}
		return v
	}
	// Of 60 deliveries, 3 forged and 3 replays; the scenario fails if one
	// is answered otherwise, or handled other than once.
	for metric, want := range map[string]float64{"accepted (202)": 54, "bad signature (401)": 3, "replay (409)": 3, "lost": 0} {
		if v, ok := report.get("webhook", subject, metric); !ok || v != want {
			t.Errorf("webhook: %s %v (measured: %v), want %v", metric, v, ok, want)
		}
	}
	for _, metric := range []string{"first send to last answer", "409 answered p50", "401 answered p99", "all handled, from the first send"} {
		get(metric)
	}
	for _, measure := range []string{"202 answered", "received to handler started"} {
		p50, p90, p99, pmax := get(measure+" p50"), get(measure+" p90"), get(measure+" p99"), get(measure+" max")
		if p50 > p90 || p90 > p99 || p99 > pmax {
			t.Errorf("webhook: %s p50 %v, p90 %v, p99 %v, max %v: want them in order", measure, p50, p90, p99, pmax)
		}
	}
	// A delivery is Handled once its run ended: the start comes first,
	// delivery by delivery, and so at each percentile.
	for _, p := range []string{"p50", "p99"} {
		if started, handled := get("received to handler started "+p), get("received to handled "+p); started > handled {
			t.Errorf("webhook: received to handler started %s %v ms, after received to handled %s %v ms", p, started, p, handled)
		}
	}
}

// checkPlanFigures checks the plan scenario's figures, of n Websites:
// each there and positive, every Website planned, both its children
// changed, and issue 41's goal among the targets.
func checkPlanFigures(t *testing.T, report benchReport, n int) {
	t.Helper()
	for _, metric := range []string{"wall time", "objects/s"} {
		if v, ok := report.get("plan", "opkit", metric); !ok || v <= 0 {
			t.Errorf("plan / opkit / %s: got %v (measured: %v), want a positive figure", metric, v, ok)
		}
	}
	for metric, want := range map[string]float64{"objects planned": float64(n), "children changed": float64(2 * n)} {
		if v, ok := report.get("plan", "opkit", metric); !ok || v != want {
			t.Errorf("plan / opkit / %s: got %v (measured: %v), want %v", metric, v, ok, want)
		}
	}
	if !slices.ContainsFunc(report.Targets, func(tg target) bool { return tg.Goal == "opkit plan: 10,000 objects in under a minute" }) {
		t.Errorf("no target for issue 41's goal: %+v", report.Targets)
	}
}

// benchReport is the bench's JSON report.
type benchReport struct {
	Figures []figure `json:"figures"`
	Targets []target `json:"targets"`
	Notes   []string `json:"notes"`
}

// readReport reads the JSON report the bench wrote to path.
func readReport(t *testing.T, path string) benchReport {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var report benchReport
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatalf("the JSON report: %v", err)
	}
	return report
}

// getFor returns the median of a figure measured on a store, and
// whether it was measured.
func (r benchReport) getFor(st store, scenario, subject, metric string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Store == st && f.Scenario == scenario && f.Subject == subject && f.Metric == metric {
			return f.Median, true
		}
	}
	return 0, false
}

// get returns the median of a figure, and whether it was measured.
func (r benchReport) get(scenario, subject, metric string) (float64, bool) {
	return r.getFor("", scenario, subject, metric)
}

// archiveStores are the stores the suite's archive scenarios run on: both,
// or SQLite alone where PostgreSQL cannot start, except under CI=true,
// where it must.
func archiveStores(t *testing.T) []store {
	t.Helper()
	srv, err := pgtest.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL could not start, and under CI=true the archive scenarios must run on it: %v", err)
		}
		t.Logf("PostgreSQL could not start (%v): the archive scenarios run on SQLite alone; make postgresql installs it", err)
		return []store{sqliteStore}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	return allStores
}

// TestWatchWorkloadIsTheBaselinesWatch checks that opkit's watch.yaml
// watches what the baseline's watch does: Deployments of the bench
// namespace labelled as watchLabels.
func TestWatchWorkloadIsTheBaselinesWatch(t *testing.T) {
	data, err := workloads.ReadFile(watchWorkload)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := definition.Load(watchWorkload, data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	w := d.Watch
	if d.Operator.Name != watchOperator || w == nil {
		t.Fatalf("%s: operator %q with watch %v; want operator %s with a watch", watchWorkload, d.Operator.Name, w, watchOperator)
	}
	if w.GVK != appsv1.SchemeGroupVersion.WithKind("Deployment") || !slices.Equal(w.Namespaces, []string{benchNamespace}) ||
		w.Selector.String() != labels.SelectorFromSet(watchLabels).String() || w.Filter != nil {
		t.Errorf("%s watches %s in %v selected by %q (filter %v); the baseline watches Deployments in [%s] selected by %q",
			watchWorkload, w.GVK, w.Namespaces, w.Selector, w.Filter, benchNamespace, labels.SelectorFromSet(watchLabels))
	}
}

// -subjects chooses the subjects and their order; without it, every
// subject, opkit first.
func TestTheSubjectsAreMeasuredInTheOrderGiven(t *testing.T) {
	names := func(ims []impl) string {
		var out []string
		for _, im := range ims {
			out = append(out, im.Name)
		}
		return strings.Join(out, ",")
	}
	b := &bench{opts: options{Subjects: []string{"baseline-8", "opkit-serve"}}}
	if got, err := b.watchSubjects(t.Context()); err != nil || names(got) != "baseline-8,opkit-serve" {
		t.Errorf("the watch's subjects: %s, %v; want baseline-8,opkit-serve", names(got), err)
	}
	b.opts.Subjects = []string{"baseline-1", "opkit", "opkit-serve"}
	if got := names(b.drainSubjects()); got != "baseline-1,opkit" {
		t.Errorf("the drain's subjects: %s; want baseline-1,opkit (opkit-serve is the watch's)", got)
	}
	b.opts.Subjects = nil
	if got := names(b.drainSubjects()); !strings.HasPrefix(got, "opkit,") || !strings.HasSuffix(got, "baseline-1,baseline-8") {
		t.Errorf("every drain subject: %s; want opkit first, the baselines last", got)
	}
}

func TestEachRunStartsWithTheNextSubject(t *testing.T) {
	s := []string{"opkit", "opkit-serve", "baseline-8"}
	for run, want := range map[int]string{
		1: "opkit,opkit-serve,baseline-8",
		2: "opkit-serve,baseline-8,opkit",
		3: "baseline-8,opkit,opkit-serve",
		4: "opkit,opkit-serve,baseline-8",
	} {
		if got := strings.Join(inTurn(s, run), ","); got != want {
			t.Errorf("run %d measures %s; want %s", run, got, want)
		}
	}
	if got := strings.Join(s, ","); got != "opkit,opkit-serve,baseline-8" {
		t.Errorf("inTurn changed its argument: %s", got)
	}
	if got := inTurn([]string(nil), 2); len(got) != 0 {
		t.Errorf("inTurn of none: %v", got)
	}
}
