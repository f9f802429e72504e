package converge

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/gauges"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/related"
	"github.com/opkit-dev/opkit/internal/rollout"
	"github.com/opkit-dev/opkit/internal/run"
)

// FieldManager is the server-side apply field manager of opkit's writes:
// children, statuses, and what the engine applies (CRDs, policies,
// webhook configurations).
const FieldManager = "opkit"

// Config is what the controller of an operator's custom resources is
// given: the engine's clients and shared cache, and how it makes the
// parts it does not own.
type Config struct {
	Client client.Client // cached reads, writes
	Reader client.Reader // the API, uncached
	// Cache is the shared cache the custom resources, children and
	// related objects are watched through; Scheme and Mapper are its.
	Cache    cache.Cache
	Scheme   *runtime.Scheme
	Mapper   meta.RESTMapper
	REST     *rest.Config       // for a related kind's cache of its own
	Metadata metadata.Interface // writes children and statuses (see apply)
	Events   events.EventRecorder
	Log      logr.Logger
	// Namespace is the engine's one namespace ("" for all): children and
	// related objects elsewhere are refused.
	Namespace string
	// RunWait is how long a reconcile waits for a run it starts.
	RunWait time.Duration
	// Workers reconcile the objects; MaxConcurrentRuns/2 more with a
	// RunWait, as a worker waiting for a run reconciles nothing else.
	Workers, MaxConcurrentRuns int
	// Queue is a controller's options with its reconciler and workers
	// (health.RetryQueues.Options: its queue is retried at once when the
	// API server is back).
	Queue func(r reconcile.Reconciler, workers int) controller.TypedOptions[reconcile.Request]
	// Lifecycle are the options of a life cycle's machine (package
	// lifecycle), Events and Memory aside, which the controller gives.
	Lifecycle lifecycle.Options
	// NewRunner makes the runner of a definition's handlers (package run)
	// with the operator's memory; its runs last until ctx ends.
	NewRunner func(ctx context.Context, d *definition.Definition, events events.EventRecorder, mem *run.Memory) (*run.Runner, error)
	// Rollout is the rollout's Config (package rollout), for an operator
	// with spec.rollout.
	Rollout rollout.Config
}

// Controller is the running controller of one operator's custom
// resources.
type Controller struct {
	// Runner runs the handlers of the definition objects are moved to
	// (the only one, without a rollout under way); Previous those of the
	// definition the objects not moved are on. Either is nil without
	// handlers.
	Runner, Previous *run.Runner
	// Conditions are the custom resources' conditions, for the gauges.
	Conditions *gauges.Table
	// Rollout drives its rollout; nil without spec.rollout.
	Rollout *rollout.Rollout
	// Done is closed once it stopped (ctx ended).
	Done <-chan struct{}
}

// Start starts the controller of d's custom resources, which runs until
// ctx ends. With spec.rollout, a rollout under way (package rollout) runs
// two definitions in it, each object on the one the rollout says.
func Start(ctx context.Context, cfg Config, d *definition.Definition) (*Controller, error) {
	ro, err := rollout.Prepare(ctx, cfg.Rollout, d)
	if err != nil {
		return nil, err
	}
	// One memory and one table of conditions for both definitions of a
	// rollout: an object moved from one to the other keeps what the
	// engine knows of it (its last writes, its run in flight).
	mem, conditions := run.NewMemory(false), gauges.NewTable()
	mem.Also(conditions)
	current := d
	if ro != nil && ro.From() != nil {
		current = ro.From()
	}
	r, err := newReconciler(ctx, cfg, current, mem, conditions)
	if err != nil {
		return nil, err
	}
	reconcilers := []*reconciler{r}
	var top reconcile.Reconciler = r
	pick := func(types.NamespacedName) *reconciler { return r }
	var split *rollout.Split[*reconciler]
	if ro != nil && ro.From() != nil {
		next, err := newReconciler(ctx, cfg, d, mem, conditions)
		if err != nil {
			return nil, err
		}
		split = rollout.NewSplit(r, next, ro.Moved())
		r.rolloutHash, next.rolloutHash = ro.From().Hash(), d.Hash()
		reconcilers = append(reconcilers, next)
		top, pick = split, split.Pick
	} else if ro != nil {
		r.rolloutHash = current.Hash()
	}
	c, err := cfg.watch(ctx, d, top, reconcilers, ro)
	if err != nil {
		return nil, err
	}
	if r.runner.HasDelete() || (split != nil && reconcilers[1].runner.HasDelete()) {
		if err := cfg.startFinalizers(ctx, d, pick); err != nil {
			return nil, err
		}
	}
	done := make(chan struct{})
	out := &Controller{Runner: r.runner, Conditions: conditions, Rollout: ro, Done: done}
	if split != nil {
		out.Runner, out.Previous = reconcilers[1].runner, r.runner
	}
	go func() {
		defer close(done)
		if split != nil {
			go ro.Drive(ctx, split, mem.Newest)
		}
		if err := c.Start(ctx); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			cfg.Log.Error(err, "controller stopped", "operator", d.Operator.Name)
		}
	}()
	return out, nil
}

