package executor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// Exec runs a local process: argv only, never a shell. The binding context
// is its stdin, its stdout the result, its stderr the log. It runs in its
// own process group, which is killed as a whole on timeout.
//
// A process that has exited is judged by its exit, however late it is
// looked at (an engine stopped with SIGSTOP, a suspended laptop): only a
// process still running when its time is up is killed and timed out.
//
// Environment variables from Secrets are read at each run; their values
// are replaced by *** in the log (and so in the run's error), as the
// handler writes it.
type Exec struct {
	Action v1alpha1.ExecAction
	// KillGrace is the time between SIGTERM and SIGKILL on timeout.
	// Defaults to 2s.
	KillGrace time.Duration
	// Secret reads the values of Action.Env's valueFrom. Required when one
	// is set.
	Secret SecretValue
	// Credentials makes the kubeconfig of Action.ServiceAccount. Required
	// when it is set.
	Credentials Credentials
}

// Credentials gives a run's process access to the cluster as a
// ServiceAccount: a kubeconfig (the API server, its CA, a token valid for
// at least ttl) and the token, which is kept out of the run's log.
type Credentials func(ctx context.Context, namespace, serviceAccount string, ttl time.Duration) (kubeconfig []byte, token string, err error)

// inheritedEnv are the engine's variables a handler sees; nothing else of
// the engine's environment (credentials, kubeconfig) is passed on.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// inherited is inheritedEnv's variables that the engine has.
func inherited() []string {
	var env []string
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Run runs the process once.
func (e *Exec) Run(ctx context.Context, req Request) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	env, hidden, cleanUp, err := e.environment(ctx, req)
	if err != nil {
		return nil, err
	}
	defer cleanUp()
	res, err := e.run(ctx, req, env, hidden)
	return hidden.redactResult(res, err)
}

// environment is the process's environment: the engine's few variables,
// opkit's, the handler's (values from Secrets read now) and a kubeconfig
// for its ServiceAccount, with the values it must not show; cleanUp
// removes the kubeconfig.
func (e *Exec) environment(ctx context.Context, req Request) (env []string, hidden secrets, cleanUp func(), err error) {
	env = inherited()
	env = append(env,
		"OPKIT_RUN_ID="+req.RunID, "OPKIT_HANDLER="+req.Handler,
		"OPKIT_TRIGGER="+req.Trigger, "OPKIT_IDEMPOTENCY_KEY="+req.Key)
	handlers, hidden, err := e.handlerEnv(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	env = append(env, handlers...)
	env = append(env, tracing.Env(ctx)...) // TRACEPARENT, TRACESTATE: the run's span
	cleanUp = func() {}
	if sa := e.Action.ServiceAccount; sa != nil {
		dir, token, err := e.kubeconfig(ctx, req, sa)
		if err != nil {
			return nil, nil, nil, err
		}
		cleanUp = func() { _ = os.RemoveAll(dir) }
		hidden = append(hidden, token)
		env = append(env, "KUBECONFIG="+filepath.Join(dir, "kubeconfig"))
	}
	return env, hidden, cleanUp, nil
}

// handlerEnv is the handler's own environment (Action.Env), its values
// from Secrets read now, and those values, which the run must not show;
// req.Env as it is when set.
func (e *Exec) handlerEnv(ctx context.Context, req Request) (env []string, hidden secrets, err error) {
	if req.Env != nil {
		return req.Env, nil, nil
	}
	for _, v := range e.Action.Env {
		value := v.Value
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
			if value, err = e.secretEnv(ctx, req, v); err != nil {
				return nil, nil, err
			}
			hidden = append(hidden, value)
		}
		env = append(env, v.Name+"="+value)
	}
	return env, hidden, nil
}

