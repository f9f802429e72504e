package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// cliBinary is the opkit command the tests run, as a user would: this
// package built by go build (clustertest.Command: into opkit's cache,
// linked again only when the code changed), without the race detector
// even when the tests have it. These tests start some
// three hundred engines and CLIs; built with the race detector, their
// CPU was most of the package's, on a machine running the other
// packages' tests beside it. The race detector watches the same code
// in the packages' own tests (internal/engine runs its engines in
// process), where it finds more for less.
var cliBinary string

func TestMain(m *testing.M) {
	// Four tests at a time: the package used under half a core at two.
	clustertest.DefaultParallel(4)
	// Runs go to an archive of this test binary's, not the user's.
	dir, err := os.MkdirTemp("", "opkit-archive-")
	if err != nil {
		panic(err)
	}
	if err := os.Setenv("OPKIT_ARCHIVE", filepath.Join(dir, "runs.db")); err != nil {
		panic(err)
	}
	// go test puts its toolchain's go first on $PATH.
	if cliBinary, err = clustertest.Command("."); err != nil {
		fmt.Fprintf(os.Stderr, "building the opkit command to test: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// opkit runs the CLI as a user would, in its own process.
func opkit(t *testing.T, stateDir string, args ...string) result {
	t.Helper()
	return opkitWithEnv(t, []string{"OPKIT_STATE_DIR=" + stateDir}, args...)
}

// opkitWithEnv runs the CLI with the environment less KUBECONFIG, plus env.
func opkitWithEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(cliBinary, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBECONFIG=") }), archiveEnv(t))
	cmd.Env = append(cmd.Env, env...)
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

// archives holds the archive of each test: every opkit a test starts
// records its runs there (OPKIT_ARCHIVE; an --archive flag still wins), so
// that tests running at once (t.Parallel) neither see each other's runs
// nor end them: an engine that starts ends every Running run of its
// archive as Cancelled.
var archives sync.Map // test name -> path

// testArchive is the path of t's archive.
func testArchive(t *testing.T) string {
	t.Helper()
	if p, ok := archives.Load(t.Name()); ok {
		return p.(string)
	}
	p, _ := archives.LoadOrStore(t.Name(), filepath.Join(t.TempDir(), "runs.db"))
	return p.(string)
}

// archiveEnv is the environment variable that gives t's archive to a
// command.
func archiveEnv(t *testing.T) string { return "OPKIT_ARCHIVE=" + testArchive(t) }

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
	within = clustertest.Scaled(within)
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
	t.Parallel()
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
	t.Parallel()
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
	if r := opkit(t, stateDir, "kubectl", "get", "ns"); !strings.Contains(r.stderr, "`opkit dev`") || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("kubectl without a plane: %q; want an error naming both ways to start one, ending its line", r.stderr)
	}
	for _, help := range []string{"--help", "-h"} {
		if r := opkit(t, stateDir, "kubectl", help); r.code != 0 || !strings.Contains(r.stdout, "Every argument is passed") {
			t.Errorf("opkit kubectl %s without a plane: exit %d, stdout %q, stderr %q; want its help", help, r.code, r.stdout, r.stderr)
		}
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
	cmd := exec.Command(cliBinary, "run", "-f", bad, "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"))
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

func TestRunRefusesDefinitionsThatClashBeforeTouchingTheCluster(t *testing.T) {
	dir := t.TempDir()
	op := func(name, kind string) string {
		return "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: " + name + "}\nspec:\n  resource:\n    group: demo.example.com\n    kind: " + kind + "\n    versions: [{name: v1}]\n"
	}
	files := map[string]string{"a.yaml": op("a", "Backup"), "b.yaml": op("b", "Backup"), "c.yaml": op("a", "Restore")}
	var args []string
	for _, name := range []string{"a.yaml", "b.yaml", "c.yaml"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", path)
	}
	cmd := exec.Command(cliBinary, append(append([]string{"run"}, args...), "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"))...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("opkit run accepted clashing definitions:\n%s", out)
	}
	a, b, c := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml")
	for _, want := range []string{
		b + ":7: spec.resource.kind: operators a and b both declare Backup.demo.example.com (CRD backups.demo.example.com; the other at " + a + ":7)",
		c + ":3: metadata.name: operator a is defined twice: also at " + a + ":3",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "kubeconfig") {
		t.Errorf("it read the kubeconfig before refusing the definitions:\n%s", out)
	}
}

func TestRunWarnsOfAKindThatShadowsABuiltInOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.yaml")
	def := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: d}\nspec:\n  resource:\n    group: demo.example.com\n    kind: Deployment\n    versions: [{name: v1}]\n"
	if err := os.WriteFile(path, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	r := opkitWithEnv(t, nil, "run", "-f", path, "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"))
	if want := "warning: " + path + ":7: spec.resource.kind: kind Deployment in group demo.example.com shadows the built-in apps/v1 Deployment"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
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

// startOpkit starts the CLI in its own process, its stdout and stderr
// together in the buffer returned; the process is killed when the test ends.
func startOpkit(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(cliBinary, args...)
	cmd.Env = append(os.Environ(), archiveEnv(t))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// waitOutput waits until out holds want, and fails the test otherwise.
func waitOutput(t *testing.T, out *lockedBuffer, want string, within time.Duration) {
	t.Helper()
	within = clustertest.Scaled(within)
	for deadline := time.Now().Add(within); !strings.Contains(out.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s in:\n%s", want, within, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const notesOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes}
spec:
  resource:
    group: notes.example.com
    kind: Note
    versions:
    - name: v1
      schema: {type: object, properties: {a: {type: string}}}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-note"}
      data: {a: "${self.spec.a}"}
`

func TestDevRunsThePrinterReloadsDefinitionsAndStopsCleanly(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir := t.TempDir()
	operator, err := os.ReadFile("../../examples/printer/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"operator.yaml": string(operator), "printer.yaml": "apiVersion: v1\nkind: ConfigMap\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	cmd := exec.Command(cliBinary, "dev", dir, "--apply", "../../examples/printer/printer.yaml", "--console", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OPKIT_STATE_DIR="+stateDir, archiveEnv(t))
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitOutput(t, stderr, "opkit dev is running", 3*time.Minute)
	waitOutput(t, stderr, "Stop it with Ctrl-C", 5*time.Second)
	if n := strings.Count(stderr.String(), "skipping "+filepath.Join(dir, "printer.yaml")+": not an Operator"); n != 1 {
		t.Errorf("opkit dev said %d times that it skipped a file that is not an Operator, want once:\n%s", n, stderr.String())
	}
	var kubeconfig string
	for line := range strings.Lines(stderr.String()) {
		if kc, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			kubeconfig = strings.Trim(kc, "'")
		}
	}
	dataDir := filepath.Dir(kubeconfig)
	// opkit kubectl finds the plane of opkit dev, or takes $KUBECONFIG.
	for _, env := range [][]string{{"OPKIT_STATE_DIR=" + stateDir}, {"OPKIT_STATE_DIR=" + t.TempDir(), "KUBECONFIG=" + kubeconfig}} {
		if r := opkitWithEnv(t, env, "kubectl", "get", "printers"); r.code != 0 || !strings.Contains(r.stdout, "hello") {
			t.Errorf("opkit kubectl get printers with %v: exit %d\n%s%s", env, r.code, r.stdout, r.stderr)
		}
	}
	// The console is served beside the engine, and lists the Printer.
	console := consoleURL(t, stderr.String(), "The console: ")
	if page := httpGet(t, console+"/operators/printer"); !strings.Contains(page, `href="/operators/printer/objects/default/hello"`) {
		t.Errorf("the console does not list the Printer hello:\n%s", page)
	}
	// The Printer has no handler: its timeline offers no handler action.
	if page := httpGet(t, console+"/operators/printer/objects/default/hello"); !strings.Contains(page, "hello-print") || strings.Contains(page, "Retry now") {
		t.Errorf("the Printer's timeline (want its Pod child, and no Retry):\n%s", page)
	}
	table := stdout.String()
	if !strings.Contains(table, "hello") || !strings.Contains(table, "Hello Kube!") || !strings.Contains(table, "Succeeded") {
		t.Errorf("kubectl get after --apply:\n%s", table)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	crdColumns := func(name string) []string {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		var cols []string
		for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			cols = append(cols, col.Name)
		}
		return cols
	}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A changed definition is reloaded: its CRD gets the new column.
	write("operator.yaml", strings.Replace(string(operator), "      - {name: Phase,", "      - {name: Words, jsonPath: .spec.text, type: string, priority: 1}\n      - {name: Phase,", 1))
	waitOutput(t, stderr, "operator printer: reloaded", 30*time.Second)
	if cols := crdColumns("printers.demo.example.com"); !slices.Contains(cols, "Words") {
		t.Errorf("after the reload the Printer columns are %v", cols)
	}
	// A new file starts its operator.
	write("notes.yaml", notesOperator)
	waitOutput(t, stderr, "operator notes: running", 30*time.Second)
	crdColumns("notes.notes.example.com")
	// A breaking edit is refused with its line; the running version runs.
	write("notes.yaml", strings.Replace(notesOperator, "a: {type: string}", "a: {type: string, maxLength: 3}", 1))
	waitOutput(t, stderr, filepath.Join(dir, "notes.yaml")+":10: versions[v1].spec.a: breaking: a maxLength of 3 is added", 30*time.Second)
	waitOutput(t, stderr, "(the running version of operator notes keeps running)", time.Second)
	// A broken edit is reported with its line; the last valid version runs.
	write("notes.yaml", notesOperator+"  status: [\n")
	waitOutput(t, stderr, filepath.Join(dir, "notes.yaml")+":", 30*time.Second)
	waitOutput(t, stderr, "the last valid version of "+filepath.Join(dir, "notes.yaml")+" keeps running", time.Second)
	// Undone, it says so: the error is no longer the last word.
	write("notes.yaml", notesOperator)
	waitOutput(t, stderr, "operator notes: reloaded", 30*time.Second)
	// A handler that gives up is shown, with the commands that tell more.
	write("notes.yaml", notesOperator+failingHandler)
	waitOutput(t, stderr, "operator notes: reloaded (Note.notes.example.com", 30*time.Second)
	note := createNote(t, c, "n1", "x")
	waitOutput(t, stderr, "notes default/n1: handler fail gave up (create, attempt 1): exit status 1", 60*time.Second)
	waitOutput(t, stderr, "once fixed: opkit retry default/n1", time.Second)
	if err := c.Delete(t.Context(), note); err != nil {
		t.Fatal(err)
	}
	// A removed file stops its operator.
	if err := os.Remove(filepath.Join(dir, "notes.yaml")); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stderr, "operator notes: stopped", 30*time.Second)

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("opkit dev after Ctrl-C: %v\n%s", err, stderr.String())
	}
	waitGone(t, dataDir, 5*time.Second)
	if _, err := os.Stat(filepath.Join(stateDir, "dev-plane.json")); !os.IsNotExist(err) {
		t.Errorf("opkit dev left its plane's record behind: %v", err)
	}
}

// failingHandler is a handler, for notesOperator, that fails at once.
const failingHandler = `  handlers:
  - name: fail
    on: [create]
    retry: {maxAttempts: 1}
    exec: {command: ["false"]}
`

func TestRunWithoutFilesRunsTheOperatorsOfTheCluster(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	cmd, stderr := startOpkit(t, "run", "--kubeconfig", cl.KubeconfigPath(), "--console", "127.0.0.1:0")
	waitOutput(t, stderr, "running the Operators of the cluster", 30*time.Second)

	// Applied as a user would, once opkit has installed the Operator CRD.
	for _, f := range []string{"../../examples/printer/operator.yaml", "../../examples/website/operator.yaml"} {
		clustertest.Eventually(t, 30*time.Second, "kubectl apply -f "+f, func(context.Context) (bool, error) {
			_, err := kubectl(t, cl.KubeconfigPath(), "apply", "-f", f)
			return err == nil, nil
		})
	}
	clustertest.Eventually(t, 60*time.Second, "both Operators Ready", func(ctx context.Context) (bool, error) {
		ops := &v1alpha1.OperatorList{}
		if err := c.List(ctx, ops); err != nil {
			return false, err
		}
		ready := 0
		for _, op := range ops.Items {
			if meta.IsStatusConditionTrue(op.Status.Conditions, "Ready") && op.Status.ObservedGeneration == op.Generation {
				ready++
			}
		}
		return ready == 2, nil
	})
	out, err := kubectl(t, cl.KubeconfigPath(), "get", "operators")
	if err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "printer Printer demo.example.com True Running") {
		t.Errorf("kubectl get operators: %v\n%s", err, out)
	}
	// The console beside the engine lists both operators.
	page := httpGet(t, consoleURL(t, stderr.String(), "console: "))
	for _, op := range []string{"printer", "website"} {
		if !strings.Contains(page, `<a href="/operators/`+op+`">`) {
			t.Errorf("the console's overview lacks operator %s:\n%s", op, page)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("opkit run after Ctrl-C: %v\n%s", err, stderr.String())
	}

	// opkit console serves the same from the archive and the cluster alone.
	console, out2 := startOpkit(t, "console", "--kubeconfig", cl.KubeconfigPath(), "--listen", "127.0.0.1:0")
	waitOutput(t, out2, "Ctrl-C stops it", 30*time.Second)
	if page := httpGet(t, consoleURL(t, out2.String(), "console: ")+"/operators/website"); !strings.Contains(page, "Website objects") {
		t.Errorf("opkit console's operator page:\n%s", page)
	}
	if err := console.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := console.Wait(); err != nil {
		t.Errorf("opkit console after Ctrl-C: %v\n%s", err, out2.String())
	}
}

// consoleURL finds the console's URL in a command's output, after prefix.
func consoleURL(t *testing.T, output, prefix string) string {
	t.Helper()
	for line := range strings.Lines(output) {
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok && strings.HasPrefix(u, "http://") {
			return strings.Fields(u)[0]
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, output)
	return ""
}

func TestConsoleRefusesAnOpenAddressWithoutAuth(t *testing.T) {
	stateDir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "--listen", "0.0.0.0:7380"}, "--listen 0.0.0.0:7380 is not a loopback address: serving the console there needs --console-auth token or kubernetes"},
		{[]string{"run", "--console", ":7380"}, "--console :7380 is not a loopback address"},
		{[]string{"console", "--console-auth", "token"}, "needs a token of at least 16 characters"},
		{[]string{"console", "--console-auth", "tokn"}, `--console-auth "tokn": want none, token or kubernetes`},
	} {
		r := opkit(t, stateDir, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("opkit %v: exit %d, stderr %q; want 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// httpGet returns the body of a GET that must answer 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	status, body := clustertest.Get(t, url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s\n%s", url, status, http.StatusText(status), body)
	}
	return body
}

// TestAnAPIOutageIsToldInTwoLinesAndCaughtUp cuts opkit run off the API
// server for 20s while a handler runs and Notes are created: its log says
// the API server is unreachable and when it is back, in a few lines (none
// of them client-go's for the handler's Events it could not write yet),
// and every Note created meanwhile gets its ConfigMap after.
func TestAnAPIOutageIsToldInTwoLinesAndCaughtUp(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	proxy, kubeconfig := proxiedKubeconfig(t, cl, dir)
	def, keys := keyRecorder(t, dir, "3", "  - name: work\n    on: [create]\n")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", kubeconfig, "--archive", filepath.Join(dir, "runs.db"))
	waitOutput(t, out, "operator notes: running", 60*time.Second)

	note := func(name string) { createNote(t, c, name, name) }
	converged := func(names ...string) {
		clustertest.Eventually(t, 2*time.Minute, "a ConfigMap for each Note", func(ctx context.Context) (bool, error) {
			for _, name := range names {
				var cm unstructured.Unstructured
				cm.SetAPIVersion("v1")
				cm.SetKind("ConfigMap")
				if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name + "-note"}, &cm); err != nil {
					return false, client.IgnoreNotFound(err)
				}
			}
			return true, nil
		})
	}
	note("before")
	converged("before")
	// A run that ends during the outage: its Events are written after it.
	note("in-flight")
	clustertest.Eventually(t, time.Minute, "the in-flight Note's handler started", func(context.Context) (bool, error) {
		return len(keysIn(keys)) == 2, nil
	})

	before := len(out.String())
	proxy.Freeze()
	outage := time.Now()
	for _, name := range []string{"during-1", "during-2", "during-3"} {
		note(name)
	}
	waitOutput(t, out, "the API server is unreachable", 20*time.Second)
	time.Sleep(20*time.Second - time.Since(outage))
	proxy.Thaw()
	converged("during-1", "during-2", "during-3")
	waitOutput(t, out, "the API server is back after", 30*time.Second)
	caughtUp := time.Since(outage) - 20*time.Second

	said := strings.TrimSpace(out.String()[before:])
	if lines := strings.Count(said, "\n") + 1; lines > 8 || strings.Contains(said, "goroutine ") || strings.Contains(said, ".go:") {
		t.Errorf("a 20s outage wrote %d lines (want a few, no stack traces):\n%s", lines, said)
	}
	// Client-go's retries of the Events it could not write are the
	// outage's news, which the engine's two lines tell.
	if n := strings.Count(said, "Unable to write event"); n > 0 {
		t.Errorf("a 20s outage wrote %d lines of Events client-go could not write:\n%s", n, said)
	}
	t.Logf("caught up %s after the outage ended; the log said:\n%s", caughtUp.Round(100*time.Millisecond), said)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// proxiedKubeconfig writes a kubeconfig in dir that reaches the plane's
// API server through a proxy the test can cut.
func proxiedKubeconfig(t *testing.T, cl *devcluster.Cluster, dir string) (*clustertest.Proxy, string) {
	t.Helper()
	proxy := clustertest.NewProxy(t, strings.TrimPrefix(cl.Endpoint(), "https://"))
	kc, err := clientcmd.LoadFromFile(cl.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + proxy.Addr()
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return proxy, kubeconfig
}

// keyRecorder writes in dir a handler that appends its idempotency key to
// the returned keys file, sleeps for sleep seconds ("0" for none) and
// succeeds, and notesOperator with that handler declared by head (its
// "- name:" line, triggers and policies, as YAML lines indented for
// spec.handlers). It returns the definition's path and the keys file.
func keyRecorder(t *testing.T, dir, sleep, head string) (def, keys string) {
	t.Helper()
	keys = filepath.Join(dir, "keys")
	handler := filepath.Join(dir, "work.sh")
	if err := os.WriteFile(handler, []byte("#!/bin/bash\necho \"$OPKIT_IDEMPOTENCY_KEY\" >> \"$KEYS\"\nsleep "+sleep+"\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def = filepath.Join(dir, "notes.yaml")
	if err := os.WriteFile(def, []byte(notesOperator+"  handlers:\n"+head+`    exec:
      command: [`+strconv.Quote(handler)+`]
      env: [{name: KEYS, value: `+strconv.Quote(keys)+`}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return def, keys
}

// keysIn returns the keys a keyRecorder handler recorded, one per run.
func keysIn(keys string) []string {
	data, _ := os.ReadFile(keys)
	return strings.Fields(string(data))
}

// TestARunThatEndsDuringAnOutageShowsInStatusSoonAfterIt cuts opkit run off
// the API server for 45s while a handler runs; the handler ends during the
// cut, and every reconcile that would write its outcome to the Note's
// status fails, backing off to more than 40s between tries. Once the API
// server is back the status shows the outcome within seconds, not after
// that back-off.
func TestARunThatEndsDuringAnOutageShowsInStatusSoonAfterIt(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	proxy, kubeconfig := proxiedKubeconfig(t, cl, dir)
	def, keys := keyRecorder(t, dir, "2", "  - name: work\n    on: [create]\n")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", kubeconfig, "--archive", filepath.Join(dir, "runs.db"))
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	createNote(t, c, "cut", "x")
	clustertest.Eventually(t, time.Minute, "the handler started", func(context.Context) (bool, error) {
		return len(keysIn(keys)) > 0, nil
	})
	proxy.Freeze()
	// The run ends 2s into the cut; the reconciles that would record it
	// fail and back off: 5ms doubled at each try, 20s apart after 20s, 40s
	// apart after 40s.
	time.Sleep(45 * time.Second)
	proxy.Thaw()
	thawed := time.Now()

	// The archive is written at once; the Note's status waits for the API.
	clustertest.Eventually(t, 2*time.Minute, "the Note's status shows the run succeeded", func(ctx context.Context) (bool, error) {
		note := &unstructured.Unstructured{}
		note.SetAPIVersion("notes.example.com/v1")
		note.SetKind("Note")
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cut"}, note); err != nil {
			return false, err
		}
		outcome, _, _ := unstructured.NestedString(note.Object, "status", "opkit", "lastRun", "outcome")
		return outcome == string(archive.Succeeded), nil
	})
	// Before the engine retried on the API's return, this took the rest of
	// the back-off: about 35s. 20s on a quiet machine, scaled on a loaded
	// one.
	if took, bound := time.Since(thawed), clustertest.Scaled(20*time.Second); took > bound {
		t.Errorf("the Note's status showed the run that ended during the cut %s after the API server came back; want within %s", took.Round(time.Second), bound.Round(time.Second))
	} else {
		t.Logf("the Note's status showed the run %s after the API server came back", took.Round(100*time.Millisecond))
	}
	waitOutput(t, out, "the API server is back after", 30*time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// smallDisk mounts a tmpfs of size bytes at a new directory and unmounts
// it when the test ends: a disk the test can fill. It needs root; without
// it the test is skipped, and fails under CI=true.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a tmpfs (needs root): %v", err)
		}
		t.Skipf("mounting a tmpfs needs root: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file at path until its disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// TestAFullArchiveDiskStartsNoRunAndLosesNoRecord fills the disk of opkit
// run's archive while a handler runs, then creates Notes. No handler
// starts while the archive cannot record it, the log says so in a line,
// and once there is room again every run is recorded, the one that ended
// meanwhile with its true outcome, and no handler ran twice.
func TestAFullArchiveDiskStartsNoRunAndLosesNoRecord(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 4<<20)
	cl, c := startPlane(t)
	dir := t.TempDir()
	def, keys := keyRecorder(t, dir, "3", "  - name: work\n    on: [create]\n")
	archivePath := filepath.Join(disk, "runs.db")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	started := func() int { return len(keysIn(keys)) }
	createNote(t, c, "before", "x")
	clustertest.Eventually(t, time.Minute, "the first run started", func(context.Context) (bool, error) { return started() == 1, nil })

	filler := filepath.Join(disk, "filler")
	fill(t, filler)
	createNote(t, c, "full-1", "x")
	createNote(t, c, "full-2", "x")
	waitOutput(t, out, "the archive cannot record runs", 30*time.Second)
	time.Sleep(6 * time.Second) // the first run has ended; the others were tried again
	if n := started(); n != 1 {
		t.Fatalf("%d handlers started; want only the one started before the disk was full", n)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "the archive records runs again after", 30*time.Second)
	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var page *archive.Page
	clustertest.Eventually(t, time.Minute, "three runs ended", func(ctx context.Context) (bool, error) {
		page, err = store.List(ctx, archive.Query{Operator: "notes", Limit: 100})
		if err != nil {
			return false, err
		}
		ended := 0
		for _, r := range page.Runs {
			if r.Outcome != archive.Running {
				ended++
			}
		}
		return ended >= 3, nil
	})
	for _, r := range page.Runs {
		if r.Outcome != archive.Succeeded {
			t.Errorf("run %s of %s: %s %q; want Succeeded", r.ID, r.Name, r.Outcome, r.Error)
		}
	}
	if n := started(); n != 3 || len(page.Runs) != 3 {
		t.Errorf("%d handler starts and %d runs for 3 Notes; want one each", n, len(page.Runs))
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("the log said:\n%s", grepLines(out.String(), "archive"))
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var lines []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(lines, "\n")
}

// TestAnEtcdPausedFor20sIsToldAndCaughtUp stops the plane's etcd with
// SIGSTOP for 20s while handlers run: the API server stays up but cannot
// answer. opkit run says the API server is not ready and when it is back,
// every Note converges after, and no handler runs twice.
func TestAnEtcdPausedFor20sIsToldAndCaughtUp(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	var etcd int
	for _, comp := range cl.Components() {
		if comp.Name == "etcd" {
			etcd = comp.Pid
		}
	}
	if etcd == 0 {
		t.Fatalf("no etcd among the plane's components %v", cl.Components())
	}
	dir := t.TempDir()
	def, keys := keyRecorder(t, dir, "2", "  - name: work\n    on: [create]\n")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", filepath.Join(dir, "runs.db"))
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	const n = 20
	for i := range n {
		createNote(t, c, fmt.Sprintf("etcd-%d", i), "x")
	}
	started := func() []string { return keysIn(keys) }
	clustertest.Eventually(t, time.Minute, "runs started", func(context.Context) (bool, error) { return len(started()) > 0, nil })
	before := len(out.String())
	if err := syscall.Kill(etcd, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Second)
	if err := syscall.Kill(etcd, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	clustertest.Eventually(t, 3*time.Minute, "every Note's run shown in its status", func(ctx context.Context) (bool, error) {
		var notes unstructured.UnstructuredList
		notes.SetAPIVersion("notes.example.com/v1")
		notes.SetKind("NoteList")
		if err := c.List(ctx, &notes, client.InNamespace("default")); err != nil {
			return false, nil // the API server may still be catching up
		}
		done := 0
		for _, note := range notes.Items {
			if outcome, _, _ := unstructured.NestedString(note.Object, "status", "opkit", "lastRun", "outcome"); outcome == string(archive.Succeeded) {
				done++
			}
		}
		return done == n, nil
	})
	t.Logf("every Note converged %s after etcd resumed", time.Since(resumed).Round(100*time.Millisecond))
	if keys := started(); len(keys) != n || len(slices.Compact(slices.Sorted(slices.Values(keys)))) != n {
		t.Errorf("%d handler starts (%d keys) for %d Notes; want one each", len(keys), len(slices.Compact(slices.Sorted(slices.Values(keys)))), n)
	}
	waitOutput(t, out, "the API server is back after", 30*time.Second)
	said := out.String()[before:]
	if !strings.Contains(said, "the API server is not ready (failing: etcd") {
		t.Errorf("the log did not say the API server was not ready:\n%s", said)
	}
	t.Logf("the log said:\n%s", said)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// TestAnEnginePausedPastItsHandlersTimeoutRunsEachOnce stops opkit run
// with SIGSTOP for twice its handlers' timeout while eight runs are in
// flight; the handlers finish meanwhile. After SIGCONT every run
// succeeds, none is timed out, and no handler runs twice for a key.
func TestAnEnginePausedPastItsHandlersTimeoutRunsEachOnce(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	def, keys := keyRecorder(t, dir, "2", "  - name: work\n    on: [create]\n    timeout: 4s\n")
	archivePath := filepath.Join(dir, "runs.db")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	const n = 8
	for i := range n {
		createNote(t, c, fmt.Sprintf("paused-%d", i), "x")
	}
	started := func() int { return len(keysIn(keys)) }
	clustertest.Eventually(t, time.Minute, "the runs started", func(context.Context) (bool, error) { return started() == n, nil })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // twice the timeout; the handlers end after 2s
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var page *archive.Page
	clustertest.Eventually(t, 2*time.Minute, "every run ended", func(ctx context.Context) (bool, error) {
		page, err = store.List(ctx, archive.Query{Operator: "notes", Limit: 1000})
		if err != nil {
			return false, err
		}
		for _, r := range page.Runs {
			if r.Outcome == archive.Running {
				return false, nil
			}
		}
		return len(page.Runs) >= n, nil
	})
	time.Sleep(3 * time.Second) // a second run, if any, would have started
	for _, r := range page.Runs {
		if r.Outcome != archive.Succeeded {
			t.Errorf("run %s of %s: %s %q; want Succeeded", r.ID, r.Name, r.Outcome, r.Error)
		}
	}
	if got := started(); got != n || len(page.Runs) != n {
		t.Errorf("%d handler starts and %d runs for %d Notes; want one each", got, len(page.Runs), n)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// startPlane starts a control plane of the test's own, stopped when the
// test ends, and returns it with a client of it. The tests that start
// planes run in parallel (t.Parallel): most of their time is waiting —
// for a plane, an outage, a schedule — and each has its own plane, state
// directory, archive (testArchive) and ports.
func startPlane(t *testing.T) (*devcluster.Cluster, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cl, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	cfg := cl.RESTConfig()
	cfg.QPS = -1 // a test may create many objects (a drain of 1,000): no client-side rate limit
	c, err := client.New(cfg, client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl, c
}

// createNote creates a Note of notesOperator in the default namespace.
func createNote(t *testing.T, c client.Client, name, a string) *unstructured.Unstructured {
	t.Helper()
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "notes.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": map[string]any{"a": a},
	}}
	if err := c.Create(t.Context(), note); err != nil {
		t.Fatal(err)
	}
	return note
}

// TestAWhenTransitionWhileTheEngineIsDownRunsOnceAfterItStarts kills opkit
// run with SIGKILL, makes a handler's when condition true while it is
// down, and starts it twice: the handler runs once, after the first start.
func TestAWhenTransitionWhileTheEngineIsDownRunsOnceAfterItStarts(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	def, keys := keyRecorder(t, dir, "0", "  - name: opened\n    on: [when]\n    when: \"children.config.data.a == 'go'\"\n")
	archivePath := filepath.Join(dir, "runs.db")
	start := func() *exec.Cmd {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
		waitOutput(t, out, "operator notes: running", 60*time.Second)
		return cmd
	}
	ran := func() []string { return keysIn(keys) }
	cmd := start()
	note := createNote(t, c, "gate", "wait")
	clustertest.Eventually(t, time.Minute, "the ConfigMap", func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gate-note"}, &cm)
		return err == nil && cm.Data["a"] == "wait", client.IgnoreNotFound(err)
	})
	time.Sleep(time.Second) // the false value recorded
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The condition turns true while no engine runs.
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(note), note); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(note.Object, "go", "spec", "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(t.Context(), note); err != nil {
		t.Fatal(err)
	}
	cmd = start()
	clustertest.Eventually(t, time.Minute, "the when run after the restart", func(context.Context) (bool, error) { return len(ran()) == 1, nil })
	time.Sleep(2 * time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd = start()
	time.Sleep(5 * time.Second)
	if got := ran(); len(got) != 1 || !strings.HasSuffix(got[0], "/opened/when/1") {
		t.Errorf("keys %v; want one run, key .../opened/when/1", got)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}
