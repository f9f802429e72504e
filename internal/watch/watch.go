package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/run"
)

// record is what the archive keeps of a watched object.
type record struct {
	State *cause.State `json:"state"`
	// Object is the object when the state last changed (kept for the
	// delete handlers only).
	Object json.RawMessage `json:"object,omitempty"`
	// Cluster is the uid of the cluster's kube-system namespace, when
	// the engine may read it: an archive kept across clusters (opkit dev
	// starts a new one each time) holds records of objects of other
	// clusters, which are not this one's to delete.
	Cluster string `json:"cluster,omitempty"`
}

// reconciler handles one watch operator's objects.
type reconciler struct {
	def    *definition.Definition
	cache  client.Reader // the operator's own watch
	reader client.Reader // the API, uncached
	client client.Client // writes opkit's finalizer (Watch.Finalizer) and nothing else
	runner *run.Runner
	store  archive.Recorder
	log    logr.Logger // tagged with the operator
	// cluster is record.Cluster for this cluster.
	cluster string
	events  events.EventRecorder
	// namespace is Options.Namespace.
	namespace string
	// runWait is how long a reconcile waits for a run it starts
	// (Options.RunWait).
	runWait time.Duration
	// updates decides which updates of an object are reconciled.
	updates updates
}

var _ reconcile.Reconciler = &reconciler{}

// Config is what a watch needs of the engine, for one operator.
type Config struct {
	// RESTConfig, Scheme and Mapper make the watch's own cache.
	RESTConfig *rest.Config
	Scheme     *runtime.Scheme
	Mapper     meta.RESTMapper
	// Reader reads from the API server, uncached; Client writes opkit's
	// finalizer (Watch.Finalizer) and nothing else; Clientset asks
	// whether the engine may watch (Check).
	Reader    client.Reader
	Client    client.Client
	Clientset kubernetes.Interface
	// Archive keeps each watched object's handler record.
	Archive archive.Recorder
	Log     logr.Logger
	Events  events.EventRecorder
	// Namespace is the engine's one namespace ("" for all), and
	// Namespaces those the watch watches (none: all).
	Namespace  string
	Namespaces []string
	// RunWait is how long a reconcile waits for a run it starts;
	// Controller makes the controller's options for a reconciler and its
	// workers: Workers, and MaxConcurrentRuns/2 more when reconciles wait
	// (run.Workers).
	RunWait                    time.Duration
	Workers, MaxConcurrentRuns int
	Controller                 func(reconcile.Reconciler, int) controller.TypedOptions[reconcile.Request]
}

// Opened is a watch's cache, started, its first list under way: opened
// beside what comes before the operator starts (Apply's access checks
// and schema reads), so that its first handling does not wait for them
// too. Start the operator on it, or Close it.
type Opened struct {
	cache  cache.Cache
	obj    *unstructured.Unstructured // of the watched kind
	cancel context.CancelFunc
	done   chan struct{} // closed once the cache stopped
}

// Open makes the cache of d's watch (what d.Watch names: the kind, the
// namespaces of cfg, the selector) and starts it, and its list of the
// watched objects. It runs until Close, or the end of the context of the
// Start given it.
func Open(cfg Config, d *definition.Definition) (*Opened, error) {
	w := d.Watch
	opts := cache.Options{
		Scheme: cfg.Scheme, Mapper: cfg.Mapper,
		DefaultLabelSelector: w.Selector,
		DefaultTransform:     informer.Transform,
	}
	if len(cfg.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if len(cfg.Namespaces) <= 1 {
		// The objects' JSON decoded straight into the cache's compact
		// form, as the engine's shared cache does (package informer),
		// not twice into nested maps and then packed.
		httpClient, err := rest.HTTPClientFor(cfg.RESTConfig)
		if err != nil {
			return nil, fmt.Errorf("operator %s: the watch of %s: %w", d.Operator.Name, w.GVK.Kind, err)
		}
		inf := &informer.Informers{Config: cfg.RESTConfig, HTTP: httpClient, Scopes: &informer.Scopes{Mapper: cfg.Mapper}}
		if len(cfg.Namespaces) == 1 {
			inf.Namespace = cfg.Namespaces[0]
		}
		if w.Selector != nil {
			inf.LabelSelector = w.Selector.String()
		}
		opts.HTTPClient, opts.NewInformer = httpClient, inf.NewInformer
	}
	watchCache, err := cache.New(cfg.RESTConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("operator %s: the watch of %s: %w", d.Operator.Name, w.GVK.Kind, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &Opened{cache: watchCache, obj: &unstructured.Unstructured{}, cancel: cancel, done: make(chan struct{})}
	o.obj.SetGroupVersionKind(w.GVK)
	go func() {
		defer close(o.done)
		if err := watchCache.Start(ctx); err != nil && ctx.Err() == nil {
			cfg.Log.Error(err, "the watch stopped", "operator", d.Operator.Name, "kind", w.GVK.Kind)
		}
	}()
	// The informer, and with it the list, starts now.
	if _, err := watchCache.GetInformer(ctx, o.obj, cache.BlockUntilSynced(false)); err != nil {
		o.Close()
		return nil, fmt.Errorf("operator %s: the watch of %s: %w", d.Operator.Name, w.GVK.Kind, err)
	}
	return o, nil
}

// Close stops the cache, and returns once it stopped.
func (o *Opened) Close() {
	o.cancel()
	<-o.done
}

// Start starts the watch of d, an operator with spec.watch, whose runs
// rn makes, until ctx ends: its cache (o, or one it opens: o nil), its
// controller, and the reconciles of the objects its archived records
// name. The channel is closed once it stopped. The cache is closed when
// ctx ends, and when Start fails.
func Start(ctx context.Context, cfg Config, d *definition.Definition, rn *run.Runner, o *Opened) (_ <-chan struct{}, err error) {
	if o == nil {
		if o, err = Open(cfg, d); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			o.Close()
		}
	}()
	watchCache := o.cache
	r := &reconciler{def: d, cache: watchCache, reader: cfg.Reader, client: cfg.Client, runner: rn, store: cfg.Archive, cluster: clusterID(ctx, cfg.Reader),
		log: cfg.Log.WithValues("operator", d.Operator.Name), events: cfg.Events, namespace: cfg.Namespace, runWait: cfg.RunWait, updates: newUpdates(d.Operator.Name, d.Handlers, d.HasExpressions())}
	records, err := r.preload(ctx)
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its watched objects' state from the archive: %w", d.Operator.Name, err)
	}
	c, err := controller.NewTypedUnmanaged("operator-"+d.Operator.Name, cfg.Controller(r, run.Workers(cfg.Workers, cfg.MaxConcurrentRuns, cfg.RunWait, len(d.Handlers) > 0)))
	if err != nil {
		return nil, err
	}
	if err := c.Watch(&syncSource{cache: watchCache, obj: o.obj, handler: r.watchHandler()}); err != nil {
		return nil, err
	}
	if err := c.Watch(source.Channel(rn.Wakes(), &handler.EnqueueRequestForObject{})); err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, o.cancel)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer o.Close() // also when the controller stopped on its own
		// What the archive names is looked at once the watch has synced:
		// the objects changed or deleted while no engine ran.
		go func() {
			if !watchCache.WaitForCacheSync(ctx) {
				return
			}
			for _, key := range records {
				u := &unstructured.Unstructured{}
				u.SetNamespace(key.Namespace)
				u.SetName(key.Name)
				rn.Wake(u)
			}
		}()
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "controller stopped")
		}
	}()
	return done, nil
}