// run runs the process, within ctx's deadline (req.Timeout), its log
// written with hidden's values replaced.
func (e *Exec) run(ctx context.Context, req Request, env []string, hidden secrets) (*Result, error) {
	cmd, grace := e.command(env)
	cmd.Stdin = bytes.NewReader(stdinOf(e.Action, req.Input))

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
	redacted := &redactor{w: stderr, hidden: hidden}
	cmd.Stderr = redacted
	// Descendants that keep the pipes open must not hold the run forever.
	cmd.WaitDelay = grace + time.Second

	if err := cmd.Start(); err != nil {
		return nil, e.startFailure(err)
	}
	done := make(chan struct{})
	var killed atomic.Bool
	go func() {
		select {
		case <-ctx.Done():
			// Time is up, or the engine stops; but a process that has
			// exited meanwhile (the engine was paused past the deadline)
			// is left to be judged by its exit.
			if !exited(cmd.Process.Pid) {
				killed.Store(true)
				killGroup()
			}
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	redacted.Flush()
	// Whatever the leader did, leave nothing of its group behind.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	// The first cause is the run's: a process killed for its output, and
	// still dying when its time was up, overflowed.
	switch {
	case stdout.overflow:
		return nil, overflowFailure()
	case killed.Load():
		return nil, endedFailure(ctx, req.Timeout, "; its process group was killed")
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return nil, &Failure{Message: fmt.Sprintf("killed by signal %s", ws.Signal())}
		}
		return nil, exitedFailure(exitErr.ExitCode(), stdout.buf.Bytes(), stderr)
	}
	if err != nil {
		return nil, &Failure{Message: err.Error()}
	}
	return hidden.parseResult(stdout.buf.Bytes())
}

// exitedFailure is the failure of a process that exited with code, not
// 0, having written stdout, and stderr: its result's error, or the exit
// status and the last line of its log.
func exitedFailure(code int, stdout []byte, stderr *tailWriter) *Failure {
	plain := fmt.Sprintf("exit status %d", code)
	if line := stderr.lastLine(); line != "" {
		plain += ": " + line
	}
	return exitFailure(code, stdout, plain)
}

// command is the handler's process with env, not started: argv only, in
// a process group of its own, killed by the kernel if the engine dies;
// and the time between SIGTERM and SIGKILL when it is stopped.
func (e *Exec) command(env []string) (*exec.Cmd, time.Duration) {
	cmd := exec.Command(e.Action.Command[0], e.Action.Command[1:]...)
	cmd.Dir = e.Action.WorkingDir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, cmp.Or(e.KillGrace, 2*time.Second)
}

// overflowFailure is the failure of a process that wrote more than a
// result's limit on stdout, and was killed for it.
func overflowFailure() *Failure {
	return &Failure{Message: fmt.Sprintf("stdout exceeded the %d-byte limit of a result; the process was killed (write logs to stderr)", MaxResultBytes)}
}

// endedFailure is the failure of a run that ctx ended: its time, timeout,
// was up (what follows says what became of it), or the engine stops.
func endedFailure(ctx context.Context, timeout time.Duration, after string) *Failure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Failure{Message: fmt.Sprintf("timed out after %s%s", timeout, after)}
	}
	return &Failure{Message: "cancelled: the engine is stopping"}
}

// startFailure is the failure of a process that did not start: permanent
// when no retry can start it (no such program, not executable).
func (e *Exec) startFailure(err error) *Failure {
	return &Failure{Message: fmt.Sprintf("starting %s: %v", e.Action.Command[0], err), Permanent: errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)}
}

// exited reports whether the child process has exited: it waits to be
// reaped (looked at without reaping it, which Wait does), or Wait has
// reaped it already.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return true
	}
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

// secretEnv reads an environment variable's value from its Secret: in the
// object's namespace unless the reference names one. A missing Secret or
// key fails the run, to be retried: it may be created meanwhile.
func (e *Exec) secretEnv(ctx context.Context, req Request, v v1alpha1.EnvVar) (string, error) {
	ref := v.ValueFrom.SecretKeyRef
	ns := req.namespaceOr(ref.Namespace)
	if e.Secret == nil || ns == "" {
		return "", &Failure{Message: fmt.Sprintf("env %s: no Secret reader, or no namespace for Secret %s", v.Name, ref.Name), Permanent: true}
	}
	value, err := e.Secret(ctx, ns, ref.Name, ref.Key)
	if err != nil {
		return "", &Failure{Message: fmt.Sprintf("env %s: reading key %q of Secret %s/%s: %v", v.Name, ref.Key, ns, ref.Name, err)}
	}
	return value, nil
}

// kubeconfig writes the run's kubeconfig for a ServiceAccount into a new
// private directory (0700; the file 0600), which the caller removes when
// the run ends.
func (e *Exec) kubeconfig(ctx context.Context, req Request, sa *v1alpha1.ServiceAccountRef) (dir, token string, err error) {
	config, token, err := e.credentials(ctx, req, sa)
	if err != nil {
		return "", "", err
	}
	ns := req.namespaceOr(sa.Namespace)
	dir, err = os.MkdirTemp("", "opkit-run-")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "kubeconfig"), config, 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", &Failure{Message: fmt.Sprintf("serviceAccount %s/%s: writing the kubeconfig: %v", ns, sa.Name, err)}
	}
	return dir, token, nil
}

// credentials requests the run's kubeconfig and token for a
// ServiceAccount.
func (e *Exec) credentials(ctx context.Context, req Request, sa *v1alpha1.ServiceAccountRef) (config []byte, token string, err error) {
	ns := req.namespaceOr(sa.Namespace)
	if e.Credentials == nil || ns == "" {
		return nil, "", &Failure{Message: fmt.Sprintf("serviceAccount %s: no credentials source, or no namespace", sa.Name), Permanent: true}
	}
	config, token, err = e.Credentials(ctx, ns, sa.Name, req.Timeout)
	if err != nil {
		return nil, "", &Failure{Message: fmt.Sprintf("serviceAccount %s/%s: requesting a token: %v", ns, sa.Name, err)}
	}
	return config, token, nil
}
