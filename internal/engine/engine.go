// Package engine runs the operators declared by compiled definitions: for
// each it installs the custom resource's CRD and runs a controller that
// keeps every custom resource's children converged and its status current.
//
// # Controllers that come and go
//
// controller-runtime assumes the set of controllers is fixed when the
// manager starts: a controller added to a manager can never be removed. kro
// answers this with its own dynamic controller and queue. opkit keeps
// controller-runtime's queue, rate limiting and reconcile loop, which are
// proven, and uses them as unmanaged controllers: one manager owns the
// shared cache, and each definition gets its own controller
// (controller.NewTypedUnmanaged) started with its own context. Removing a
// definition cancels that context, which stops the controller's workers,
// and removes the informer of its custom resource from the cache. Changing
// a definition replaces its controller.
//
// # Reconcile
//
// Level-triggered: each reconcile renders every child from the current
// custom resource and the current children, in dependency order; a child
// whose rendered fields already hold in the live object is not written
// (so nothing is written at steady state); otherwise it is server-side
// applied with field manager "opkit" and a controller ownerReference. A
// child the API refuses to update because a field is immutable is deleted
// and re-created. The status fields are evaluated after the children, with
// observedGeneration and the conditions Ready and Degraded, and written
// through the status subresource only when they changed. Kubernetes Events
// on the custom resource record child changes and errors.
//
// Reads come from the shared cache (the objects without managedFields;
// unstructured ones are held as typed metadata and a packed form, a third
// of the memory of nested maps, decoded into it straight from the watch's
// JSON and into an unstructured object on read); only the kinds the
// definitions name are watched. Children are applied, and statuses
// patched, asking for the object's metadata back, not the whole object.
// Before a definition runs, its children are typed by the schemas the API
// server publishes (definition.CompileWithSchemas), so that an expression
// reading a field a child's kind does not have is refused, not failed at
// run time.
//
// # Pruning
//
// The children a reconcile applied are recorded in the custom resource's
// status.opkit.children (its inventory). A child that is no longer rendered
// (excluded by includeWhen, removed from the definition, or renamed by its
// template) is found there and deleted, if the custom resource still
// controls it. A child that cannot be rendered now (it waits for another
// child, or failed) keeps its entry. Deleting the custom resource deletes
// its children through their ownerReferences (garbage collection).
//
// # Related objects
//
// Objects a custom resource refers to but the operator does not own
// (spec.related) are read from the shared cache at each reconcile, before
// the children, and never written. Each kind is watched; an index from
// each related object to the custom resources that refer to it (by name,
// or by selector within a kind and namespace) turns a change of one into
// reconciles of exactly those (related.go).
//
// # Watches and operator-wide schedules
//
// An operator without a custom resource either watches objects of any
// kind that it neither owns nor writes to (spec.watch: its own cache,
// restricted to its namespaces and selector; each object's handler state
// kept in the run archive, loaded at start, so what changed or went while
// no engine ran is handled once: watch.go), or runs its handlers on
// operator-wide schedules, once per slot, the last slot kept in the
// archive (calendar.go). Both share the runner of custom resources: its
// executors, slots, archive writes and metrics. No CRD is installed.
//
// # A CRD deleted under a running operator
//
// Deleting a CRD deletes its custom resources (their delete handlers run
// as for any deletion), then the CRD. The engine watches the metadata of
// every CRD and installs a running operator's CRD again once it is gone,
// then restarts that operator's controller; it says so in its log, in
// Events and, for an Operator read from the cluster, in its Ready
// condition (reason CRDDeleted) until the CRD is back (crdguard.go).
//
// # Versions still stored
//
// Apply refuses a definition that drops a version its installed CRD
// still lists in status.storedVersions (definition.CheckStoredVersions).
// With Options.MigrateStorage, a CRD just applied whose storedVersions
// holds more than its storage version is migrated (package migrate) in
// the background while its operator runs, once per Apply, said through
// Options.Notice (migrate.go).
//
// # Handlers
//
// Each reconcile, after the children, asks package cause which handler
// has a run to make: triggers come from the object's state — its
// generation against the generation each handler last succeeded for
// (status.opkit.handlers), the related fields it names, its
// deletionTimestamp, the schedule — never from watch events. Runs execute in their own goroutines through package
// executor, one at a time per object and at most Options.MaxConcurrentRuns
// per operator; a run's end wakes its object, and that object's reconcile
// records the outcome (status patch, events, retry state, the archive), so
// that every write to an object is made by its one reconcile worker. A
// handler that succeeded for a generation does not run again for it; a run
// interrupted by a crash runs again with the same idempotency key. The
// finalizer opkit.dev/<operator> is held while an operator has delete
// handlers, changed only by resourceVersion-guarded JSON patches.
//
// # Admission handlers
//
// Handlers on validate or mutate are not run by reconciles: the API
// server calls them, through the engine's webhook server (package
// webhook, Options.Webhook), as it admits a create, update or delete of a
// custom resource. The engine applies a Validating and a
// MutatingWebhookConfiguration per operator that has them, with the
// server's caBundle, again at each rotation, and deletes them with the
// operator (webhooks.go). Each call is recorded as a run and answered by
// the handler, or by its failure policy before the API server's timeout
// (admit.go).
//
// # Conversion
//
// An operator whose versions declare conversion has its CRD installed
// with the Webhook strategy, pointing at the same server's
// /convert/<operator>, which converts by the declared expressions
// (package conversion); the CRD's caBundle is applied again at each
// rotation. An engine without a webhook server refuses such an operator
// (convert.go).
//
// # One namespace, a test's clock, stubs
//
// What a test runner (opkit test) needs. Options.Namespace makes an
// engine act in one namespace only: its caches hold that namespace's
// objects, a watch watches it whatever its definition's namespaces, and
// an operator every engine would see (a cluster-scoped custom resource
// or watched kind) is refused, so that engines running the same
// definitions run side by side, one per namespace (scope.go).
// Options.Clock times what the definitions schedule (schedules,
// requeues, retry delays, operator-wide slots); controller-runtime
// requeues in real time, so a test that steps a fake clock calls
// ClockStepped, which reconciles every object again and wakes the
// calendars (clock.go). Options.Stubs replaces handlers' actions with
// executors of the test's own, such as executor.Canned; their runs are
// otherwise real: archived, retried, Stalled, their results written
// (package run's Stubs).
//
// # Metrics and health
//
// Options.MetricsAddr serves /metrics (controller-runtime's and opkit's:
// runs, and each operator's objects by condition), /healthz and /readyz,
// which fails while the API server or the archive does (health.go,
// metrics.go, docs/metrics.md).
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/admission"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/health"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/run"
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

	queues  retryQueues           // the controllers' queues, retried at once when the API is back
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
	hooks          *hooks               // the webhook listener, once bound (hooks.go)
	// webhook serves admission calls (webhooks.go); nil without
	// Options.Webhook. webhookMu orders the writes of its configurations.
	webhook   *webhook.Server
	webhookMu sync.Mutex
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
}

