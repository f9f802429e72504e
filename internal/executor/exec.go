package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Exec runs a local process: argv only, never a shell. The binding context
// is its stdin, its stdout the result, its stderr the log. It runs in its
// own process group, which is killed as a whole on timeout.
type Exec struct {
	Action v1alpha1.ExecAction
	// KillGrace is the time between SIGTERM and SIGKILL on timeout.
	// Defaults to 2s.
	KillGrace time.Duration
}

// inheritedEnv are the engine's variables a handler sees; nothing else of
// the engine's environment (credentials, kubeconfig) is passed on.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// Run runs the process once.
func (e *Exec) Run(ctx context.Context, req Request) (*Result, error) {
	grace := e.KillGrace
	if grace == 0 {
		grace = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()

	cmd := exec.Command(e.Action.Command[0], e.Action.Command[1:]...)
	cmd.Dir = e.Action.WorkingDir
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env,
		"OPKIT_RUN_ID="+req.RunID, "OPKIT_HANDLER="+req.Handler,
		"OPKIT_TRIGGER="+req.Trigger, "OPKIT_IDEMPOTENCY_KEY="+req.Key)
	for _, v := range e.Action.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	cmd.Stdin = bytes.NewReader(req.Input)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	var kill sync.Once
	killGroup := func() {
		kill.Do(func() {
			go func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				time.Sleep(grace)
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}()
		})
	}
	stdout := &limitedBuffer{limit: MaxResultBytes}
	stdout.onFull = killGroup
	cmd.Stdout = stdout
	stderr := &tailWriter{w: req.Log}
	cmd.Stderr = stderr
	// Descendants that keep the pipes open must not hold the run forever.
	cmd.WaitDelay = grace + time.Second

	if err := cmd.Start(); err != nil {
		return nil, &Failure{Message: fmt.Sprintf("starting %s: %v", e.Action.Command[0], err), Permanent: errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			killGroup()
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	// Whatever the leader did, leave nothing of its group behind.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, &Failure{Message: fmt.Sprintf("timed out after %s; its process group was killed", req.Timeout)}
	case ctx.Err() != nil:
		return nil, &Failure{Message: "cancelled: the engine is stopping"}
	case stdout.overflow:
		return nil, &Failure{Message: fmt.Sprintf("stdout exceeded the %d-byte limit of a result; the process was killed (write logs to stderr)", MaxResultBytes)}
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return nil, &Failure{Message: fmt.Sprintf("killed by signal %s", ws.Signal())}
		}
		code := exitErr.ExitCode()
		plain := fmt.Sprintf("exit status %d", code)
		if line := stderr.lastLine(); line != "" {
			plain += ": " + line
		}
		return nil, exitFailure(code, stdout.buf.Bytes(), plain)
	}
	if err != nil {
		return nil, &Failure{Message: err.Error()}
	}
	return ParseResult(stdout.buf.Bytes())
}
