package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// script writes an executable bash script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "handler.sh")
	if err := os.WriteFile(path, []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func runExec(t *testing.T, argv []string, input string, timeout time.Duration) (*Result, string, error) {
	t.Helper()
	var log bytes.Buffer
	e := &Exec{Action: v1alpha1.ExecAction{Command: argv, Env: []v1alpha1.EnvVar{{Name: "GREETING", Value: "hi"}}}, KillGrace: 200 * time.Millisecond}
	res, err := e.Run(context.Background(), Request{RunID: "run1", Handler: "h", Trigger: "create", Key: "uid/1/h", Input: []byte(input), Timeout: timeout, Log: &log})
	return res, log.String(), err
}

func TestExecPassesContextReadsResultAndLogsStderr(t *testing.T) {
	s := script(t, `ctx=$(cat)
echo "got $ctx key=$OPKIT_IDEMPOTENCY_KEY greeting=$GREETING secret=${OPKIT_TEST_SECRET:-none}" >&2
echo '{"status": {"announced": true}, "events": [{"reason": "Announced", "message": "hello"}], "requeueAfter": "30s"}'`)
	t.Setenv("OPKIT_TEST_SECRET", "leaked")
	res, log, err := runExec(t, []string{s}, `{"object":1}`, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if log != "got {\"object\":1} key=uid/1/h greeting=hi secret=none\n" {
		t.Errorf("log %q", log)
	}
	if res.Status["announced"] != true || len(res.Events) != 1 || res.Events[0].Type != "Normal" || res.RequeueDuration() != 30*time.Second {
		t.Errorf("result %+v", res)
	}
}

func TestExecNeverUsesAShell(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "pwned")
	hostile := []string{"$(touch " + marker + ")", "; touch " + marker, "`touch " + marker + "`", "a\nb", "$HOME", "'\""}
	s := script(t, `for a in "$@"; do printf '%s\0' "$a" >&2; done`)
	_, log, err := runExec(t, append([]string{s}, hostile...), "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(log, "\x00"), "\x00"); strings.Join(got, "|") != strings.Join(hostile, "|") {
		t.Errorf("arguments arrived as %q, want %q", got, hostile)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an argument was run by a shell")
	}
}

func TestExecFailuresAreClear(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	for _, c := range []struct {
		name, body string
		timeout    time.Duration
		want       string
		permanent  bool
	}{
		{"exit 1", "echo working >&2; printf '\\033[31mboom: no disk\\033[0m\\n\\n' >&2; exit 1", 0, "exit status 1: boom: no disk", false},
		{"exit 1, silent", "exit 1", 0, "exit status 1", false},
		{"exit 75", "exit 75", 0, "exit status 75: temporary failure", false},
		{"not JSON", "echo 'hello world'", 0, `output is not a JSON result`, false},
		{"two values", `echo '{} {}'`, 0, "more than one JSON value", false},
		{"unknown field", `echo '{"stauts": {}}'`, 0, `invalid result: unknown field "stauts": a result has status, events, requeueAfter, skipped and error`, false},
		{"status not an object", `echo '{"status": "done"}'`, 0, `invalid result: field "status": expected an object of status fields, e.g. "status": {"phase": "done"}, got a string`, false},
		{"event reason a number", `echo '{"events": [{"reason": 5}]}'`, 0, `invalid result: field "events.reason": expected a string, e.g. "Done", got a number`, false},
		{"requeueAfter a number", `echo '{"requeueAfter": 30}'`, 0, `invalid result: field "requeueAfter": expected a duration as a string, e.g. "requeueAfter": "30s", got a number`, false},
		{"a status 10,000 deep", `printf '{"status":{"x":'; head -c 10000 /dev/zero | tr '\0' '['; head -c 10000 /dev/zero | tr '\0' ']'; printf '}}'`, 0,
			`invalid result: nested deeper than 100 objects and arrays (at byte 113); opkit reads a result at most 100 deep; output begins "{\"status\":{\"x\":[[[`, false},
		{"reserved status", `echo '{"status": {"conditions": []}}'`, 0, "status.conditions is written by opkit", false},
		{"bad event", `echo '{"events": [{"type": "Loud", "reason": ""}]}'`, 0, `events[0].type "Loud" is not Normal or Warning; events[0].reason is required`, false},
		{"huge stdout", "head -c 52428800 /dev/zero; sleep 3600", 0, "stdout exceeded the 1048576-byte limit", false},
		{"signal", "kill -9 $$", 0, "killed by signal killed", false},
		{"timeout", "sleep 3600 & echo $! > " + pidFile + "; wait", 500 * time.Millisecond, "timed out after 500ms; its process group was killed", false},
		{"permanent", `echo '{"error": {"message": "bad spec", "permanent": true}}'; exit 1`, 0, "exit status 1: bad spec", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A case that waited for its process's sleep, or for its
			// own timeout, would take an hour: half of it tells, on a
			// machine however loaded, without a bound on its speed.
			timeout := c.timeout
			if timeout == 0 {
				timeout = time.Hour
			}
			start := time.Now()
			_, _, err := runExec(t, []string{script(t, c.body)}, "{}", timeout)
			if err == nil {
				t.Fatal("succeeded")
			}
			f := AsFailure(err)
			if !strings.Contains(f.Message, c.want) || f.Permanent != c.permanent {
				t.Errorf("failure %q permanent %v; want %q permanent %v", f.Message, f.Permanent, c.want, c.permanent)
			}
			if took := time.Since(start); took > time.Hour/2 {
				t.Errorf("took %s: it waited for the process to end or time out", took)
			}
		})
	}
	// The timed-out handler's background child died with its group.
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	deadline := time.Now().Add(2 * time.Minute) // long: the child sleeps an hour
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the handler's child %d outlived the timeout", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestExecMissingProgramIsPermanent(t *testing.T) {
	_, _, err := runExec(t, []string{filepath.Join(t.TempDir(), "nosuch")}, "", time.Second)
	if f := AsFailure(err); !f.Permanent || !strings.Contains(f.Message, "nosuch") {
		t.Errorf("failure %+v, want a permanent one naming the program", f)
	}
}

