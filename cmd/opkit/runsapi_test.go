package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// napOperator's handler logs, waits until the file GATE_PATH exists, naps
// 2 seconds, and fails for a Nap whose spec says fail: true.
const napOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: napper}
spec:
  resource:
    group: nap.example.com
    kind: Nap
    versions:
    - name: v1
      schema: {type: object, properties: {fail: {type: boolean}}}
  handlers:
  - name: nap
    "on": [create]
    exec:
      command: [sh, -c, 'input=$(cat); echo "napping" >&2; while [ ! -e "$GATE" ]; do sleep 0.2; done; sleep 2; case "$input" in *"\"fail\":true"*) echo "woke up badly" >&2; exit 1;; esac; echo "woke up" >&2']
      env: [{name: GATE, value: GATE_PATH}]
`

// napOperatorGated is napOperator with its gate at gate.
func napOperatorGated(gate string) string {
	return strings.Replace(napOperator, "GATE_PATH", strconv.Quote(gate), 1)
}

// kubectlAll runs kubectl as a user would, on kubeconfig, and returns
// what it wrote on stdout and stderr, and its error.
func kubectlAll(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bins, err := (&devcluster.Cache{}).Binaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bins.Path(devcluster.Kubectl), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// waitRunsDiscovered waits up to within until kubectl api-resources
// lists the runs and deliveries of runs.opkit.dev.
func waitRunsDiscovered(t *testing.T, kubeconfig string, within time.Duration) {
	t.Helper()
	clustertest.Eventually(t, within, "kubectl api-resources --api-group runs.opkit.dev lists runs and deliveries", func(context.Context) (bool, error) {
		out, _, err := kubectlAll(t, kubeconfig, "api-resources", "--api-group", "runs.opkit.dev", "-o", "name")
		return err == nil && strings.Contains(out, "runs.runs.opkit.dev") && strings.Contains(out, "deliveries.runs.opkit.dev"), nil
	})
}

// runRows are the lines of kubectl's table output that name obj
// (namespace/name), as the Object column shows it.
func runRows(out, obj string) []string {
	var rows []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, " "+obj+" ") {
			rows = append(rows, strings.TrimSpace(line))
		}
	}
	return rows
}

func createNap(t *testing.T, kubeconfig, ns, name string, fail bool) {
	t.Helper()
	spec := "{}"
	if fail {
		spec = "{fail: true}"
	}
	manifest := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: nap.example.com/v1\nkind: Nap\nmetadata: {name: "+name+", namespace: "+ns+"}\nspec: "+spec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, kubeconfig, "apply", "-f", manifest); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// TestKubectlReadsTheRunsOfOpkitDevAsRBACAllows runs opkit dev and reads
// its runs as a user does, through the plane's API server: kubectl get
// runs -A, -l and --field-selector, -w as a run goes from Running to
// Succeeded, the log and the followed log with kubectl get --raw; and a
// user bound to a Role in namespace a reads a's runs and is refused b's.
func TestKubectlReadsTheRunsOfOpkitDevAsRBACAllows(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir := t.TempDir()
	gate := filepath.Join(t.TempDir(), "gate")
	if err := os.WriteFile(filepath.Join(dir, "napper.yaml"), []byte(napOperatorGated(gate)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out, kc := startDev(t, dir)
	if !strings.Contains(out.String(), "kubectl get runs -A") {
		t.Errorf("opkit dev's start-up output does not say kubectl get runs -A works:\n%s", out.String())
	}
	// The engine started before opkit dev said it runs: 10s from there
	// is within 10s of the engine's start.
	waitRunsDiscovered(t, kc, 10*time.Second)

	for _, ns := range []string{"a", "b"} {
		if out, err := kubectl(t, kc, "create", "namespace", ns); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	// A watch as a user keeps it open in another shell, before the run.
	watch := exec.CommandContext(t.Context(), mustKubectlPath(t), "get", "runs", "-n", "a", "-w")
	watch.Env = append(os.Environ(), "KUBECONFIG="+kc)
	watched := &lockedBuffer{}
	watch.Stdout, watch.Stderr = watched, watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })

	createNap(t, kc, "a", "ok", false)
	createNap(t, kc, "b", "bad", true)
	// The runs wait at the gate until the watch has shown one Running.
	clustertest.Eventually(t, 90*time.Second, "kubectl get runs -w shows a/ok's run Running", func(context.Context) (bool, error) {
		return strings.Contains(strings.Join(runRows(watched.String(), "a/ok"), "\n"), " Running "), nil
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 90*time.Second, "kubectl get runs -w shows a/ok's run Succeeded after Running", func(context.Context) (bool, error) {
		rows := runRows(watched.String(), "a/ok")
		var running, succeeded bool
		for _, r := range rows {
			running = running || strings.Contains(r, " Running ")
			succeeded = succeeded || (running && strings.Contains(r, " Succeeded "))
		}
		return running && succeeded, nil
	})

	clustertest.Eventually(t, 90*time.Second, "kubectl get runs -A lists a/ok's run and b/bad's failed one", func(context.Context) (bool, error) {
		all, _, err := kubectlAll(t, kc, "get", "runs", "-A")
		return err == nil && len(runRows(all, "a/ok")) == 1 && strings.Contains(strings.Join(runRows(all, "b/bad"), "\n"), " Failed "), err
	})
	byHandler, _, err := kubectlAll(t, kc, "get", "runs", "-A", "-l", "opkit.dev/handler=nap")
	if err != nil || len(runRows(byHandler, "a/ok")) != 1 || len(runRows(byHandler, "b/bad")) == 0 {
		t.Errorf("kubectl get runs -A -l opkit.dev/handler=nap = %v\n%s; want the runs of a/ok and b/bad", err, byHandler)
	}
	byObject, _, err := kubectlAll(t, kc, "get", "runs", "-A", "-l", "opkit.dev/object=ok")
	if err != nil || len(runRows(byObject, "a/ok")) != 1 || len(runRows(byObject, "b/bad")) != 0 {
		t.Errorf("kubectl get runs -A -l opkit.dev/object=ok = %v\n%s; want a/ok's run alone", err, byObject)
	}
	failed, _, err := kubectlAll(t, kc, "get", "runs", "-A", "--field-selector", "status.outcome=Failed")
	if err != nil || len(runRows(failed, "b/bad")) == 0 || len(runRows(failed, "a/ok")) != 0 {
		t.Errorf("kubectl get runs -A --field-selector status.outcome=Failed = %v\n%s; want b/bad's runs alone", err, failed)
	}

	// The log, as opkit logs prints it.
	id, _, err := kubectlAll(t, kc, "get", "runs", "-n", "a", "-l", "opkit.dev/object=ok", "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil || id == "" {
		t.Fatalf("the id of a/ok's run: %q, %v", id, err)
	}
	logPath := "/apis/runs.opkit.dev/v1alpha1/namespaces/a/runs/" + id + "/log"
	if log, _, err := kubectlAll(t, kc, "get", "--raw", logPath); err != nil || !strings.Contains(log, "napping") || !strings.Contains(log, "woke up") {
		t.Errorf("kubectl get --raw %s = %v\n%s; want the handler's log", logPath, err, log)
	}

	// A log followed while its run runs ends with the run, whole.
	createNap(t, kc, "a", "later", false)
	var laterID string
	clustertest.Eventually(t, 60*time.Second, "a/later's run Running", func(context.Context) (bool, error) {
		laterID, _, err = kubectlAll(t, kc, "get", "runs", "-n", "a", "-l", "opkit.dev/object=later,opkit.dev/outcome=Running", "-o", "jsonpath={.items[0].metadata.name}")
		return err == nil && laterID != "", nil
	})
	followed, _, err := kubectlAll(t, kc, "get", "--raw", "/apis/runs.opkit.dev/v1alpha1/namespaces/a/runs/"+laterID+"/log?follow=true")
	if err != nil || !strings.Contains(followed, "napping") || !strings.Contains(followed, "woke up") {
		t.Errorf("kubectl get --raw .../runs/%s/log?follow=true = %v\n%s; want the log to the run's end", laterID, err, followed)
	}

	// opkit's triage commands read the same runs through the cluster,
	// given no archive: a kubeconfig is all they need, as kubectl's.
	viaCluster := []string{"OPKIT_ARCHIVE=", "KUBECONFIG=" + kc, "HOME=" + t.TempDir(), "XDG_STATE_HOME=" + t.TempDir()}
	if r := opkitWithEnv(t, viaCluster, "runs", "--failed"); r.code != 0 || len(runRows(r.stdout, "b/bad")) == 0 || len(runRows(r.stdout, "a/ok")) != 0 {
		t.Errorf("opkit runs --failed, no archive: exit %d\n%s%s; want b/bad's failed runs alone, read through the cluster", r.code, r.stdout, r.stderr)
	}
	if r := opkitWithEnv(t, viaCluster, "runs", "--object", "a/ok", "--kind", "Nap"); r.code != 0 || len(runRows(r.stdout, "a/ok")) != 1 {
		t.Errorf("opkit runs --object a/ok --kind Nap, no archive: exit %d\n%s%s; want a/ok's run", r.code, r.stdout, r.stderr)
	}
	if r := opkitWithEnv(t, viaCluster, "why", "a/ok", "--kind", "Nap"); r.code != 0 || !strings.Contains(r.stdout, "run "+id+": handler nap on create: Succeeded") {
		t.Errorf("opkit why a/ok --kind Nap, no archive: exit %d\n%s%s; want its create run %s, read through the cluster", r.code, r.stdout, r.stderr, id)
	}
	if r := opkitWithEnv(t, viaCluster, "logs", id); r.code != 0 || !strings.Contains(r.stdout, "napping") || !strings.Contains(r.stdout, "woke up") {
		t.Errorf("opkit logs %s, no archive: exit %d\n%s%s; want the handler's log", id, r.code, r.stdout, r.stderr)
	}
	if r := opkitWithEnv(t, viaCluster, "runs", "--operator", "nobody"); r.code != 0 || !strings.Contains(r.stdout, "No runs in the runs API of the cluster at https://") {
		t.Errorf("opkit runs --operator nobody, no archive: exit %d\n%s%s; want No runs, naming the cluster's runs API", r.code, r.stdout, r.stderr)
	}
	missingRun := "0000000000zzzzzzzz"
	if r := opkitWithEnv(t, viaCluster, "logs", missingRun); r.code == 0 || !strings.Contains(r.stderr, "is not in the runs API of the cluster at https://") {
		t.Errorf("opkit logs %s, no archive: exit %d\n%s%s; want an error naming what was read", missingRun, r.code, r.stdout, r.stderr)
	}

	// RBAC: alice may read runs in a, and only there.
	for _, args := range [][]string{
		{"create", "role", "runs-viewer", "-n", "a", "--verb=get,list,watch", "--resource=runs.runs.opkit.dev"},
		{"create", "rolebinding", "alice-runs", "-n", "a", "--role=runs-viewer", "--user=alice"},
	} {
		if out, err := kubectl(t, kc, args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	clustertest.Eventually(t, 30*time.Second, "alice reads a's runs", func(context.Context) (bool, error) {
		mine, _, err := kubectlAll(t, kc, "--as=alice", "get", "runs", "-n", "a")
		return err == nil && len(runRows(mine, "a/ok")) == 1, nil
	})
	if theirs, stderr, err := kubectlAll(t, kc, "--as=alice", "get", "runs", "-n", "b"); err == nil || !strings.Contains(stderr, "Forbidden") || len(runRows(theirs, "b/bad")) != 0 {
		t.Errorf("alice's kubectl get runs -n b = %v\n%s%s; want Forbidden", err, theirs, stderr)
	}
	if _, stderr, err := kubectlAll(t, kc, "--as=alice", "get", "--raw", "/apis/runs.opkit.dev/v1alpha1/namespaces/b/runs"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("alice's GET of b's runs = %v, %s; want Forbidden", err, stderr)
	}
}

func mustKubectlPath(t *testing.T) string {
	t.Helper()
	bins, err := (&devcluster.Cache{}).Binaries()
	if err != nil {
		t.Fatal(err)
	}
	return bins.Path(devcluster.Kubectl)
}

// TestTheAPIServerOutlivesOpkitRunsRunsAPIAndAStopRemovesIt runs opkit
// run with --runs-api-addr on a plane of its own, outside it: kubectl
// lists its runs and deliveries; killed, the API server keeps serving
// everything else and reports the APIService unavailable; started again
// and stopped with Ctrl-C, it removes the APIService, so that kubectl
// api-resources has no error to print.
func TestTheAPIServerOutlivesOpkitRunsRunsAPIAndAStopRemovesIt(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	kc := cl.KubeconfigPath()
	dir := t.TempDir()
	def := filepath.Join(dir, "napper.yaml")
	hooksDef := strings.Replace(hooksOperatorYAML, "command: [./handler.sh]\n      env: [{name: DIR, value: %q}]", `command: [sh, -c, 'cat >/dev/null; echo delivered >&2']`, 1)
	gate := filepath.Join(dir, "gate")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(def, []byte(napOperatorGated(gate)+"---\n"+hooksDef), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook"}, StringData: map[string]string{"secret": "s3cret"}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	args := []string{"run", "-f", def, "--kubeconfig", kc, "--archive", archivePath, "--metrics-addr", "0", "--hooks-addr", "127.0.0.1:0",
		"--runs-api-addr", "127.0.0.1:0", "--runs-api-host", "127.0.0.1"}
	cmd, out := startOpkit(t, args...)
	waitOutput(t, out, "runs API: https://127.0.0.1:", 90*time.Second)
	// The line comes once the engine started.
	waitRunsDiscovered(t, kc, 10*time.Second)

	// Only the API server's front proxy may call: a request straight to
	// the port, naming an administrator in the headers, is refused.
	_, addr, _ := strings.Cut(out.String(), "runs API: https://")
	addr, _, _ = strings.Cut(addr, ",")
	direct, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/apis/runs.opkit.dev/v1alpha1/runs", nil)
	if err != nil {
		t.Fatal(err)
	}
	direct.Header.Set("X-Remote-User", "system:admin")
	direct.Header.Set("X-Remote-Group", "system:masters")
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // what is tested is the server's check of its client
	resp, err := insecure.Do(direct)
	if err != nil {
		t.Fatalf("a request straight to the runs API at %q: %v", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request straight to the runs API with a forged X-Remote-User: HTTP %d, want 401", resp.StatusCode)
	}

	createNap(t, kc, "default", "n1", false)
	clustertest.Eventually(t, 90*time.Second, "kubectl get runs lists default/n1's run Succeeded", func(context.Context) (bool, error) {
		got, _, err := kubectlAll(t, kc, "get", "runs")
		return err == nil && strings.Contains(strings.Join(runRows(got, "default/n1"), "\n"), " Succeeded "), nil
	})
	url := hooksSourceURL(t, out)
	if status, answer := postDelivery(t, url, "d-1", "s3cret", []byte(`{"action":"created"}`)); status/100 != 2 {
		t.Fatalf("the delivery: HTTP %d %v", status, answer)
	}
	clustertest.Eventually(t, 60*time.Second, "kubectl get deliveries lists d-1 of source github", func(context.Context) (bool, error) {
		got, _, err := kubectlAll(t, kc, "get", "deliveries", "-l", "opkit.dev/source=github", "-o", "jsonpath={.items[*].spec.deliveryId}")
		return err == nil && strings.Contains(got, "d-1"), nil
	})

	// Killed: nothing answers for runs.opkit.dev, and the rest is served.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got, err := kubectl(t, kc, "get", "configmaps", "-n", "kube-system"); err != nil || !strings.Contains(got, "extension-apiserver-authentication") {
		t.Errorf("kubectl get configmaps with the engine down = %v\n%s", err, got)
	}
	clustertest.Eventually(t, 90*time.Second, "the APIService reports Available=False", func(context.Context) (bool, error) {
		got, _, err := kubectlAll(t, kc, "get", "apiservice", "v1alpha1.runs.opkit.dev", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		return err == nil && got == "False", nil
	})
	if _, stderr, err := kubectlAll(t, kc, "get", "runs"); err == nil || !strings.Contains(stderr, "ServiceUnavailable") && !strings.Contains(stderr, "unavailable") {
		t.Errorf("kubectl get runs with the engine down = %v, %s; want the API server's 503", err, stderr)
	}
	if got, err := kubectl(t, kc, "get", "configmaps", "-n", "kube-system"); err != nil || !strings.Contains(got, "extension-apiserver-authentication") {
		t.Errorf("kubectl get configmaps with the APIService unavailable = %v\n%s", err, got)
	}

	// Started again, it serves the same archive; stopped, it takes its
	// APIService away.
	cmd, out = startOpkit(t, args...)
	waitOutput(t, out, "runs API: https://127.0.0.1:", 90*time.Second)
	clustertest.Eventually(t, 30*time.Second, "kubectl get runs lists default/n1's run again", func(context.Context) (bool, error) {
		got, _, err := kubectlAll(t, kc, "get", "runs")
		return err == nil && len(runRows(got, "default/n1")) == 1, nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("opkit run after Ctrl-C: %v\n%s", err, out.String())
	}
	if _, stderr, err := kubectlAll(t, kc, "get", "apiservice", "v1alpha1.runs.opkit.dev"); err == nil || !strings.Contains(stderr, "NotFound") {
		t.Errorf("the APIService after opkit run stopped: %v, %s; want NotFound", err, stderr)
	}
	if _, stderr, err := kubectlAll(t, kc, "api-resources"); err != nil || stderr != "" {
		t.Errorf("kubectl api-resources after opkit run stopped = %v, stderr %q; want no error", err, stderr)
	}
}

// TestOpkitConsoleServesTheRunsOfAnArchiveWithoutAnEngine runs opkit
// console with --runs-api-addr on an archive no engine serves: kubectl
// get runs -A lists its runs, an operator-wide run in the kubeconfig's
// namespace, and --field-selector status.startedSince selects by start;
// stopped with Ctrl-C, it takes its APIService away.
func TestOpkitConsoleServesTheRunsOfAnArchiveWithoutAnEngine(t *testing.T) {
	t.Parallel()
	cl, _ := startPlane(t)
	kc := cl.KubeconfigPath()
	archivePath := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	record := func(at time.Time, r archive.Run) archive.Run {
		r.ID, r.StartedAt, r.Operator, r.Attempt = archive.NewID(at), at, "printer", 1
		if err := store.Insert(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		r.Outcome, r.FinishedAt = archive.Succeeded, at.Add(time.Second)
		if err := store.Finish(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	early := record(start, archive.Run{Handler: "announce", Action: "exec", Trigger: "create", APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: "team-a", Name: "early", UID: "uid-early", Key: "uid-early/1/announce"})
	late := record(start.Add(30*time.Minute), archive.Run{Handler: "announce", Action: "exec", Trigger: "create", APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: "team-a", Name: "late", UID: "uid-late", Key: "uid-late/1/announce"})
	wide := record(start.Add(40*time.Minute), archive.Run{Handler: "nightly", Action: "exec", Trigger: "schedule", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator", Name: "printer", Key: "schedule/nightly"})
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	cmd, out := startOpkit(t, "console", "--archive", archivePath, "--kubeconfig", kc, "--listen", "127.0.0.1:0",
		"--runs-api-addr", "127.0.0.1:0", "--runs-api-host", "127.0.0.1")
	waitOutput(t, out, "runs API: https://127.0.0.1:", 90*time.Second)
	waitOutput(t, out, "console: http://127.0.0.1:", 30*time.Second)
	waitRunsDiscovered(t, kc, 30*time.Second)

	clustertest.Eventually(t, 30*time.Second, "kubectl get runs -A lists team-a/early's and team-a/late's runs", func(context.Context) (bool, error) {
		all, _, err := kubectlAll(t, kc, "get", "runs", "-A")
		return err == nil && len(runRows(all, "team-a/early")) == 1 && len(runRows(all, "team-a/late")) == 1, nil
	})
	if got, _, err := kubectlAll(t, kc, "get", "runs", "-n", "default", "-o", "jsonpath={.items[*].metadata.name}"); err != nil || got != wide.ID {
		t.Errorf("kubectl get runs -n default (the kubeconfig's namespace) = %q, %v; want the operator-wide run %s alone", got, err, wide.ID)
	}
	since := late.StartedAt.UTC().Format(time.RFC3339)
	if got, _, err := kubectlAll(t, kc, "get", "runs", "-n", "team-a", "--field-selector", "status.startedSince="+since, "-o", "jsonpath={.items[*].metadata.name}"); err != nil || got != late.ID {
		t.Errorf("kubectl get runs -n team-a --field-selector status.startedSince=%s = %q, %v; want %s alone, not %s", since, got, err, late.ID, early.ID)
	}
	if _, stderr, err := kubectlAll(t, kc, "get", "runs", "-A", "--field-selector", "status.startedSince=1h"); err == nil || !strings.Contains(stderr, "status.startedSince=1h") {
		t.Errorf("kubectl get runs --field-selector status.startedSince=1h = %v, %s; want a BadRequest naming the value", err, stderr)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("opkit console after Ctrl-C: %v\n%s", err, out.String())
	}
	if _, stderr, err := kubectlAll(t, kc, "get", "apiservice", "v1alpha1.runs.opkit.dev"); err == nil || !strings.Contains(stderr, "NotFound") {
		t.Errorf("the APIService after opkit console stopped: %v, %s; want NotFound", err, stderr)
	}
	if _, stderr, err := kubectlAll(t, kc, "api-resources"); err != nil || stderr != "" {
		t.Errorf("kubectl api-resources after opkit console stopped = %v, stderr %q; want no error", err, stderr)
	}
}
