package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/admission"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/calendar"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/gauges"
	"github.com/opkit-dev/opkit/internal/health"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/related"
	"github.com/opkit-dev/opkit/internal/rollout"
	"github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/runsserver"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// FieldManager is the server-side apply field manager of every write.
const FieldManager = "opkit"

// Engine runs operators. Use New, then Run in a goroutine, then Apply each
// definition.
type Engine struct {
	opts      Options
	mgr       manager.Manager
	client    client.Client
	clientset kubernetes.Interface
	// metadata is a client whose answers are metadata only.
	metadata  metadata.Interface
	discovery discovery.DiscoveryInterface

	queues  health.RetryQueues    // the controllers' queues, retried at once when the API is back
	archive *health.ArchiveWriter // Options.Archive, or nil
	started chan struct{}         // closed once the cache runs and the engine acts
	// replicaRunning is closed once the manager runs, leader or standby.
	replicaRunning chan struct{}
	ctx            context.Context // the manager's, set before started is closed
	stopped        chan struct{}   // closed when Run returns
	mu             sync.Mutex
	running        map[string]*operator // by Operator name
	health         served               // what /readyz reports (health.go)
	outage         *health.Outage       // the API server away, as watchAPI last found it (apihealth.go)
	// receiver takes the deliveries, the consumed sources' messages and
	// the redeliveries (package delivery); hooksAddr is the hooks
	// listener's address, once bound (hooks.go).
	receiver  *delivery.Receiver
	hooksAddr string
	// webhook serves admission calls (webhooks.go); nil without
	// Options.Webhook. webhookMu orders the writes of its configurations.
	webhook   *webhook.Server
	webhookMu sync.Mutex
	// runsAPI serves the archive to kubectl (runsapi.go); nil without
	// Options.RunsAPI.
	runsAPI *runsserver.Server
	// admission answers the operators' admission calls (package
	// admission). An operator's admitter is replaced whole when its
	// definition is applied, apart from its controller, so that a restart
	// of the controller (which waits for its runs) leaves admission calls
	// answered.
	admission *admission.Server
	// converters answer the operators' conversion calls, by Operator
	// name (convert.go), replaced whole when a definition is applied.
	converters map[string]*converter
	// restarting are the operators between their stop and their start:
	// deliveries for them are answered 503, not 404.
	restarting map[string]bool
	// clockSteps wakes the waits on Options.Clock at ClockStepped (clock.go).
	clockSteps run.ClockSteps
	// migrations are the storage migrations in flight, by CRD (migrate.go).
	migrations migrations
	// redeliveryWakes, once the Redelivery CRD is installed and answered,
	// reads Redeliveries again (wakeRedeliveries).
	redeliveryWakes chan event.GenericEvent
	// rolloutsCRD: the Rollout CRD is installed (installRollouts).
	rolloutsCRD bool
}

// operator is one running controller.
type operator struct {
	def    *definition.Definition
	cancel context.CancelFunc
	done   <-chan struct{} // closed once it stopped
	runner *run.Runner     // nil without handlers
	// events handles the deliveries of its sources; nil without sources.
	events *delivery.Queue
	// consumers take the messages of its consumed sources (package delivery);
	// nil without any.
	consumers *delivery.Consumers
	// conditions are its custom resources' conditions, for the gauges
	// (metrics.go); nil for a watch or a calendar.
	conditions *gauges.Table
	// calendar runs an operator's operator-wide schedules and its
	// requests to run now (internal/calendar); nil for any other operator.
	calendar *calendar.Calendar
	// rollout drives its rollout (internal/rollout); nil without
	// spec.rollout.
	// While one is under way, runner is the new definition's, and
	// previous the runner of the definition the objects not moved are
	// on (nil without handlers); both are stopped, waited for, paused
	// and woken alike.
	rollout  *rollout.Rollout
	previous *run.Runner
}