func TestExecSecretEnvIsReadAtEachRunAndNeverLogged(t *testing.T) {
	const value = "s3cr3t-t0ken"
	var reads []string
	e := &Exec{
		Action: v1alpha1.ExecAction{
			// The value is written whole, then split across two writes, then
			// in the message of a failure.
			Command: []string{script(t, `echo "token=$TOKEN" >&2
printf '%s' "${TOKEN:0:5}" >&2; sleep 0.2; printf '%s\n' "${TOKEN:5}" >&2
echo "{\"error\": {\"message\": \"refused $TOKEN\"}}"; exit 1`)},
			Env: []v1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "api", Key: "token"}}}},
		},
		Secret: func(_ context.Context, namespace, name, key string) (string, error) {
			reads = append(reads, namespace+"/"+name+"/"+key)
			return value, nil
		},
	}
	var log bytes.Buffer
	obj := &ObjectRef{Namespace: "shop", Name: "cart"}
	_, err := e.Run(context.Background(), Request{RunID: "r", Handler: "h", Key: "k", Object: obj, Input: []byte("{}"), Timeout: 10 * time.Second, Log: &log})
	if strings.Join(reads, ",") != "shop/api/token" {
		t.Errorf("Secret reads %v, want shop/api/token (the object's namespace)", reads)
	}
	if strings.Contains(log.String(), "s3cr3t") || log.String() != "token=***\n***\n" {
		t.Errorf("log %q, want the value replaced by ***", log.String())
	}
	if f := AsFailure(err); f == nil || strings.Contains(f.Message, "s3cr3t") {
		t.Errorf("failure %v: want one, without the value", err)
	}

	// A Secret not there (yet) fails the run, to be retried.
	e.Secret = func(context.Context, string, string, string) (string, error) {
		return "", errors.New(`secrets "api" not found`)
	}
	_, err = e.Run(context.Background(), Request{RunID: "r", Handler: "h", Key: "k", Object: obj, Input: []byte("{}"), Timeout: 10 * time.Second, Log: &log})
	if f := AsFailure(err); f == nil || f.Permanent || !strings.Contains(f.Message, `env TOKEN: reading key "token" of Secret shop/api`) {
		t.Errorf("failure %+v, want a retried one naming the variable and the Secret", f)
	}
}

func TestRedactorReplacesAValueSplitAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	r := &redactor{w: &out, hidden: secrets{"hunter2", "", "pw"}}
	for _, b := range []byte("a hunter2 b hunte") {
		if _, err := r.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Write([]byte("r2pw hunt")); err != nil {
		t.Fatal(err)
	}
	r.Flush()
	if got, want := out.String(), "a *** b ****** hunt"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestExecAHandlerThatExitedWhileTheEngineWasStoppedIsJudgedByItsExit
// stops an engine (a child test process) with SIGSTOP while its handler
// runs, past the handler's timeout; the handler finishes meanwhile. On
// SIGCONT the run succeeds: it is not timed out, nor run again.
func TestExecAHandlerThatExitedWhileTheEngineWasStoppedIsJudgedByItsExit(t *testing.T) {
	if os.Getenv("OPKIT_STOPPED_ENGINE") != "" {
		stoppedEngine()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecAHandlerThatExitedWhileTheEngineWasStoppedIsJudgedByItsExit$", "-test.count=1")
	started := filepath.Join(t.TempDir(), "started")
	cmd.Env = append(os.Environ(), "OPKIT_STOPPED_ENGINE="+script(t, `touch `+started+`; sleep 0.5; echo '{"status": {"done": true}}'`))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := bufio.NewScanner(stdout)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler did not start")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // past the 3s timeout; the handler has exited
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var outcome string
	for lines.Scan() {
		if o, ok := strings.CutPrefix(lines.Text(), "outcome: "); ok {
			outcome = o
		}
	}
	_ = cmd.Wait()
	if outcome != "succeeded" {
		t.Errorf("the run's outcome: %q, want succeeded", outcome)
	}
}

// stoppedEngine runs the handler named by OPKIT_STOPPED_ENGINE with a 3s
// timeout and prints its outcome.
func stoppedEngine() {
	e := &Exec{Action: v1alpha1.ExecAction{Command: []string{os.Getenv("OPKIT_STOPPED_ENGINE")}}}
	res, err := e.Run(context.Background(), Request{RunID: "r", Handler: "h", Key: "k", Input: []byte("{}"), Timeout: 3 * time.Second, Log: io.Discard})
	switch {
	case err != nil:
		fmt.Println("outcome: " + err.Error())
	case res.Status["done"] != true:
		fmt.Printf("outcome: result %+v\n", res)
	default:
		fmt.Println("outcome: succeeded")
	}
}

func TestAnAdmissionAnswerNeverCarriesASecretsValue(t *testing.T) {
	const value = "s3cr3t-t0ken"
	e := &Exec{
		Action: v1alpha1.ExecAction{
			Command: []string{script(t, `echo "{\"allowed\": false, \"message\": \"bad $TOKEN\", \"warnings\": [\"w $TOKEN\"], \"patch\": {\"metadata\": {\"annotations\": {\"a\": \"$TOKEN\"}}}}"`)},
			Env:     []v1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "api", Key: "token"}}}},
		},
		Secret: func(context.Context, string, string, string) (string, error) { return value, nil },
	}
	res, err := e.Run(context.Background(), Request{RunID: "r", Handler: "h", Key: "k", Object: &ObjectRef{Namespace: "shop", Name: "cart"}, Input: []byte("{}"), Timeout: 10 * time.Second, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := json.Marshal(res); strings.Contains(string(out), "s3cr3t") || res.Message != "bad ***" {
		t.Errorf("the answer %s shows the Secret's value", out)
	}
}
