package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"github.com/opkit-dev/opkit/internal/finalizer"
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
	// workers, Workers.
	RunWait    time.Duration
	Workers    int
	Controller func(reconcile.Reconciler, int) controller.TypedOptions[reconcile.Request]
}

// Start starts the watch of d, an operator with spec.watch, whose runs
// rn makes, until ctx ends: its cache, its controller, and the reconciles
// of the objects its archived records name. The channel is closed once
// it stopped.
func Start(ctx context.Context, cfg Config, d *definition.Definition, rn *run.Runner) (<-chan struct{}, error) {
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
	watchCache, err := cache.New(cfg.RESTConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("operator %s: the watch of %s: %w", d.Operator.Name, w.GVK.Kind, err)
	}
	r := &reconciler{def: d, cache: watchCache, reader: cfg.Reader, client: cfg.Client, runner: rn, store: cfg.Archive, cluster: clusterID(ctx, cfg.Reader),
		log: cfg.Log.WithValues("operator", d.Operator.Name), events: cfg.Events, namespace: cfg.Namespace, runWait: cfg.RunWait}
	records, err := r.preload(ctx)
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its watched objects' state from the archive: %w", d.Operator.Name, err)
	}
	c, err := controller.NewTypedUnmanaged("operator-"+d.Operator.Name, cfg.Controller(r, cfg.Workers))
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(w.GVK)
	if err := c.Watch(&syncSource{cache: watchCache, obj: obj, handler: r.watchHandler()}); err != nil {
		return nil, err
	}
	if err := c.Watch(source.Channel(rn.Wakes(), &handler.EnqueueRequestForObject{})); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		if err := watchCache.Start(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "the watch stopped", "kind", w.GVK.Kind)
		}
	}()
	go func() {
		defer close(done)
		defer func() { <-cacheDone }()
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
			enqueue(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if u, ok := e.Object.DeepCopyObject().(*unstructured.Unstructured); ok && r.runner.HasDelete() {
				r.runner.LastSeen(u)
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

// preload reads the operator's watched objects' records from the archive
// into the runner and returns their names: those of this cluster, of the
// kind and namespaces watched. A record of another kind or namespace is
// dropped (the watch changed: the object is no longer watched, and is
// forgotten without a delete run).
func (r *reconciler) preload(ctx context.Context) ([]types.NamespacedName, error) {
	states, err := r.store.States(ctx, r.def.Operator.Name)
	if err != nil {
		return nil, err
	}
	var keys []types.NamespacedName
	var records []run.Preloaded
	updated := map[types.NamespacedName]time.Time{}
	for _, s := range states {
		w := r.def.Watch
		namespaces := w.Namespaces
		if r.namespace != "" {
			if s.Namespace != r.namespace {
				continue // another engine's, of another namespace: kept
			}
			namespaces = nil // the engine's one namespace is watched
		}
		if gvk := schema.FromAPIVersionAndKind(s.APIVersion, s.Kind); gvk != w.GVK || len(namespaces) > 0 && !slices.Contains(namespaces, s.Namespace) {
			// The operator watches another kind or other namespaces now:
			// the object is no longer watched.
			r.log.Info("dropping the record of an object no longer watched", "kind", s.Kind, "namespace", s.Namespace, "name", s.Name)
			if err := r.store.DeleteState(ctx, s.Operator, s.Key); err != nil {
				return nil, err
			}
			continue
		}
		var rec record
		if err := json.Unmarshal(s.Data, &rec); err != nil || rec.State == nil {
			r.log.Error(err, "a watched object's record in the archive does not decode; it is dropped, and the object is new to the operator", "namespace", s.Namespace, "name", s.Name, "uid", s.Key)
			if err := r.store.DeleteState(ctx, s.Operator, s.Key); err != nil {
				return nil, err
			}
			continue
		}
		if rec.Cluster != "" && r.cluster != "" && rec.Cluster != r.cluster {
			continue // another cluster's object
		}
		if rec.State.Handlers == nil {
			rec.State.Handlers = map[string]*cause.HandlerState{}
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if at, ok := updated[key]; ok {
			// Two objects of one name: the older was deleted and its
			// delete handlers could not finish before the engine stopped.
			if s.UpdatedAt.Before(at) {
				r.log.Info("dropping the record of an older object of the same name; its delete handlers do not run", "namespace", s.Namespace, "name", s.Name, "uid", s.Key)
				continue
			}
		} else {
			keys = append(keys, key)
		}
		updated[key] = s.UpdatedAt
		persisted, _ := json.Marshal(rec.State)
		records = append(records, run.Preloaded{Key: key, UID: types.UID(s.Key), State: rec.State, Persisted: persisted, Last: rec.Object})
	}
	r.runner.Preload(records) // a later record of a name replaces an earlier one, as it did
	return keys, nil
}

// Reconcile runs the handlers of one watched object, or the delete
// handlers of one that is gone.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rn := r.runner
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.def.Watch.GVK)
	err := r.cache.Get(ctx, req.NamespacedName, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	found := err == nil
	if found {
		matches, err := r.def.Watch.Matches(obj.Object)
		if err != nil {
			r.events.Eventf(obj, nil, "Warning", "FilterFailed", "Evaluate", "operator %s: %v", r.def.Operator.Name, err)
			return reconcile.Result{}, nil // a change of the object looks again
		}
		found = matches
	}
	var goneUID types.UID
	var last []byte
	if uid, kept, known := rn.Known(req.NamespacedName); known && (!found || uid != obj.GetUID()) {
		goneUID, last = uid, kept
	}
	if goneUID != "" {
		// The object the runner knows is gone, or no longer watched; one
		// of the same name waits until it is done with.
		res, dropped, err := r.gone(ctx, req.NamespacedName, goneUID, last, found)
		if err != nil || !dropped || !found {
			return res, err
		}
	}
	if !found {
		return reconcile.Result{}, nil
	}
	fin := finalizer.Name(r.def.Operator.Name)
	holds := slices.Contains(obj.GetFinalizers(), fin)
	if r.def.Watch.Finalizer && !holds && obj.GetDeletionTimestamp() == nil {
		// The finalizer comes before any run, so that no deletion passes
		// unseen.
		return finalizer.Patch(ctx, r.client, obj, fin, true)
	}
	rn.Track(obj)
	step, err := rn.Step(ctx, obj, definition.Vars{Self: obj.Object})
	if err != nil {
		return reconcile.Result{}, err
	}
	err = r.persist(ctx, obj, step.State, false)
	// After its record, also when the archive refused it. A short run's
	// end is recorded by this reconcile, not by one its end wakes.
	// In a burst (other runs executing) it does not wait: the run slots,
	// not the workers, then bound the runs in flight, and a watched
	// object's end costs no API write that waiting would save.
	wait := r.runWait
	if err != nil || rn.Executing() > 0 {
		wait = -1
	}
	if rn.LaunchWaiting(ctx, step.Start, obj.Object, wait) {
		if step, err = rn.Step(ctx, obj, definition.Vars{Self: obj.Object}); err != nil {
			return reconcile.Result{}, err
		}
		err = r.persist(ctx, obj, step.State, false)
		rn.Launch(step.Start, obj.Object)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if holds && obj.GetDeletionTimestamp() != nil && step.Idle() {
		// The delete handlers are done: let the object go.
		return finalizer.Patch(ctx, r.client, obj, fin, false)
	}
	return reconcile.Result{RequeueAfter: step.Requeue}, nil
}

// gone handles a known object that is no longer watched: deleted (or
// replaced by another of its name), its delete handlers run with its last
// state, then its record is dropped; still there but no longer selected,
// its record is dropped.
//
// dropped reports whether the runner is done with the object. replaced:
// an object of the same name is watched now, which waits for it; a gone
// object whose delete handlers gave up is then dropped, as the engine's
// start drops it (preload), rather than hold the new one for good.
func (r *reconciler) gone(ctx context.Context, key types.NamespacedName, uid types.UID, last []byte, replaced bool) (res reconcile.Result, dropped bool, err error) {
	rn := r.runner
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(last, &obj.Object); err != nil || obj.Object == nil {
		// Not kept: its name is all that is known.
		obj.Object = map[string]any{}
		obj.SetGroupVersionKind(r.def.Watch.GVK)
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		obj.SetUID(uid)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(r.def.Watch.GVK)
	err = r.reader.Get(ctx, key, live)
	switch {
	case err == nil && live.GetUID() == uid:
		if rn.Settle(ctx, key, live) {
			return reconcile.Result{}, false, nil // its run's end wakes it again
		}
		r.log.V(1).Info("no longer watched: forgotten", "namespace", key.Namespace, "name", key.Name)
		if fin := finalizer.Name(r.def.Operator.Name); slices.Contains(live.GetFinalizers(), fin) {
			// Nothing would remove it: opkit no longer looks at the object.
			if res, err := finalizer.Patch(ctx, r.client, live, fin, false); err != nil || res.RequeueAfter > 0 {
				return res, false, err
			}
		}
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	case err != nil && !apierrors.IsNotFound(err):
		return reconcile.Result{}, false, err
	}
	if !rn.HasDelete() {
		if rn.Settle(ctx, key, obj) {
			return reconcile.Result{}, false, nil
		}
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	if obj.GetDeletionTimestamp() == nil {
		now := metav1.Now()
		obj.SetDeletionTimestamp(&now)
	}
	run.EndPause(obj)
	step, err := rn.Step(ctx, obj, definition.Vars{Self: obj.Object})
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if step.Idle() {
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	if replaced && !step.Busy && step.Stalled != "" && step.Requeue == 0 {
		r.log.Info("dropping the record of a deleted object whose delete handlers gave up: an object of the same name is watched now",
			"namespace", key.Namespace, "name", key.Name, "uid", uid, "stalled", step.Stalled)
		return reconcile.Result{}, true, r.drop(ctx, key, uid)
	}
	err = r.persist(ctx, obj, step.State, true)
	rn.Launch(step.Start, obj.Object) // after its record, also when the archive refused it
	if err != nil {
		return reconcile.Result{}, false, err
	}
	requeue := step.Requeue
	if requeue == 0 && step.Stalled != "" {
		requeue = time.Minute // a gone object cannot be changed: look again now and then
	}
	return reconcile.Result{RequeueAfter: requeue}, false, nil
}

// drop forgets a watched object: its record in the archive and the
// runner's memory.
func (r *reconciler) drop(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	if err := r.store.DeleteState(ctx, r.def.Operator.Name, string(uid)); err != nil {
		return fmt.Errorf("dropping the record of %s from the archive: %w", key, err)
	}
	r.runner.Drop(key, uid)
	return nil
}

// persist writes an object's handler state to the archive when it
// changed, with the object as it is now (kept as its last state);
// deleted: the object is gone, its last state is kept as it was.
//
// An engine stopping does not cut the write: the step's records (a pause
// recorded, a run started) are made, and a state that does not hold them
// would be taken for the truth by the next engine (a gone object's pause,
// recorded, would never be resumed).
func (r *reconciler) persist(ctx context.Context, obj *unstructured.Unstructured, st *cause.State, deleted bool) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	rn := r.runner
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	persisted, kept, known := rn.Persisted(key)
	if known && bytes.Equal(persisted, data) {
		return nil
	}
	var last []byte
	if known && deleted {
		last = kept
	}
	if !deleted && rn.HasDelete() {
		last = run.Snapshot(obj.Object)
	}
	rec, err := json.Marshal(record{State: st, Object: last, Cluster: r.cluster})
	if err != nil {
		return err
	}
	s := &archive.State{
		Operator: r.def.Operator.Name, Key: string(obj.GetUID()), APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(),
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Data: rec, UpdatedAt: time.Now().UTC(),
	}
	if err := r.store.PutState(context.WithoutCancel(ctx), s); err != nil {
		return fmt.Errorf("recording the handler state of %s in the archive: %w", key, err)
	}
	rn.SetPersisted(key, obj.GetUID(), data, last)
	return nil
}

// needNamespaces checks that the handlers of a watch of a cluster-scoped
// kind name the namespaces their objects' would default to: a Job's, a
// ServiceAccount's, a Secret's.
func needNamespaces(d *definition.Definition) error {
	for i, h := range d.Operator.Spec.Handlers {
		field := fmt.Sprintf("spec.handlers[%d]", i)
		switch {
		case h.Job != nil && h.Job.Namespace == "":
			return fmt.Errorf("%s.job.namespace: required: the watched objects have no namespace for the Jobs", field)
		case h.Exec != nil && h.Exec.ServiceAccount != nil && h.Exec.ServiceAccount.Namespace == "":
			return fmt.Errorf("%s.exec.serviceAccount.namespace: required: the watched objects have no namespace for the ServiceAccount", field)
		case h.Exec != nil:
			for j, env := range h.Exec.Env {
				if ref := env.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Namespace == "" {
					return fmt.Errorf("%s.exec.env[%d].valueFrom.secretKeyRef.namespace: required: the watched objects have no namespace for the Secret", field, j)
				}
			}
		}
	}
	return nil
}

// Check refuses a watch of a kind the cluster does not serve or the
// engine may not get, list and watch where it watches, naming the field.
func Check(ctx context.Context, cfg Config, d *definition.Definition) error {
	w := d.Watch
	mapping, err := cfg.Mapper.RESTMapping(w.GVK.GroupKind(), w.GVK.Version)
	if err != nil {
		return fmt.Errorf("operator %s: spec.watch: kind %s is not served by the cluster: %w", d.Operator.Name, w.GVK, err)
	}
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		namespaces = []string{""}
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		if err := needNamespaces(d); err != nil {
			return fmt.Errorf("operator %s: %w (%s is cluster-scoped)", d.Operator.Name, err, w.GVK.Kind)
		}
	}
	verbs := []string{"get", "list", "watch"}
	if w.Finalizer {
		verbs = append(verbs, "patch")
	}
	// The reviews go at once (a few at a time), and the first refused in
	// the order of namespaces and verbs is reported.
	type check struct {
		ns, verb string
		allowed  bool
		err      error
	}
	var checks []*check
	for _, ns := range namespaces {
		for _, verb := range verbs {
			checks = append(checks, &check{ns: ns, verb: verb})
		}
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, c := range checks {
		g.Go(func() error {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Namespace: c.ns, Group: mapping.Resource.Group, Version: mapping.Resource.Version, Resource: mapping.Resource.Resource},
			}}
			got, err := cfg.Clientset.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			c.err, c.allowed = err, err == nil && got.Status.Allowed
			return nil
		})
	}
	_ = g.Wait()
	for _, c := range checks {
		if c.err != nil {
			return fmt.Errorf("operator %s: spec.watch: checking the engine may %s %s: %w", d.Operator.Name, c.verb, mapping.Resource.Resource, c.err)
		}
		if !c.allowed {
			where := "in all namespaces"
			if c.ns != "" {
				where = "in namespace " + c.ns
			}
			return fmt.Errorf("operator %s: spec.watch: the engine may not %s %s %s; grant it %s and %s on %s there", d.Operator.Name, c.verb, mapping.Resource.GroupResource(), where, strings.Join(verbs[:len(verbs)-1], ", "), verbs[len(verbs)-1], mapping.Resource.GroupResource())
		}
	}
	return nil
}