// runners are the operator's runners: one, two during a rollout.
func (o *operator) runners() []*run.Runner {
	var out []*run.Runner
	for _, rn := range []*run.Runner{o.runner, o.previous} {
		if rn != nil {
			out = append(out, rn)
		}
	}
	return out
}

// New creates an engine; it starts nothing.
func New(opts Options) (*Engine, error) {
	if opts.Config == nil {
		return nil, errors.New("engine: Options.Config is required")
	}
	if opts.Workers == 0 {
		opts.Workers = 8
	}
	if opts.RunWait == 0 {
		opts.RunWait = DefaultRunWait
	}
	if opts.MaxConcurrentRuns == 0 {
		opts.MaxConcurrentRuns = 16
	}
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Config = rest.CopyConfig(opts.Config)
	if opts.Config.QPS == 0 && opts.Config.RateLimiter == nil {
		opts.Config.QPS = -1
	}
	if opts.Config.UserAgent == "" {
		opts.Config.UserAgent = "opkit-engine"
	}
	away := health.NewOutage()
	informers := &informer.Informers{Config: opts.Config, Namespace: opts.Namespace, Outage: away}
	mopts, err := managerOptions(opts, informers, away)
	if err != nil {
		return nil, err
	}
	mgr, err := manager.New(opts.Config, mopts)
	if err != nil {
		return nil, err
	}
	// The cache makes its first informer when an operator starts, after
	// this.
	informers.HTTP, informers.Scopes = mgr.GetHTTPClient(), &informer.Scopes{Mapper: mgr.GetRESTMapper()}
	dc, err := discovery.NewDiscoveryClientForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfigAndClient(opts.Config, mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, outage: away, mgr: mgr, client: mgr.GetClient(), clientset: cs, metadata: md, discovery: dc, started: make(chan struct{}), replicaRunning: make(chan struct{}), stopped: make(chan struct{}), running: map[string]*operator{}, restarting: map[string]bool{}, converters: map[string]*converter{}}
	e.receiver = &delivery.Receiver{ReadSecret: e.readSecret, Log: mgr.GetLogger()}
	e.receiver.Running = e.runningOperator
	if opts.Archive != nil {
		e.receiver.Deliveries, _ = opts.Archive.(archive.DeliveryReader)
		e.archive = health.NewArchiveWriter(opts.Archive, e.notice, handlerMetrics().archiveWritable)
		e.opts.Archive = e.archive
		e.receiver.Archive = e.archive
	}
	e.admission = &admission.Server{Archive: e.opts.Archive, Stubs: opts.Stubs, RunFinished: opts.RunFinished, Logger: mgr.GetLogger(), Reader: mgr.GetAPIReader(), Credentials: e.credentials}
	if err := e.serve(); err != nil {
		return nil, err
	}
	if err := e.publishRunners(); err != nil {
		return nil, err
	}
	if opts.Webhook != nil {
		if e.webhook, err = e.newWebhookServer(); err != nil {
			return nil, err
		}
		if err := mgr.Add(e.webhook); err != nil {
			return nil, err
		}
	}
	if opts.RunsAPI != nil {
		// The archive as given: what the engine records through
		// (e.opts.Archive) does not read.
		if e.runsAPI, err = e.newRunsAPI(opts.Archive); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// managerOptions are the options of the engine's manager: its scheme, its
// cache of compact objects (package informer) held through the outages
// away knows of, leader election, and the checks of opts that need them.
func managerOptions(opts Options, informers *informer.Informers, away *health.Outage) (manager.Options, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return manager.Options{}, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return manager.Options{}, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return manager.Options{}, err
	}
	mopts := manager.Options{
		Scheme: scheme,
		// Client-go's retries of Events are told by the outage's notice.
		Logger: away.QuietLogger(ctrllog.Log),
		// MetricsAddr is served with the health checks (health.go).
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			// Cached objects do not need their managedFields, and
			// unstructured ones are kept compact (see package informer),
			// decoded so straight from their JSON.
			DefaultTransform: informer.Transform,
			NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
				return informers.NewInformer(lw, obj, resync, indexers)
			},
		},
		// Custom resources and children are unstructured: read them from
		// the cache too, which the controllers' watches fill.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	}
	if err := opts.restrictCache(&mopts.Cache); err != nil {
		return manager.Options{}, err
	}
	if le := opts.LeaderElection; le != nil {
		if err := le.configure(&mopts); err != nil {
			return manager.Options{}, err
		}
	}
	if h := opts.HooksEndpoint; h != nil {
		if err := h.Check("the hooks EndpointSlice"); err != nil {
			return manager.Options{}, err
		}
	}
	return mopts, nil
}

