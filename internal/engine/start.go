package engine

import (
	"context"

	"k8s.io/client-go/tools/events"

	"github.com/opkit-dev/opkit/internal/calendar"
	"github.com/opkit-dev/opkit/internal/converge"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/watch"
)

// Each operator is run by the package of its kind, given what it needs of
// the engine through a Config: an operator with a custom resource by a
// controller of package converge (and, with spec.rollout, the rollout of
// package rollout inside it), a watch (spec.watch) by package watch, and
// one with neither by a calendar of its operator-wide schedules (package
// calendar), which also takes the requests to run one now that the
// Operator watch hands it (takeRunNow). The engine makes each Config once
// (drivers), gives each operator its runner (runners.go), and keeps what
// it started (running.go).

// drivers are the Configs of the packages that run operators, the same
// for every operator (a rollout's, which names its operator, is made for
// each: rolloutConfig).
type drivers struct {
	converge converge.Config
	watch    watch.Config
	calendar calendar.Config
}

// newDrivers makes the drivers' Configs of e, whose manager and clients
// are made.
func newDrivers(e *Engine) drivers {
	log, rec := e.mgr.GetLogger(), e.mgr.GetEventRecorder("opkit")
	return drivers{
		converge: converge.Config{
			Client: e.client, Reader: e.mgr.GetAPIReader(), Cache: e.mgr.GetCache(), Scheme: e.mgr.GetScheme(), Mapper: e.mgr.GetRESTMapper(),
			REST: e.opts.Config, Metadata: e.metadata, Events: rec, Log: log,
			Namespace: e.opts.Namespace, RunWait: e.opts.RunWait, Workers: e.opts.Workers, MaxConcurrentRuns: e.opts.MaxConcurrentRuns,
			Queue:     e.queues.Options,
			Lifecycle: lifecycle.Options{Archive: e.opts.Archive, Clock: e.opts.Clock, Client: e.client, ConsoleURL: e.opts.ConsoleURL},
			NewRunner: func(ctx context.Context, d *definition.Definition, rec events.EventRecorder, mem *run.Memory) (*run.Runner, error) {
				return newRunner(ctx, d, e, rec, mem)
			},
		},
		watch: watch.Config{
			RESTConfig: e.opts.Config, Scheme: e.mgr.GetScheme(), Mapper: e.mgr.GetRESTMapper(),
			Reader: e.mgr.GetAPIReader(), Client: e.client, Clientset: e.clientset,
			Archive: e.opts.Archive, Log: log, Events: rec,
			Namespace: e.opts.Namespace,
			RunWait:   e.opts.RunWait, Workers: e.opts.Workers, MaxConcurrentRuns: e.opts.MaxConcurrentRuns, Controller: e.queues.Options,
		},
		calendar: calendar.Config{
			Archive: e.opts.Archive, Clock: e.opts.Clock, Steps: &e.clockSteps, Log: log,
			Events: rec, Client: e.client,
		},
	}
}

// watchConfig is the Config of d's watch: it watches its definition's
// namespaces (none: all), or the engine's one namespace.
func (ds drivers) watchConfig(d *definition.Definition) watch.Config {
	cfg := ds.watch
	cfg.Namespaces = d.Watch.Namespaces
	if cfg.Namespace != "" {
		cfg.Namespaces = []string{cfg.Namespace}
	}
	return cfg
}

// start starts d's operator, as its kind says, until the engine stops
// or the operator is stopped; a watch's on opened, its cache (nil: one
// it opens), which it closes when it fails.
func (e *Engine) start(d *definition.Definition, opened *watch.Opened) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	op := &operator{def: d, cancel: cancel}
	var err error
	switch {
	case d.Watch != nil:
		if op.runner, err = newRunner(ctx, d, e, e.drivers.watch.Events, nil); err == nil {
			op.done, err = watch.Start(ctx, e.drivers.watchConfig(d), d, op.runner, opened)
		} else if opened != nil {
			opened.Close()
		}
	case d.Calendar():
		if op.runner, err = newRunner(ctx, d, e, e.drivers.calendar.Events, nil); err == nil {
			op.calendar, err = calendar.Start(ctx, e.drivers.calendar, d, op.runner)
		}
		if err == nil {
			op.done = op.calendar.Done()
		}
	default:
		cfg := e.drivers.converge
		cfg.Rollout = e.rolloutConfig(d)
		var c *converge.Controller
		if c, err = converge.Start(ctx, cfg, d); err == nil {
			op.done, op.runner, op.previous, op.conditions, op.rollout = c.Done, c.Runner, c.Previous, c.Conditions, c.Rollout
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return op, nil
}
