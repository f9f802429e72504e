package baseline

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// The watch baseline is the hand-written counterpart of an opkit watch
// operator on Deployments (bench/watch.yaml): a handler on create and on
// a change of the containers, which writes nothing. The manager's cache
// holds the Deployments of one namespace that carry the labels (the API
// server filters them), typed, with controller-runtime's defaults
// otherwise; the reconciler keeps, for each Deployment it has seen, its
// uid and a hash of the containers it last handled, in memory, and
// reports each object it handles.

// WatchOptions configures [WatchCache] and [SetupWatch].
type WatchOptions struct {
	// Namespace is the namespace watched. Required.
	Namespace string
	// Selector selects the Deployments by label, on the API server's side.
	// Required.
	Selector labels.Selector
	// Workers is the number of concurrent reconciles. Defaults to 1, as
	// controller-runtime's.
	Workers int
	// Handled is called once for each Deployment first seen ("create") and
	// each time its containers changed since it was last handled
	// ("update"). It is called from a reconcile: it must not block.
	// Defaults to nothing.
	Handled func(key types.NamespacedName, trigger string)
}

// WatchCache returns the manager's cache options for the watch: the
// Deployments of o.Namespace that o.Selector selects, nothing else.
func WatchCache(o WatchOptions) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}, Label: o.Selector},
	}}
}

// SetupWatch registers the watch with mgr, whose cache must come from
// [WatchCache] with the same options.
func SetupWatch(mgr ctrl.Manager, o WatchOptions) error {
	if o.Namespace == "" || o.Selector == nil {
		return errors.New("baseline watch: Namespace and Selector are required")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("deployment-watch").
		For(&appsv1.Deployment{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.Workers}).
		Complete(&Watcher{Reader: mgr.GetClient(), Handled: o.Handled})
}

// Watcher handles the watched Deployments. Its zero value, with a Reader,
// is ready to use.
type Watcher struct {
	client.Reader
	// Handled is WatchOptions.Handled.
	Handled func(key types.NamespacedName, trigger string)

	mu   sync.Mutex
	seen map[types.NamespacedName]seenDeployment
}

// seenDeployment is what the watch keeps of a Deployment it handled.
type seenDeployment struct {
	uid        types.UID
	containers uint64 // hash of the containers last handled
}

// Reconcile handles a Deployment first seen or whose containers changed,
// and forgets one that is gone (from the cache: deleted, or no longer
// labelled).
func (w *Watcher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d appsv1.Deployment
	if err := w.Get(ctx, req.NamespacedName, &d); err != nil {
		if apierrors.IsNotFound(err) {
			w.mu.Lock()
			delete(w.seen, req.NamespacedName)
			w.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	sum, err := hashContainers(d.Spec.Template.Spec.Containers)
	if err != nil {
		return ctrl.Result{}, err
	}
	w.mu.Lock()
	if w.seen == nil {
		w.seen = map[types.NamespacedName]seenDeployment{}
	}
	last, known := w.seen[req.NamespacedName]
	trigger := ""
	switch {
	case !known || last.uid != d.UID:
		trigger = "create"
	case last.containers != sum:
		trigger = "update"
	}
	if trigger != "" {
		w.seen[req.NamespacedName] = seenDeployment{uid: d.UID, containers: sum}
	}
	w.mu.Unlock()
	if trigger != "" && w.Handled != nil {
		w.Handled(req.NamespacedName, trigger)
	}
	return ctrl.Result{}, nil
}

func hashContainers(cs []corev1.Container) (uint64, error) {
	data, err := json.Marshal(cs)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64(), nil
}