// Run runs the engine's cache until ctx ends, then stops every controller.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	handlerMetrics()
	defer gauges.Track(e.gaugeSources)()
	// Runnables run once the engine leads (at once without leader
	// election), but watchAPI, which every replica runs for /readyz.
	if err := e.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		e.leading()
		if e.opts.Archive != nil {
			// The runs a previous engine (or leader) left Running end
			// Cancelled, and run again with their keys.
			if _, err := e.opts.Archive.CancelRunning(ctx, "the engine stopped during the run; it runs again with the same idempotency key, unless its object changed meanwhile: the newer generation's run then takes its place, with its own key (a re-run is not run again: ask for it again)"); err != nil {
				return err
			}
			go e.prune(ctx)
		}
		e.ctx = ctx // the controllers' contexts derive from it
		close(e.started)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	if err := e.mgr.Add(manager.RunnableFunc(e.guardCRDs)); err != nil {
		return err
	}
	if err := e.mgr.Add(everyReplica(e.watchAPI)); err != nil {
		return err
	}
	if err := e.mgr.Add(everyReplica(func(ctx context.Context) error {
		if e.mgr.GetCache().WaitForCacheSync(ctx) {
			close(e.replicaRunning)
		}
		return nil
	})); err != nil {
		return err
	}
	// Run ends the archive refused are written again until the operators
	// have stopped (their last runs end Cancelled), then once more.
	var pending sync.WaitGroup
	stopRetry := func() {}
	if e.archive != nil {
		retryCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopRetry = cancel
		pending.Go(func() { e.archive.RetryPending(retryCtx) })
	}
	err := e.mgr.Start(ctx)
	e.mu.Lock()
	ops := e.running
	e.running = map[string]*operator{}
	e.mu.Unlock()
	e.stopAdmission(ctx)
	for _, op := range ops {
		op.stop()
	}
	e.migrations.wg.Wait() // each saved its progress
	stopRetry()
	pending.Wait()
	return err
}

// schemaResolver returns the schemas the API server publishes
// (/openapi/v3), each group-version fetched once per resolver: a new one
// sees the kinds installed since.
func (e *Engine) schemaResolver() definition.SchemaResolver {
	return &resolver.ClientDiscoveryResolver{Discovery: memory.NewMemCacheClient(e.discovery)}
}

// errStopped is returned by calls made after Run returned.
var errStopped = errors.New("engine: not running")

