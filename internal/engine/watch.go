package engine

import (
	"context"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/watch"
)

// A watch operator (spec.watch) is internal/watch's: the engine gives it
// a runner and what it needs of the engine.

// watchConfig is what the watch of d needs of the engine.
func (e *Engine) watchConfig(d *definition.Definition) watch.Config {
	return watch.Config{
		RESTConfig: e.opts.Config, Scheme: e.mgr.GetScheme(), Mapper: e.mgr.GetRESTMapper(),
		Reader: e.mgr.GetAPIReader(), Client: e.client, Clientset: e.clientset,
		Archive: e.opts.Archive, Log: e.mgr.GetLogger(), Events: e.mgr.GetEventRecorder("opkit"),
		Namespace: e.opts.Namespace, Namespaces: e.watchNamespaces(d.Watch),
		RunWait: e.opts.RunWait, Workers: e.opts.Workers, Controller: e.queues.Options,
	}
}

// startWatch starts a watch operator.
func (e *Engine) startWatch(d *definition.Definition) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	rn, err := newRunner(ctx, d, e, e.mgr.GetEventRecorder("opkit"), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	done, err := watch.Start(ctx, e.watchConfig(d), d, rn)
	if err != nil {
		cancel()
		return nil, err
	}
	return &operator{def: d, cancel: cancel, done: done, runner: rn}, nil
}

// checkWatch refuses a watch of a kind the cluster does not serve or the
// engine may not get, list and watch where it watches (watch.Check).
func (e *Engine) checkWatch(ctx context.Context, d *definition.Definition) error {
	return watch.Check(ctx, e.watchConfig(d), d)
}