// watchHandler enqueues each watched object's changes, and keeps the last
// state of one deleted: its delete handlers' object.
func (r *reconciler) watchHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if r.updates.reconciled(e.ObjectOld, e.ObjectNew) {
				enqueue(e.ObjectNew, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if u, ok := e.Object.DeepCopyObject().(*unstructured.Unstructured); ok && r.runner.HasDelete() {
				r.runner.Watched().LastSeen(u)
			}
			enqueue(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}

// syncSource is source.Kind for the watch, but for how its sync is
// waited for. The controller's workers start once its sources have
// synced, and source.Kind waits for its informer's sync, and again for
// its handler's, with client-go's WaitForCacheSync, which looks every
// 100 ms: the first watched objects waited up to 200 ms for nothing.
// syncSource looks every syncPoll.
type syncSource struct {
	cache   cache.Cache
	obj     client.Object
	handler handler.TypedEventHandler[client.Object, reconcile.Request]
	// registration is the handler's on the informer, once Start added it.
	registration toolscache.ResourceEventHandlerRegistration
}

// syncPoll is how often syncSource looks whether its handler has
// had the objects of the watch's first list.
const syncPoll = 5 * time.Millisecond

var _ source.TypedSyncingSource[reconcile.Request] = &syncSource{}

func (s *syncSource) String() string {
	return fmt.Sprintf("watch of %s", s.obj.GetObjectKind().GroupVersionKind())
}

// Start adds the handler to the watch's informer (started with the
// cache, which may start after this), without waiting for its sync.
func (s *syncSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	inf, err := s.cache.GetInformer(ctx, s.obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("the informer of the %s: %w", s, err)
	}
	object := func(o any) (client.Object, bool) {
		obj, ok := o.(client.Object)
		return obj, ok
	}
	s.registration, err = inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if obj, ok := object(o); ok {
				s.handler.Create(ctx, event.TypedCreateEvent[client.Object]{Object: obj, IsInInitialList: initial}, q)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := object(oldObj)
			obj, ok2 := object(newObj)
			if ok1 && ok2 {
				s.handler.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: old, ObjectNew: obj}, q)
			}
		},
		DeleteFunc: func(o any) {
			e := event.TypedDeleteEvent[client.Object]{}
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				// The watch missed the deletion: the last state it had.
				o, e.DeleteStateUnknown = t.Obj, true
			}
			if obj, ok := object(o); ok {
				e.Object = obj
				s.handler.Delete(ctx, e, q)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching the %s: %w", s, err)
	}
	return nil
}

// WaitForSync waits until the handler has had every object of the
// watch's first list.
func (s *syncSource) WaitForSync(ctx context.Context) error {
	if s.registration == nil {
		return fmt.Errorf("the %s was not started", s)
	}
	err := wait.PollUntilContextCancel(ctx, syncPoll, true, func(context.Context) (bool, error) {
		return s.registration.HasSynced(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s to sync: %w", s, err)
	}
	return nil
}

// clusterID is the uid of the kube-system namespace, or "" when the engine
// may not read it.
func clusterID(ctx context.Context, reader client.Reader) string {
	var ns corev1.Namespace
	if err := reader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return ""
	}
	return string(ns.UID)
}