// waitStarted waits until Run has started the cache.
func (e *Engine) waitStarted(ctx context.Context) error {
	select {
	case <-e.started:
		return nil
	case <-e.stopped:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopGrace bounds the wait for a controller's workers to return once
// stopped. controller-runtime v0.24's priority queue could deadlock when it
// shut down while a worker waited for an item
// (kubernetes-sigs/controller-runtime#3538): that worker never returned,
// and a stop waited for it for good. The version now in go.mod (v0.25.2)
// has the fix (#3540: the queue's hand-over of an item also watches the
// shutdown); the bound stays as a safety net, so that no stuck controller
// can hang a stop. Past the grace, the stop goes on without it; its
// goroutines are left.
const stopGrace = 30 * time.Second

func (o *operator) stop() {
	o.cancel()
	o.consumers.Stop() // before the queue they add to closes
	if o.events != nil {
		o.events.Close()
	}
	select {
	case <-o.done:
	case <-time.After(stopGrace):
	}
	for _, rn := range o.runners() {
		rn.Wait()
	}
}

// prune applies the retention now and every hour until ctx ends.
func (e *Engine) prune(ctx context.Context) {
	if e.opts.Retention == (archive.Retention{}) {
		return
	}
	for {
		if n, err := e.opts.Archive.Prune(ctx, e.opts.Retention); err != nil {
			e.mgr.GetLogger().Error(err, "pruning the archive")
		} else if n > 0 {
			e.mgr.GetLogger().Info("pruned the archive", "records", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Hour):
		}
	}
}

// Runs reports whether the engine runs the operator of this name.
func (e *Engine) Runs(name string) bool { return e.definition(name) != nil }

// Definitions returns the definitions the engine runs, in no order.
func (e *Engine) Definitions() []*definition.Definition {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*definition.Definition, 0, len(e.running))
	for _, op := range e.running {
		out = append(out, op.def)
	}
	return out
}

// definition returns the running definition of an Operator, or nil.
func (e *Engine) definition(name string) *definition.Definition {
	e.mu.Lock()
	defer e.mu.Unlock()
	if op := e.running[name]; op != nil {
		return op.def
	}
	return nil
}

// Remove stops an operator's controller. Its CRD and custom resources stay.
func (e *Engine) Remove(ctx context.Context, name string) {
	e.mu.Lock()
	op := e.running[name]
	delete(e.running, name)
	e.mu.Unlock()
	if op == nil {
		return
	}
	op.stop()
	if !op.def.Owns() {
		return // its watch, if any, was its own, and stopped with it
	}
	log := e.mgr.GetLogger().WithValues("operator", name)
	if err := e.removeInformer(ctx, op.def.GVK); err != nil {
		log.Error(err, "stopping the watch of the removed operator's custom resources")
	}
	e.removeAdmission(ctx, name)
	if e.opts.AdmissionFinalizers {
		// Nothing would remove the finalizers it adds.
		if _, err := e.removeFinalizerPolicy(ctx, name, "the operator was removed"); err != nil {
			log.Error(err, "removing the removed operator's admission policy; delete it by hand", "policy", e.finalizerPolicyName(name))
		}
	}
}

// removeInformer stops the shared cache's watch of a custom resource.
func (e *Engine) removeInformer(ctx context.Context, gvk schema.GroupVersionKind) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	return e.mgr.GetCache().RemoveInformer(ctx, obj)
}

func (e *Engine) waitEstablished(ctx context.Context, name string) error {
	// Read from the API: the cache does not watch CRDs.
	return WaitEstablished(ctx, e.mgr.GetAPIReader(), name)
}

