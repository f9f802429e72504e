package engine

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/run"
)

// Stubs replaces the actions of handlers (package run's Stubs).
type Stubs = run.Stubs

// newRunner returns the runner of an operator's handlers, with each
// handler's executor, whose runs last until ctx ends. mem is the
// operator's per-object memory; nil for a new one.
func newRunner(ctx context.Context, d *definition.Definition, e *Engine, rec events.EventRecorder, mem *run.Memory) (*run.Runner, error) {
	reader := e.mgr.GetAPIReader()
	secret := func(ctx context.Context, namespace, name, key string) (string, error) {
		v, err := secretValue(ctx, reader, namespace, name, key)
		return string(v), err
	}
	execs := executor.Registry{
		"exec": func(h *definition.Handler) executor.Executor {
			if h.RunnerExec != nil && e.opts.Runners != nil {
				return &executor.InImage{Action: *h.RunnerExec, Operator: d.Operator.Name, Runners: e.opts.Runners, Secret: secret, Credentials: e.credentials}
			}
			return executor.Local(executor.Exec{Action: *h.Exec, Secret: secret, Credentials: e.credentials}, e.mgr.GetLogger().WithValues("operator", d.Operator.Name, "handler", h.Name))
		},
		"http": func(h *definition.Handler) executor.Executor {
			return &executor.HTTP{Action: *h.HTTP, Secret: secret}
		},
		"job": func(h *definition.Handler) executor.Executor {
			return &executor.Job{
				Action: *h.Job, Client: e.clientset, Tolerations: e.opts.JobTolerations,
				Labels: map[string]string{definition.OperatorLabel: d.Operator.Name},
			}
		},
	}
	byHandler := map[string]executor.Executor{}
	for _, h := range d.Handlers {
		ex, err := execs.For(h)
		if err != nil {
			return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
		byHandler[h.Name] = ex
	}
	// A Serve handler's processes start with its operator, so that its
	// first runs wait for none; with stubs (opkit test) a stub may stand
	// for the handler, and none starts before a run.
	if e.opts.Stubs == nil {
		executor.WarmAll(ctx, byHandler)
	}
	// A Serve handler's processes live as long as the runner: they are
	// stopped when ctx ends (the operator stops, or is changed).
	go func() {
		<-ctx.Done()
		executor.CloseAll(byHandler)
	}()
	return run.New(ctx, run.Config{
		Def: d, Archive: e.opts.Archive, Client: e.client, Events: rec, Execs: byHandler, Stubs: e.opts.Stubs, Memory: mem,
		MaxConcurrentRuns: e.opts.MaxConcurrentRuns, ConsoleURL: e.opts.ConsoleURL, RunEvents: e.opts.RunEvents, RunFinished: e.opts.RunFinished,
		Clock: e.opts.Clock, Steps: &e.clockSteps, Namespace: e.opts.Namespace, Log: e.mgr.GetLogger(),
	}), nil
}

// secretValue reads a Secret's key with reader, from the API server
// (Secrets are not cached), without surrounding space: a secret written
// with a trailing newline is the same secret.
func secretValue(ctx context.Context, reader client.Reader, namespace, name, key string) ([]byte, error) {
	var s corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, err
	}
	v, ok := s.Data[key]
	if !ok {
		return nil, fmt.Errorf("no key %q", key)
	}
	return bytes.TrimSpace(v), nil
}
