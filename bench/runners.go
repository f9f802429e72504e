package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/agent"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// agentRole is roleEnv's value for a process that is opkit's agent (its
// flags those of opkit agent run): the runner scenario's agent, a
// process of its own as in a runner Pod.
const agentRole = "agent"

// agentMain runs the agent, for agentRole, until it is killed.
func agentMain() int {
	var o agent.Options
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&o.Engine, "engine", "", "")
	fs.StringVar(&o.Operator, "operator", "", "")
	fs.StringVar(&o.Image, "image", "", "")
	fs.StringVar(&o.Files, "files", "", "")
	fs.StringVar(&o.CAFile, "ca-file", "", "")
	fs.StringVar(&o.TokenFile, "token-file", "", "")
	fs.IntVar(&o.Parallel, "parallel", 4, "")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	o.Name = os.Getenv("POD_NAME")
	if err := agent.Run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

// serveRunnerSubject is runnerOverhead's handler in exec.mode Serve.
const serveRunnerSubject = "exec mode Serve, a line loop, warm runner"

// runnerOverhead: the exec handler of execOverhead (/bin/echo), and the
// same result from a handler in exec.mode Serve (lineServe, as the
// drains' opkit-serve), each through a warm runner, an agent process of this
// machine pulling from the engine's runner API on loopback (TLS, a
// TokenReview-checked token), against the same handler run by the
// engine-local executor: each one's latency one run at a time, and runs/s
// with 4 at once (the agent's default --parallel).
func (b *bench) runnerOverhead(ctx context.Context) error {
	const runs, parallel, operator, image = 300, 4, "bench", "bench.example/echo:1"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := runners.Serve(ctx, runners.ServeOptions{Addr: "127.0.0.1:0", Namespace: b.c.ns, Client: b.c.cs})
	if err != nil {
		return err
	}
	if err := s.WaitReady(ctx); err != nil {
		return err
	}
	stopAgent, agentLog, err := b.startAgent(ctx, s.Addr(), operator, image, parallel)
	if err != nil {
		return err
	}
	defer stopAgent()

	const result = `{"status": {"touched": true}}`
	input := []byte(`{"trigger":"create","object":{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"p","namespace":"bench"},"spec":{"text":"hello"}}}`)
	run := func(ex executor.Executor, i int) error {
		res, err := ex.Run(ctx, executor.Request{
			RunID: archive.NewID(time.Now()), Handler: "touch", Trigger: "create", Key: fmt.Sprintf("u/%d/touch", i),
			Attempt: 1, Input: input, Timeout: 30 * time.Second, Log: io.Discard,
		})
		if err != nil {
			return err
		}
		if res.Status["touched"] != true {
			return fmt.Errorf("result %+v, want status.touched", res)
		}
		return nil
	}
	latency := func(ex executor.Executor) ([]time.Duration, error) {
		var out []time.Duration
		for i := range runs {
			t0 := time.Now()
			if err := run(ex, i); err != nil {
				return nil, err
			}
			out = append(out, time.Since(t0))
		}
		return out, nil
	}
	rate := func(ex executor.Executor) (float64, error) {
		var wg sync.WaitGroup
		errs := make([]error, parallel)
		t0 := time.Now()
		for w := range parallel {
			wg.Go(func() {
				for i := w; i < runs; i += parallel {
					if err := run(ex, i); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(runs) / time.Since(t0).Seconds(), errors.Join(errs...)
	}
	for _, m := range []struct {
		subject string
		action  v1alpha1.ExecAction
	}{
		{"exec, /bin/echo, warm runner", v1alpha1.ExecAction{Command: []string{"/bin/echo", result}}},
		{serveRunnerSubject, lineServe(result)},
	} {
		local := executor.Local(executor.Exec{Action: m.action}, logr.Discard())
		action := m.action
		action.Image = image
		remote := &executor.InImage{Action: action, Operator: operator, Runners: s}
		// Warm: the agent has connected and taken a run (and, in mode
		// Serve, each side has a process).
		if err := run(remote, -1); err != nil {
			return fmt.Errorf("%s: the first run through the runner (its log: %s): %w", m.subject, agentLog, err)
		}
		if err := run(local, -1); err != nil {
			return fmt.Errorf("%s: the first local run: %w", m.subject, err)
		}
		l, err := latency(local)
		if err != nil {
			return fmt.Errorf("%s, locally: %w", m.subject, err)
		}
		r, err := latency(remote)
		if err != nil {
			return fmt.Errorf("%s, through the runner (its log: %s): %w", m.subject, agentLog, err)
		}
		lRate, err := rate(local)
		if err != nil {
			return fmt.Errorf("%s, locally: %w", m.subject, err)
		}
		rRate, err := rate(remote)
		if err != nil {
			return fmt.Errorf("%s, through the runner (its log: %s): %w", m.subject, agentLog, err)
		}
		executor.CloseAll(map[string]executor.Executor{"touch": local})
		b.add("handlers", m.subject, "local exec p50", "ms", percentile(l, 50))
		b.addLatencies("", "handlers", m.subject, "runner", r, 50, 99)
		b.add("handlers", m.subject, "overhead p50", "ms", percentile(r, 50)-percentile(l, 50))
		b.add("handlers", m.subject, "overhead p99", "ms", percentile(r, 99)-percentile(l, 99))
		b.add("handlers", m.subject, fmt.Sprintf("local exec runs/s, %d at once", parallel), "/s", lRate)
		b.add("handlers", m.subject, fmt.Sprintf("runner runs/s, %d at once", parallel), "/s", rRate)
		b.add("handlers", m.subject, "runner/local runs/s", "ratio", rRate/lRate)
	}
	return nil
}

// startAgent starts an agent process of this machine for the runs of
// operator's handlers of image, pulling from the runner API at addr once
// the engine has published its CA, with a token of the operator's runner
// ServiceAccount; stop kills it and waits for it; log is its log file.
func (b *bench) startAgent(ctx context.Context, addr, operator, image string, parallel int) (stop func(), log string, err error) {
	dir, err := os.MkdirTemp(b.workDir, "runner-")
	if err != nil {
		return nil, "", err
	}
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		return nil, "", err
	}
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := b.runnerCredentials(ctx, runners.ServiceAccountPrefix+operator, caFile, tokenFile); err != nil {
		return nil, "", err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	logFile, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = logFile.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, exe, "--engine=https://"+addr, "--operator="+operator, "--image="+image,
		"--files="+files, "--ca-file="+caFile, "--token-file="+tokenFile, fmt.Sprintf("--parallel=%d", parallel))
	cmd.Env = append(os.Environ(), roleEnv+"="+agentRole, "POD_NAME=bench-runner")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, "", err
	}
	return func() { cancel(); _ = cmd.Wait() }, logFile.Name(), nil
}

// runnerCredentials writes the runner API's CA, once the engine has
// published it, and a runner token of serviceAccount (made when missing)
// for the runner audience.
func (b *bench) runnerCredentials(ctx context.Context, serviceAccount, caFile, tokenFile string) error {
	var ca string
	for ca == "" {
		cm, err := b.c.cs.CoreV1().ConfigMaps(b.c.ns).Get(ctx, runners.CAConfigMap, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if cm != nil {
			ca = cm.Data["ca.crt"]
		}
		if ca == "" {
			if !sleep.For(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	sas := b.c.cs.CoreV1().ServiceAccounts(b.c.ns)
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	tr, err := sas.CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{runners.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if err := os.WriteFile(caFile, []byte(ca), 0o600); err != nil {
		return err
	}
	return os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600)
}