// operator is one running controller.
type operator struct {
	def    *definition.Definition
	cancel context.CancelFunc
	done   chan struct{}
	runner *run.Runner // nil without handlers
	// events handles the deliveries of its sources; nil without sources.
	events *delivery.Queue
	// conditions are its custom resources' conditions, for the gauges
	// (metrics.go); nil for a watch or a calendar.
	conditions *conditionTable
}

// New creates an engine; it starts nothing.
func New(opts Options) (*Engine, error) {
	if opts.Config == nil {
		return nil, errors.New("engine: Options.Config is required")
	}
	if opts.Workers == 0 {
		opts.Workers = 8
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
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	away := health.NewOutage()
	informers := &informer.Informers{Config: opts.Config, Namespace: opts.Namespace, Outage: away}
	mopts := manager.Options{
		Scheme: scheme,
		// Client-go's retries of Events are told by the outage's notice.
		Logger: away.QuietLogger(ctrllog.Log),
		// MetricsAddr is served with the health checks (health.go).
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			// Cached objects do not need their managedFields, and
			// unstructured ones are kept compact (see package informer),
			// decoded so straight from their JSON (listwatch.go).
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
		return nil, err
	}
	if le := opts.LeaderElection; le != nil {
		if err := le.configure(&mopts); err != nil {
			return nil, err
		}
	}
	if h := opts.HooksEndpoint; h != nil {
		if err := h.check(); err != nil {
			return nil, err
		}
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
	if opts.Archive != nil {
		e.archive = health.NewArchiveWriter(opts.Archive, e.notice, handlerMetrics().archiveWritable)
		e.opts.Archive = e.archive
	}
	e.admission = &admission.Server{Archive: e.opts.Archive, Stubs: opts.Stubs, RunFinished: opts.RunFinished, Logger: mgr.GetLogger(), Reader: mgr.GetAPIReader(), Credentials: e.credentials}
	if err := e.serve(); err != nil {
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
	return e, nil
}

// Run runs the engine's cache until ctx ends, then stops every controller.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	defer trackEngine(e)()
	// Runnables run once the engine leads (at once without leader
	// election), but watchAPI, which every replica runs for /readyz.
	if err := e.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		e.leading()
		if e.opts.Archive != nil {
			// The runs a previous engine (or leader) left Running end
			// Cancelled, and run again with their keys.
			if _, err := e.opts.Archive.CancelRunning(ctx, "the engine stopped during the run; it runs again with the same idempotency key"); err != nil {
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
	if o.events != nil {
		o.events.Close()
	}
	select {
	case <-o.done:
	case <-time.After(stopGrace):
	}
	if o.runner != nil {
		o.runner.Wait()
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

// Apply installs or updates the definition's CRD, waits until it is
// established, and (re)starts its controller. A definition compiled
// without schemas is first compiled again with the children typed by the
// schemas the cluster publishes; an expression that reads a field a child's
// kind does not have is an error then. A CRD change that would break the
// installed CRD's clients or lose its data is refused with a
// *BreakingChangeError, before anything is changed, unless
// Options.AllowBreaking.
func (e *Engine) Apply(ctx context.Context, d *definition.Definition) error {
	if err := e.waitStarted(ctx); err != nil {
		return err
	}
	if err := e.checkScope(d); err != nil {
		return err
	}
	// Refuse a definition whose children the cluster cannot hold before
	// changing anything.
	for _, child := range d.Children {
		if _, err := e.mgr.GetRESTMapper().RESTMapping(child.GVK.GroupKind(), child.GVK.Version); err != nil {
			return fmt.Errorf("operator %s: child %s: kind %s is not served by the cluster: %w", d.Operator.Name, child.ID, child.GVK, err)
		}
	}
	if err := e.checkRelated(ctx, d); err != nil {
		return err
	}
	if (len(d.Handlers) > 0 || len(d.Admission) > 0) && e.opts.Archive == nil {
		return fmt.Errorf("operator %s: handlers need a run archive, and the engine has none", d.Operator.Name)
	}
	if d.States != nil && e.opts.Archive == nil {
		return fmt.Errorf("operator %s: states need a run archive, which records every transition, and the engine has none", d.Operator.Name)
	}
	if len(d.Admission) > 0 && e.webhook == nil {
		return fmt.Errorf("operator %s: admission handlers (on validate or mutate) are served by the engine's webhook server, and it runs none: give it an address (opkit run --webhook-addr)", d.Operator.Name)
	}
	if len(d.Sources) > 0 {
		if e.opts.Archive == nil {
			return fmt.Errorf("operator %s: webhook sources need a run archive, and the engine has none", d.Operator.Name)
		}
		if err := e.ensureHooks(d); err != nil {
			return err
		}
	}
	if d.Watch != nil || d.Calendar() {
		return e.applyUnowned(ctx, d)
	}
	// The CRD's conversion is the webhook server's: without one, every
	// read at a version other than the stored one would fail.
	if err := e.checkConversion(ctx, d); err != nil {
		return err
	}
	if !d.Typed() {
		typed, err := d.WithSchemas(e.schemaResolver())
		if err != nil {
			return err
		}
		d = typed
	}
	crd := e.installedCRD(d)
	// Never take over a CRD that another Operator, or someone else, made.
	var existing apiextensionsv1.CustomResourceDefinition
	err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: crd.Name}, &existing)
	switch {
	case err == nil && definition.OperatorName(&existing) == "":
		return fmt.Errorf("operator %s: CRD %s exists and was not installed by opkit; opkit will not take it over", d.Operator.Name, crd.Name)
	case err == nil && definition.OperatorName(&existing) != d.Operator.Name:
		return fmt.Errorf("operator %s: CRD %s belongs to operator %s", d.Operator.Name, crd.Name, definition.OperatorName(&existing))
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("operator %s: reading CRD %s: %w", d.Operator.Name, crd.Name, err)
	case err == nil:
		// A version still stored cannot be dropped (docs/migration.md),
		// whatever AllowBreaking says: the API server would refuse it.
		if err := d.CheckStoredVersions(existing.Status.StoredVersions); err != nil {
			return err
		}
		if !e.opts.AllowBreaking {
			if err := refuseBreaking(d, &existing, crd); err != nil {
				return err
			}
		}
	}
	if err := e.installCRD(ctx, d); err != nil {
		return fmt.Errorf("operator %s: installing CRD %s: %w", d.Operator.Name, crd.Name, err)
	}
	if err := e.waitEstablished(ctx, crd.Name); err != nil {
		return fmt.Errorf("operator %s: CRD %s: %w", d.Operator.Name, crd.Name, err)
	}
	if e.opts.MigrateStorage {
		if err := e.migrateStorage(ctx, d.Operator.Name, crd.Name); err != nil {
			return fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
	}
	if err := e.syncFinalizerPolicy(ctx, d); err != nil {
		return fmt.Errorf("operator %s: the admission policy that adds its finalizer: %w", d.Operator.Name, err)
	}
	if err := e.admission.Set(d); err != nil {
		return err
	}
	if err := e.restart(ctx, d, e.startController); err != nil {
		return err
	}
	return e.serveAdmission(ctx, d)
}

// restart stops the running operator of d's name, if any, and starts d
// with start.
func (e *Engine) restart(ctx context.Context, d *definition.Definition, start func(*definition.Definition) (*operator, error)) error {
	e.mu.Lock()
	old := e.running[d.Operator.Name]
	delete(e.running, d.Operator.Name)
	e.restarting[d.Operator.Name] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.restarting, d.Operator.Name)
		e.mu.Unlock()
	}()
	if old != nil {
		old.stop()
	}
	if old != nil && old.def.Owns() {
		// Watches opened before a CRD's schema changed go on decoding with
		// the old schema (dropping new fields) until the API server closes
		// them, up to a minute later: list and watch again. (A watch
		// operator's watch is its own, and stopped with it.)
		if err := e.removeInformer(ctx, old.def.GVK); err != nil {
			return fmt.Errorf("operator %s: restarting the watch of %s: %w", d.Operator.Name, old.def.GVK.Kind, err)
		}
	}
	op, err := start(d)
	if err != nil {
		return err
	}

	if len(d.Sources) > 0 {
		if op.events, err = delivery.Start(e.ctx, d, op.runner, delivery.Options{Archive: e.opts.Archive, Client: e.client, Namespace: e.opts.Namespace, Logger: e.mgr.GetLogger()}); err != nil {
			op.stop()
			return err
		}
	}
	e.mu.Lock()
	e.running[d.Operator.Name] = op
	e.mu.Unlock()
	return nil
}

// applyUnowned (re)starts an operator without a custom resource: a watch
// (watch.go) or a calendar (calendar.go). No CRD is installed.
func (e *Engine) applyUnowned(ctx context.Context, d *definition.Definition) error {
	if d.Watch != nil {
		if err := e.checkWatch(ctx, d); err != nil {
			return err
		}
		if !d.Typed() {
			typed, err := d.WithSchemas(e.schemaResolver())
			if err != nil {
				return err
			}
			d = typed
		}
	}
	start := e.startCalendar
	if d.Watch != nil {
		start = e.startWatch
	}
	return e.restart(ctx, d, start)
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

func (e *Engine) startController(d *definition.Definition) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	r := &reconciler{
		def: d, client: e.client, reader: e.mgr.GetAPIReader(), scopes: &informer.Scopes{Mapper: e.mgr.GetRESTMapper()}, metadata: e.metadata,
		events: e.mgr.GetEventRecorder("opkit"), related: newRelatedIndex(), conditions: newConditionTable(),
		namespace: e.opts.Namespace, memory: run.NewMemory(false),
	}
	// One memory forgets an object gone: what the runner and the life
	// cycle keep of it, and what the related index and the gauges keep.
	r.memory.Also(r.related, r.conditions)
	r.states = lifecycle.New(d, lifecycle.Options{Archive: e.opts.Archive, Clock: e.opts.Clock, Events: r.events, Client: e.client, ConsoleURL: e.opts.ConsoleURL, Memory: r.memory})
	if len(d.Handlers) > 0 {
		var err error
		if r.runner, err = newRunner(ctx, d, e, r.events, r.memory); err != nil {
			cancel()
			return nil, err
		}
	}
	c, err := controller.NewTypedUnmanaged("operator-"+d.Operator.Name, e.queues.options(r, e.opts.Workers))
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
	if r.runner != nil {
		// A run's end wakes its object.
		if err := c.Watch(source.Channel(r.runner.Wakes(), &handler.EnqueueRequestForObject{})); err != nil {
			cancel()
			return nil, err
		}
	}
	// A change of a related object reconciles the custom resources that
	// refer to it (related.go).
	if err := e.watchRelated(ctx, c, r); err != nil {
		cancel()
		return nil, err
	}
	seen := map[string]bool{}
	for _, child := range d.Children {
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
	if r.runner.HasDelete() {
		if err := e.startFinalizerController(ctx, r); err != nil {
			cancel()
			return nil, err
		}
	}
	op := &operator{def: d, cancel: cancel, done: make(chan struct{}), runner: r.runner, conditions: r.conditions}
	go func() {
		defer close(op.done)
		if err := c.Start(ctx); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			e.mgr.GetLogger().Error(err, "controller stopped", "operator", d.Operator.Name)
		}
	}()
	return op, nil
}
