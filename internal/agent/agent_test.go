package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
)

// TestMain runs the tests against the local plane; with
// OPKIT_TEST_AGENT set, the test binary is an agent process instead
// (re-executed by a test, to be killed).
func TestMain(m *testing.M) {
	if os.Getenv("OPKIT_TEST_AGENT") != "" {
		err := Run(context.Background(), Options{
			Engine: os.Getenv("OPKIT_AGENT_ENGINE"), Operator: os.Getenv("OPKIT_AGENT_OPERATOR"), Image: os.Getenv("OPKIT_AGENT_IMAGE"),
			Name: os.Getenv("POD_NAME"), Files: os.Getenv("OPKIT_AGENT_FILES"), CAFile: os.Getenv("OPKIT_AGENT_CA_FILE"),
			TokenFile: os.Getenv("OPKIT_AGENT_TOKEN_FILE"), Parallel: 1,
		})
		if err != nil {
			_, _ = os.Stderr.WriteString(err.Error() + "\n")
			clustertest.Exit(1)
		}
		clustertest.Exit(0)
	}
	clustertest.Main(m)
}

const image = "python:3.12-slim"

// rig is an engine's runner API on the plane, and what an agent needs to
// reach it as operator demo's runner.
type rig struct {
	env     *clustertest.Env
	client  kubernetes.Interface
	serving *runners.Serving
	files   string // the operator's files
	caFile  string
}