// watch makes the controller of top, d's reconciler (or the split of a
// rollout's two), and what it watches: the custom resources, each
// reconciler's runs ending, related objects and children, and the
// rollout's moves.
func (cfg Config) watch(ctx context.Context, d *definition.Definition, top reconcile.Reconciler, reconcilers []*reconciler, ro *rollout.Rollout) (controller.TypedController[reconcile.Request], error) {
	r := reconcilers[0]
	workers := run.Workers(cfg.Workers, cfg.MaxConcurrentRuns, r.runWait, r.runner != nil)
	c, err := controller.NewTypedUnmanaged("operator-"+d.Operator.Name, cfg.Queue(top, workers))
	if err != nil {
		return nil, err
	}
	owner := &unstructured.Unstructured{}
	owner.SetGroupVersionKind(d.GVK)
	if err := c.Watch(source.Kind[client.Object](cfg.Cache, owner, &handler.EnqueueRequestForObject{})); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, r := range reconcilers {
		if r.runner != nil {
			// A run's end wakes its object.
			if err := c.Watch(source.Channel(r.runner.Wakes(), &handler.EnqueueRequestForObject{})); err != nil {
				return nil, err
			}
		}
		// A change of a related object reconciles the custom resources
		// that refer to it (watchRelated).
		if err := cfg.watchRelated(ctx, c, r); err != nil {
			return nil, err
		}
		for _, child := range r.def.Children {
			if seen[child.GVK.String()] {
				continue
			}
			seen[child.GVK.String()] = true
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(child.GVK)
			h := handler.EnqueueRequestForOwner(cfg.Scheme, cfg.Mapper, owner, handler.OnlyControllerOwner())
			if err := c.Watch(source.Kind[client.Object](cfg.Cache, obj, h)); err != nil {
				return nil, err
			}
		}
	}
	if ro != nil {
		if err := c.Watch(source.Channel(ro.Moves(), &handler.EnqueueRequestForObject{})); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// newReconciler is the reconciler of d's custom resources, with the
// operator's memory and table of conditions.
func newReconciler(ctx context.Context, cfg Config, d *definition.Definition, mem *run.Memory, conditions *gauges.Table) (*reconciler, error) {
	r := &reconciler{
		def: d, client: cfg.Client, reader: cfg.Reader, scopes: &informer.Scopes{Mapper: cfg.Mapper}, metadata: cfg.Metadata,
		events: cfg.Events, related: related.NewIndex(), conditions: conditions,
		namespace: cfg.Namespace, memory: mem, runWait: cfg.RunWait,
	}
	// The memory forgets an object gone: what the runner and the life
	// cycle keep of it, and what the related index keeps.
	r.memory.Also(r.related)
	lo := cfg.Lifecycle
	lo.Events, lo.Memory = r.events, r.memory
	r.states = lifecycle.New(d, lo)
	if len(d.Handlers) > 0 {
		var err error
		if r.runner, err = cfg.NewRunner(ctx, d, r.events, r.memory); err != nil {
			return nil, err
		}
	}
	return r, nil
}
