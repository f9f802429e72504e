package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/admission"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/converge"
	"github.com/opkit-dev/opkit/internal/crds"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/finalizer"
	"github.com/opkit-dev/opkit/internal/gauges"
	"github.com/opkit-dev/opkit/internal/health"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/runsserver"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// FieldManager is the server-side apply field manager of every write
// (converge.FieldManager).
const FieldManager = converge.FieldManager

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
	mu             sync.Mutex      // guards hooksAddr
	// running are the operators it runs (running.go).
	running *registry
	health  served         // what /readyz reports (health.go)
	outage  *health.Outage // the API server away, as watchAPI last found it (apihealth.go)
	// receiver takes the deliveries, the consumed sources' messages and
	// the redeliveries (package delivery); hooksAddr is the hooks
	// listener's address, once bound (hooks.go).
	receiver  *delivery.Receiver
	hooksAddr string
	// webhooks tell the API server to call the webhook server (its
	// Server, nil without Options.Webhook) for the operators' admission
	// and conversion, and answer the conversions (webhooks.go).
	webhooks *webhook.Operators
	// runsAPI serves the archive to kubectl (runsapi.go); nil without
	// Options.RunsAPI.
	runsAPI *runsserver.Server
	// admission answers the operators' admission calls (package
	// admission). An operator's admitter is replaced whole when its
	// definition is applied, apart from its controller, so that a restart
	// of the controller (which waits for its runs) leaves admission calls
	// answered.
	admission *admission.Server
	// clockSteps wakes the waits on Options.Clock at ClockStepped (clock.go).
	clockSteps run.ClockSteps
	// migrations are the storage migrations in flight, by CRD (migrate.go).
	migrations migrations
	// redeliveries answers the Redelivery objects (package delivery),
	// once an operator with a source is applied.
	redeliveries *delivery.Redeliveries
	// credentials give exec handlers' processes a ServiceAccount's
	// kubeconfig (package executor).
	credentials executor.Credentials
	// drivers are the Configs of the packages that run operators
	// (start.go).
	drivers drivers
	// crds installs the CRDs, opkit's own once (package crds).
	crds *crds.Installer
	// finalizers are the operators' admission policies that give their
	// custom resources opkit's finalizer (package finalizer).
	finalizers *finalizer.Policy
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
	e := &Engine{opts: opts, outage: away, mgr: mgr, client: mgr.GetClient(), clientset: cs, metadata: md, discovery: dc, started: make(chan struct{}), replicaRunning: make(chan struct{}), stopped: make(chan struct{}), running: newRegistry(), credentials: executor.ServiceAccountCredentials(cs, opts.Config)}
	e.crds = &crds.Installer{Client: e.client, Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(), FieldManager: FieldManager}
	e.finalizers = &finalizer.Policy{Enabled: opts.AdmissionFinalizers, Namespace: opts.Namespace, Client: e.client, FieldManager: FieldManager, Log: mgr.GetLogger()}
	e.receiver = &delivery.Receiver{ReadSecret: sourceSecret(mgr.GetAPIReader()), Log: mgr.GetLogger()}
	e.receiver.Running = e.running.receiving
	if opts.Archive != nil {
		e.receiver.Deliveries, _ = opts.Archive.(archive.DeliveryReader)
		e.archive = health.NewArchiveWriter(opts.Archive, e.notice, handlerMetrics().archiveWritable)
		e.opts.Archive = e.archive
		e.receiver.Archive = e.archive
	}
	e.admission = &admission.Server{Archive: e.opts.Archive, Stubs: opts.Stubs, RunFinished: opts.RunFinished, Logger: mgr.GetLogger(), Reader: mgr.GetAPIReader(), Credentials: e.credentials}
	e.drivers = newDrivers(e)
	e.redeliveries = &delivery.Redeliveries{
		Receiver: e.receiver, Client: e.client, Reader: mgr.GetAPIReader(), Cache: mgr.GetCache(), Namespace: opts.Namespace,
		Log: mgr.GetLogger(), Queue: e.queues.Options,
		InstallCRD: func(ctx context.Context) error {
			return e.crds.Own(ctx, v1alpha1.RedeliveryCRD(), v1alpha1.RedeliveryKind)
		},
	}
	if err := e.serve(); err != nil {
		return nil, err
	}
	if err := e.publishRunners(); err != nil {
		return nil, err
	}
	e.webhooks = &webhook.Operators{Client: e.client, Reader: mgr.GetAPIReader(), Namespace: opts.Namespace, FieldManager: FieldManager, Log: mgr.GetLogger(),
		ApplyCRD: e.crds.Apply}
	if opts.Webhook != nil {
		e.webhooks.Service, e.webhooks.Host = opts.Webhook.Service, opts.Webhook.Host
		if e.webhooks.Server, err = e.newWebhookServer(); err != nil {
			return nil, err
		}
		if err := mgr.Add(e.webhooks.Server); err != nil {
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
			go archive.KeepPruned(ctx, e.opts.Archive, e.opts.Retention, func(n int, err error) {
				if err != nil {
					e.mgr.GetLogger().Error(err, "pruning the archive")
				} else if n > 0 {
					e.mgr.GetLogger().Info("pruned the archive", "records", n)
				}
			})
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
	ops := e.running.takeAll()
	e.webhooks.Stop(ctx, e.admission.Stop())
	for _, op := range ops {
		op.stop()
	}
	e.migrations.wg.Wait() // each saved its progress
	stopRetry()
	pending.Wait()
	return err
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

// Runs reports whether the engine runs the operator of this name.
func (e *Engine) Runs(name string) bool { return e.running.get(name) != nil }

// Definitions returns the definitions the engine runs, in no order.
func (e *Engine) Definitions() []*definition.Definition {
	ops := e.running.all()
	out := make([]*definition.Definition, len(ops))
	for i, op := range ops {
		out[i] = op.def
	}
	return out
}

// Remove stops an operator's controller. Its CRD and custom resources stay.
func (e *Engine) Remove(ctx context.Context, name string) {
	op := e.running.take(name, false)
	if op == nil {
		return
	}
	op.stop()
	if !op.def.Owns() {
		return // its watch, if any, was its own, and stopped with it
	}
	log := e.mgr.GetLogger().WithValues("operator", name)
	if err := removeInformer(ctx, e.mgr.GetCache(), op.def.GVK); err != nil {
		log.Error(err, "stopping the watch of the removed operator's custom resources")
	}
	e.admission.Remove(name)
	e.webhooks.Remove(ctx, name)
	if e.opts.AdmissionFinalizers {
		// Nothing would remove the finalizers it adds.
		if _, err := e.finalizers.Remove(ctx, name, "the operator was removed"); err != nil {
			log.Error(err, "removing the removed operator's admission policy; delete it by hand", "policy", e.finalizers.Name(name))
		}
	}
}

// removeInformer stops the shared cache's watch of a custom resource.
func removeInformer(ctx context.Context, c cache.Cache, gvk schema.GroupVersionKind) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	return c.RemoveInformer(ctx, obj)
}