// WaitEstablished waits, up to a minute, until the CRD name is
// established; its names refused are an error at once. reader must read
// CRDs (the API server, or a client with apiextensions in its scheme).
func WaitEstablished(ctx context.Context, reader client.Reader, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := reader.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("names not accepted: %s", c.Message)
			}
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// startController starts the controller of an operator with a custom
// resource. With spec.rollout, a rollout under way (internal/rollout) runs two
// definitions in it, each object on the one the rollout says.
func (e *Engine) startController(d *definition.Definition) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	ro, err := rollout.Prepare(ctx, e.rolloutConfig(d), d)
	if err != nil {
		cancel()
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
	r, err := e.newReconciler(ctx, current, mem, conditions)
	if err != nil {
		cancel()
		return nil, err
	}
	reconcilers := []*reconciler{r}
	var top reconcile.Reconciler = r
	pick := func(types.NamespacedName) *reconciler { return r }
	var split *rollout.Split[*reconciler]
	if ro != nil && ro.From() != nil {
		next, err := e.newReconciler(ctx, d, mem, conditions)
		if err != nil {
			cancel()
			return nil, err
		}
		split = rollout.NewSplit(r, next, ro.Moved())
		r.rolloutHash, next.rolloutHash = ro.From().Hash(), d.Hash()
		reconcilers = append(reconcilers, next)
		top, pick = split, split.Pick
	} else if ro != nil {
		r.rolloutHash = current.Hash()
	}
	workers := e.opts.Workers
	if r.runner != nil && r.runWait > 0 {
		// A worker waiting for a run reconciles nothing else meanwhile:
		// more of them keep the run slots and the API server busy.
		workers += e.opts.MaxConcurrentRuns / 2
	}
	c, err := controller.NewTypedUnmanaged("operator-"+d.Operator.Name, e.queues.Options(top, workers))
	if err != nil {
		cancel()
		return nil, err
	}
	owner := &unstructured.Unstructured{}
	owner.SetGroupVersionKind(d.GVK)
	if err := c.Watch(source.Kind[client.Object](e.mgr.GetCache(), owner, &handler.EnqueueRequestForObject{})); err != nil {
		cancel()
		return nil, err
	}
	seen := map[string]bool{}
	hasDelete := false
	for _, r := range reconcilers {
		if r.runner != nil {
			// A run's end wakes its object.
			if err := c.Watch(source.Channel(r.runner.Wakes(), &handler.EnqueueRequestForObject{})); err != nil {
				cancel()
				return nil, err
			}
		}
		// A change of a related object reconciles the custom resources
		// that refer to it (related.go).
		if err := e.watchRelated(ctx, c, r); err != nil {
			cancel()
			return nil, err
		}
		for _, child := range r.def.Children {
			if seen[child.GVK.String()] {
				continue
			}
			seen[child.GVK.String()] = true
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(child.GVK)
			h := handler.EnqueueRequestForOwner(e.mgr.GetScheme(), e.mgr.GetRESTMapper(), owner, handler.OnlyControllerOwner())
			if err := c.Watch(source.Kind[client.Object](e.mgr.GetCache(), obj, h)); err != nil {
				cancel()
				return nil, err
			}
		}
		hasDelete = hasDelete || r.runner.HasDelete()
	}
	if ro != nil {
		if err := c.Watch(source.Channel(ro.Moves(), &handler.EnqueueRequestForObject{})); err != nil {
			cancel()
			return nil, err
		}
	}
	if hasDelete {
		if err := e.startFinalizerController(ctx, d, pick); err != nil {
			cancel()
			return nil, err
		}
	}
	done := make(chan struct{})
	op := &operator{def: d, cancel: cancel, done: done, runner: r.runner, conditions: conditions, rollout: ro}
	if split != nil {
		op.runner, op.previous = reconcilers[1].runner, r.runner
	}
	go func() {
		defer close(done)
		if split != nil {
			go ro.Drive(ctx, split, mem.Newest)
		}
		if err := c.Start(ctx); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			e.mgr.GetLogger().Error(err, "controller stopped", "operator", d.Operator.Name)
		}
	}()
	return op, nil
}

// newReconciler is the reconciler of d's custom resources, with the
// operator's memory and table of conditions.
func (e *Engine) newReconciler(ctx context.Context, d *definition.Definition, mem *run.Memory, conditions *gauges.Table) (*reconciler, error) {
	r := &reconciler{
		def: d, client: e.client, reader: e.mgr.GetAPIReader(), scopes: &informer.Scopes{Mapper: e.mgr.GetRESTMapper()}, metadata: e.metadata,
		events: e.mgr.GetEventRecorder("opkit"), related: related.NewIndex(), conditions: conditions,
		namespace: e.opts.Namespace, memory: mem, runWait: e.opts.RunWait,
	}
	// The memory forgets an object gone: what the runner and the life
	// cycle keep of it, and what the related index keeps.
	r.memory.Also(r.related)
	r.states = lifecycle.New(d, lifecycle.Options{Archive: e.opts.Archive, Clock: e.opts.Clock, Events: r.events, Client: e.client, ConsoleURL: e.opts.ConsoleURL, Memory: r.memory})
	if len(d.Handlers) > 0 {
		var err error
		if r.runner, err = newRunner(ctx, d, e, r.events, r.memory); err != nil {
			return nil, err
		}
	}
	return r, nil
}
