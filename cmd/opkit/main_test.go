package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/cli"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// asCLI makes the test binary behave as the opkit command, so that the
// supervisor `opkit cluster start` re-executes is this very build.
const asCLI = "OPKIT_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type result struct {
	stdout, stderr string
	code           int
}

// opkit runs the CLI as a user would, in its own process.
func opkit(t *testing.T, stateDir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCLI+"=1", "OPKIT_STATE_DIR="+stateDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("opkit %v: %v", args, err)
	}
	return r
}

func mustSucceed(t *testing.T, r result, what string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
}

type state struct {
	Pid        int    `json:"pid"`
	DataDir    string `json:"dataDir"`
	Components []struct {
		Name string `json:"name"`
		Pid  int    `json:"pid"`
	} `json:"components"`
}

func readState(t *testing.T, stateDir string) state {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

var kubectl = clustertest.Kubectl

// waitGone waits until no process mentions s.
func waitGone(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := clustertest.ProcessesMentioning(s)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v mentioning %s still run", pids, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var alive = clustertest.ProcessAlive

func TestClusterStartKubectlStopLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	stateDir := t.TempDir()
	t.Cleanup(func() { opkit(t, stateDir, "cluster", "stop") })

	start := opkit(t, stateDir, "cluster", "start")
	mustSucceed(t, start, "cluster start")
	line := strings.TrimSpace(start.stdout)
	if !strings.HasPrefix(line, "export KUBECONFIG=") {
		t.Fatalf("cluster start printed %q, want an export KUBECONFIG= line", line)
	}
	kc := strings.Trim(strings.TrimPrefix(line, "export KUBECONFIG="), "'")
	if !strings.Contains(start.stderr, "ready at https://127.0.0.1:") {
		t.Errorf("cluster start should say where the plane is ready: %s", start.stderr)
	}

	out, err := kubectl(t, kc, "get", "ns")
	if err != nil || !strings.Contains(out, "kube-system") || !strings.Contains(out, "default") {
		t.Fatalf("kubectl get ns: %v\n%s", err, out)
	}

	env := opkit(t, stateDir, "cluster", "env")
	mustSucceed(t, env, "cluster env")
	if strings.TrimSpace(env.stdout) != line {
		t.Errorf("cluster env printed %q, want %q", env.stdout, line)
	}
	status := opkit(t, stateDir, "cluster", "status")
	mustSucceed(t, status, "cluster status")
	for _, want := range []string{"readyz: ok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", kc} {
		if !strings.Contains(status.stdout, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, status.stdout)
		}
	}

	st := readState(t, stateDir)
	second := opkit(t, stateDir, "cluster", "start")
	if second.code == 0 || !strings.Contains(second.stderr, "already running") {
		t.Errorf("second start: exit %d, stderr %q; want non-zero and 'already running'", second.code, second.stderr)
	}
	if again := readState(t, stateDir); again.Pid != st.Pid {
		t.Errorf("second start replaced the supervisor: pid %d -> %d", st.Pid, again.Pid)
	}
	if out, err := kubectl(t, kc, "get", "ns", "default"); err != nil {
		t.Errorf("the first plane stopped answering after the refused start: %v\n%s", err, out)
	}

	mustSucceed(t, opkit(t, stateDir, "cluster", "stop"), "cluster stop")
	if alive(st.Pid) {
		t.Errorf("supervisor %d still runs after stop", st.Pid)
	}
	for _, c := range st.Components {
		if alive(c.Pid) {
			t.Errorf("%s (pid %d) still runs after stop", c.Name, c.Pid)
		}
	}
	waitGone(t, st.DataDir, 0)
	if _, err := os.Stat(st.DataDir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s remains: %v", st.DataDir, err)
	}
	if r := opkit(t, stateDir, "cluster", "status"); r.code == 0 || !strings.Contains(r.stderr, "no local control plane is running") {
		t.Errorf("status after stop: exit %d, %q", r.code, r.stderr)
	}
}

func TestClusterSupervisorKilledLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	stateDir := t.TempDir()
	t.Cleanup(func() { opkit(t, stateDir, "cluster", "stop") })
	mustSucceed(t, opkit(t, stateDir, "cluster", "start"), "cluster start")
	st := readState(t, stateDir)
	if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, st.DataDir, 15*time.Second)
	// The stale state is recognised: nothing runs, and a new start works.
	if r := opkit(t, stateDir, "cluster", "status"); r.code == 0 {
		t.Errorf("status after the supervisor was killed: exit 0:\n%s", r.stdout)
	}
	mustSucceed(t, opkit(t, stateDir, "cluster", "start"), "start after a killed supervisor")
	mustSucceed(t, opkit(t, stateDir, "cluster", "stop"), "cluster stop")
}

func TestClusterCommandsWithoutAPlaneSaySo(t *testing.T) {
	stateDir := t.TempDir()
	for _, args := range [][]string{{"cluster", "env"}, {"cluster", "status"}, {"kubectl", "get", "ns"}} {
		r := opkit(t, stateDir, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "no local control plane is running") {
			t.Errorf("opkit %v: exit %d, stderr %q; want an error saying no plane runs", args, r.code, r.stderr)
		}
	}
	if r := opkit(t, stateDir, "cluster", "stop"); r.code != 0 || !strings.Contains(r.stderr, "no local control plane is running") {
		t.Errorf("stop without a plane: exit %d, %q; want 0 and a note", r.code, r.stderr)
	}
}

func TestVersionNamesTheControlPlane(t *testing.T) {
	r := opkit(t, t.TempDir(), "version")
	mustSucceed(t, r, "version")
	if !strings.Contains(r.stdout, devcluster.KubernetesVersion) || !strings.Contains(r.stdout, devcluster.EtcdVersion) {
		t.Errorf("version output %q lacks the control-plane versions", r.stdout)
	}
}

func TestClusterStartOnATakenPortFailsClearly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	stateDir := t.TempDir()
	r := opkit(t, stateDir, "cluster", "start", "--port", port)
	if r.code == 0 {
		opkit(t, stateDir, "cluster", "stop")
		t.Fatal("start on a taken port succeeded")
	}
	if !strings.Contains(r.stderr, "127.0.0.1:"+port) || !strings.Contains(r.stderr, "already in use") {
		t.Errorf("stderr should name the taken port: %s", r.stderr)
	}
	if s := opkit(t, stateDir, "cluster", "status"); s.code == 0 {
		t.Errorf("a plane runs after the failed start:\n%s", s.stdout)
	}
}

func TestRunRefusesInvalidDefinitionsBeforeTouchingTheCluster(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	content := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: bad}\nspec:\n  resource:\n    group: demo.example.com\n    kind: Bad\n    versions: [{name: v1}]\n  status:\n    x: ${self.spec.missing +}\n"
	if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "run", "-f", bad, "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"))
	cmd.Env = append(os.Environ(), asCLI+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("opkit run accepted an invalid definition:\n%s", out)
	}
	if want := bad + ":10: spec.status.x: ${self.spec.missing +}"; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(string(out), "kubeconfig") {
		t.Errorf("it read the kubeconfig before refusing the definition:\n%s", out)
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes to it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestDevRunsThePrinterAndStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cmd := exec.Command(os.Args[0], "dev", "../../examples/printer", "--apply", "../../examples/printer/printer.yaml")
	cmd.Env = append(os.Environ(), asCLI+"=1")
	stdout := &lockedBuffer{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Read stderr until opkit dev says it runs, keeping the data directory.
	var dataDir string
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		line := lines.Text()
		if kc, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			dataDir = filepath.Dir(strings.Trim(kc, "'"))
			break
		}
	}
	if dataDir == "" {
		t.Fatalf("opkit dev did not start; stdout:\n%s", stdout.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	table := stdout.String()
	if !strings.Contains(table, "hello") || !strings.Contains(table, "Hello Kube!") || !strings.Contains(table, "Succeeded") {
		t.Errorf("kubectl get after --apply:\n%s", table)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("opkit dev after Ctrl-C: %v", err)
	}
	waitGone(t, dataDir, 5*time.Second)
}