func newRig(t testing.TB) *rig {
	t.Helper()
	env := clustertest.New(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runners.Serve(t.Context(), runners.ServeOptions{
		Addr: "127.0.0.1:0", Namespace: env.Namespace, Client: client, LostAfter: 2 * time.Second, PollFor: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := &rig{env: env, client: client, serving: s, files: t.TempDir()}
	// The CA runners trust is the one the engine published.
	var cm *corev1.ConfigMap
	clustertest.Eventually(t, 30*time.Second, "the engine publishes its CA", func(ctx context.Context) (bool, error) {
		var err error
		cm, err = client.CoreV1().ConfigMaps(env.Namespace).Get(ctx, runners.CAConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] != "", nil
	})
	r.caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(r.caFile, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// token is a token of serviceAccount (made when missing) for audience, in
// a file.
func (r *rig) token(t testing.TB, serviceAccount, audience string) string {
	t.Helper()
	sas := r.client.CoreV1().ServiceAccounts(r.env.Namespace)
	if _, err := sas.Get(t.Context(), serviceAccount, metav1.GetOptions{}); err != nil {
		if _, err := sas.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := sas.CreateToken(t.Context(), serviceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (r *rig) options(name, tokenFile string) Options {
	return Options{Engine: "https://" + r.serving.Addr(), Operator: "demo", Image: image, Name: name, Files: r.files,
		CAFile: r.caFile, TokenFile: tokenFile, Parallel: 2, Beat: 300 * time.Millisecond, KillGrace: 200 * time.Millisecond}
}

// startAgent runs an agent in this process until the test ends.
func (r *rig) startAgent(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := Run(ctx, r.options(name, r.token(t, "opkit-runner-demo", runners.Audience))); err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// script writes an executable handler into the operator's files.
func (r *rig) script(t testing.TB, name, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(r.files, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.files, "hooks", name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func request(log *bytes.Buffer, timeout time.Duration) executor.Request {
	return executor.Request{RunID: "r1", Handler: "h", Trigger: "create", Key: "u/1/h", Attempt: 1, Input: []byte(`{"object":{"spec":{"n":3}}}`), Timeout: timeout, Log: log}
}

func TestARunThroughAnAgentEndsAsTheSameLocalExecRunEnds(t *testing.T) {
	r := newRig(t)
	r.startAgent(t, "runner-a")
	r.script(t, "ok.sh", `read -r input; echo "saw $input $OPKIT_RUN_ID $GREETING" >&2; printf '{"status":{"seen":"%s"}}' "$(pwd)"`)
	r.script(t, "fails.sh", `echo "about to fail" >&2; echo "no such thing" >&2; exit 3`)
	r.script(t, "slow.sh", `echo "sleeping" >&2; sleep 30`)
	r.script(t, "temporary.sh", `exit 75`)
	// A handler written for exec.mode Serve: a line at a time.
	r.script(t, "serve.sh", `while read -r line; do echo "$line" >&2; echo '{"status":{"seen":"a line"}}'; done`)
	cases := []struct {
		name    string
		command string
		timeout time.Duration
		mode    v1alpha1.ExecMode
	}{
		{"a result on stdout, the log on stderr", "./hooks/ok.sh", 10 * time.Second, ""},
		{"a non-zero exit", "./hooks/fails.sh", 10 * time.Second, ""},
		{"exit status 75", "./hooks/temporary.sh", 10 * time.Second, ""},
		{"a timeout", "./hooks/slow.sh", time.Second, ""},
		// Through the agent, in a process it keeps (locally, Exec: a process
		// per run, its one line, ended); the same answer.
		{"a Serve handler", "./hooks/serve.sh", 10 * time.Second, v1alpha1.ExecServe},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			action := v1alpha1.ExecAction{Command: []string{c.command}, Image: image, Env: []v1alpha1.EnvVar{{Name: "GREETING", Value: "hello"}}, Mode: c.mode}
			var remoteLog, localLog bytes.Buffer
			remote := &executor.InImage{Action: action, Operator: "demo", Runners: r.serving}
			gotRes, gotErr := remote.Run(t.Context(), request(&remoteLog, c.timeout))
			localAction := action
			localAction.Command = []string{filepath.Join(r.files, c.command)}
			localAction.WorkingDir = r.files
			local := &executor.Exec{Action: localAction, KillGrace: 200 * time.Millisecond}
			wantRes, wantErr := local.Run(t.Context(), request(&localLog, c.timeout))
			if msg(gotErr) != msg(wantErr) || fail(gotErr) != fail(wantErr) {
				t.Errorf("through the agent: error %v (%+v); locally: %v (%+v)", gotErr, fail(gotErr), wantErr, fail(wantErr))
			}
			if status(gotRes) != status(wantRes) {
				t.Errorf("through the agent: result %v; locally %v", status(gotRes), status(wantRes))
			}
			if c.mode == v1alpha1.ExecServe && !strings.Contains(status(gotRes), "a line") {
				t.Errorf("through the agent, a Serve handler answered %v; want its answer to the line", status(gotRes))
			}
			if !strings.Contains(remoteLog.String(), localLog.String()) || !strings.Contains(remoteLog.String(), "opkit: runner runner-a runs it") {
				t.Errorf("through the agent, the log is\n%s\nwant the local one\n%s\nand the runner's name", remoteLog.String(), localLog.String())
			}
		})
	}
}

// A Serve handler in a runner keeps its process between runs, as the
// engine's own Serve does locally; a run whose environment differs (a
// Secret's value rotated) is answered by a new process.
func TestAServeHandlerInARunnerKeepsItsProcessBetweenRuns(t *testing.T) {
	r := newRig(t)
	r.startAgent(t, "runner-s")
	r.script(t, "pid.sh", `while read -r line; do echo "run in $$" >&2; printf '{"status":{"pid":"%s","mode":"%s","greeting":"%s"}}\n' "$$" "$OPKIT_MODE" "$GREETING"; done`)
	run := func(greeting string) map[string]any {
		t.Helper()
		action := v1alpha1.ExecAction{Command: []string{"./hooks/pid.sh"}, Image: image, Mode: v1alpha1.ExecServe, Env: []v1alpha1.EnvVar{{Name: "GREETING", Value: greeting}}}
		var log bytes.Buffer
		res, err := (&executor.InImage{Action: action, Operator: "demo", Runners: r.serving}).Run(t.Context(), request(&log, 10*time.Second))
		if err != nil {
			t.Fatalf("a run of the Serve handler: %v; its log:\n%s", err, log.String())
		}
		if !strings.Contains(log.String(), fmt.Sprintf("run in %v", res.Status["pid"])) {
			t.Errorf("the run's log is\n%s\nwant what its process wrote before it answered", log.String())
		}
		return res.Status
	}
	first, second := run("hello"), run("hello")
	if first["mode"] != "Serve" || first["greeting"] != "hello" {
		t.Errorf("the handler saw OPKIT_MODE %v and GREETING %v; want Serve and hello", first["mode"], first["greeting"])
	}
	if first["pid"] != second["pid"] {
		t.Errorf("two runs answered by processes %v and %v; want one process kept between them", first["pid"], second["pid"])
	}
	third := run("rotated")
	if third["pid"] == second["pid"] || third["greeting"] != "rotated" {
		t.Errorf("after its environment changed, a run answered by process %v (before: %v) with GREETING %v; want a new process that sees the new value", third["pid"], second["pid"], third["greeting"])
	}
}

func msg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func fail(err error) executor.Failure {
	var f *executor.Failure
	if errors.As(err, &f) {
		return *f
	}
	return executor.Failure{}
}

func status(res *executor.Result) string {
	if res == nil {
		return "<nil>"
	}
	return strings.TrimSpace(string(executor.NewReply(res, nil).Result))
}

func TestARunnerWithAnotherAudienceOrServiceAccountIsRefused(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		name, serviceAccount, audience, want string
	}{
		{"another audience", "opkit-runner-demo", "https://kubernetes.default.svc", "401 Unauthorized"},
		{"another operator's runners", "opkit-runner-other", runners.Audience, "403 Forbidden: ServiceAccount " + r.env.Namespace + ":opkit-runner-other may not run operator demo's handlers"},
		{"any ServiceAccount", "default", runners.Audience, "403 Forbidden"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := newAgent(r.options("runner-x", r.token(t, c.serviceAccount, c.audience)))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = a.take(t.Context())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("take: %v; want a refusal %q", err, c.want)
			}
		})
	}
}

func TestARunnerKilledMidRunIsCancelledAndItsRunRunsOnceOnAnother(t *testing.T) {
	r := newRig(t)
	started, finished := filepath.Join(r.files, "started"), filepath.Join(r.files, "finished")
	// The first run waits to be killed; the one after it finds it started
	// and ends at once.
	r.script(t, "once.sh", `if [ -e "$STARTED" ]; then echo again >&2; echo x >> "$FINISHED"; echo '{"status":{"ran":"again"}}'; exit 0; fi
: > "$STARTED"; sleep 60; echo x >> "$FINISHED"`)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := r.options("runner-doomed", r.token(t, "opkit-runner-demo", runners.Audience))
	doomed := exec.Command(self)
	doomed.Env = append(os.Environ(), "OPKIT_TEST_AGENT=1", "OPKIT_AGENT_ENGINE="+o.Engine, "OPKIT_AGENT_OPERATOR=demo", "OPKIT_AGENT_IMAGE="+image,
		"POD_NAME=runner-doomed", "OPKIT_AGENT_FILES="+r.files, "OPKIT_AGENT_CA_FILE="+o.CAFile, "OPKIT_AGENT_TOKEN_FILE="+o.TokenFile)
	doomed.Stderr = os.Stderr
	if err := doomed.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = doomed.Process.Kill(); _ = doomed.Wait() })

	action := v1alpha1.ExecAction{Command: []string{"./hooks/once.sh"}, Image: image, Env: []v1alpha1.EnvVar{{Name: "STARTED", Value: started}, {Name: "FINISHED", Value: finished}}}
	run := &executor.InImage{Action: action, Operator: "demo", Runners: r.serving}
	type end struct {
		res *executor.Result
		err error
	}
	first := make(chan end, 1)
	var log bytes.Buffer
	go func() {
		res, err := run.Run(context.WithoutCancel(t.Context()), request(&log, time.Minute))
		first <- end{res, err}
	}()
	clustertest.Eventually(t, 60*time.Second, "the doomed runner starts the run", func(context.Context) (bool, error) {
		_, err := os.Stat(started)
		return err == nil, nil
	})
	if err := doomed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var e end
	select {
	case e = <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end after its runner was killed")
	}
	var interrupted *executor.Interrupted
	if !errors.As(e.err, &interrupted) || !strings.Contains(e.err.Error(), "runner runner-doomed was lost mid-run") {
		t.Fatalf("the run ended %v, %v; want it interrupted, naming the lost runner", e.res, e.err)
	}

	// The engine runs it again with its key: another runner takes it.
	r.startAgent(t, "runner-b")
	var again bytes.Buffer
	res, err := run.Run(t.Context(), request(&again, time.Minute))
	if err != nil || status(res) != `{"status":{"ran":"again"}}` {
		t.Fatalf("run again: %v, %v", status(res), err)
	}
	if !strings.Contains(again.String(), "runner runner-b runs it") {
		t.Errorf("log of the second run:\n%s\nwant runner-b named", again.String())
	}
	// The killed runner's command died with it: it never finished.
	time.Sleep(time.Second)
	if b, _ := os.ReadFile(finished); string(b) != "x\n" {
		t.Errorf("the handler finished %q times; want once (the killed runner's command killed with it)", b)
	}
}

func TestARunTheEngineCancelsHasItsProcessGroupKilledAtOnce(t *testing.T) {
	r := newRig(t)
	r.startAgent(t, "runner-a")
	pids := filepath.Join(r.files, "pids")
	// The command and a child of its own, each sleeping well past the
	// test; their pids written once both run.
	r.script(t, "long.sh", `sleep 300 & echo "$$ $!" > "$PIDS.tmp"; mv "$PIDS.tmp" "$PIDS"; echo "started" >&2; wait`)
	action := v1alpha1.ExecAction{Command: []string{"./hooks/long.sh"}, Image: image, Env: []v1alpha1.EnvVar{{Name: "PIDS", Value: pids}}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var runner string
	ended := make(chan error, 1)
	go func() {
		var log bytes.Buffer
		req := request(&log, 10*time.Minute)
		req.OnRunner = func(name string) { runner = name }
		_, err := (&executor.InImage{Action: action, Operator: "demo", Runners: r.serving}).Run(ctx, req)
		ended <- err
	}()
	var group []int
	clustertest.Eventually(t, 60*time.Second, "the command and its child run", func(context.Context) (bool, error) {
		b, err := os.ReadFile(pids)
		if err != nil {
			return false, nil
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return false, err
			}
			group = append(group, pid)
		}
		return true, nil
	})
	cancel() // the operator is removed, or the engine stops
	cancelled := time.Now()
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "cancelled") {
			t.Errorf("the run ended %v; want it cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end when its context did")
	}
	if runner != "runner-a" {
		t.Errorf("OnRunner was called with %q; want the runner that claimed the run, runner-a", runner)
	}
	clustertest.Eventually(t, 30*time.Second, "the command's process group is killed", func(context.Context) (bool, error) {
		for _, pid := range group {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("the process group was gone %s after the cancel (its timeout: 10m)", time.Since(cancelled).Round(10*time.Millisecond))
}

// alive reports whether a process runs: it exists and is no zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces; the state follows the
	// last parenthesis.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
