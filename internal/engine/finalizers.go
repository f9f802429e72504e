package engine

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// finalizerWorkers are the workers of an operator's finalizer controller.
const finalizerWorkers = 2

// finalizerReconciler gives opkit's finalizer to the objects of an
// operator with delete handlers that lack it. It has its own queue and
// workers, beside the operator's: a new object gets the finalizer at once,
// however many objects wait in the operator's queue, so that an object
// deleted soon after its creation still gets its delete handlers.
type finalizerReconciler struct {
	r *reconciler
}

func (f *finalizerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(f.r.def.GVK)
	if err := f.r.client.Get(ctx, req.NamespacedName, cr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	fin := FinalizerName(f.r.def.Operator.Name)
	if !lacksFinalizer(cr, fin) {
		return reconcile.Result{}, nil
	}
	return f.r.patchFinalizer(ctx, cr, fin, true)
}

// lacksFinalizer reports whether o is live and without the finalizer fin.
func lacksFinalizer(o client.Object, fin string) bool {
	return o.GetDeletionTimestamp() == nil && !slices.Contains(o.GetFinalizers(), fin)
}

// lackingFinalizer selects the live objects without the finalizer fin.
func lackingFinalizer(fin string) predicate.Funcs {
	lacks := func(o client.Object) bool { return lacksFinalizer(o, fin) }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return lacks(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return lacks(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// startFinalizerController starts the finalizer controller of an operator
// whose reconciler holds finalizers; it stops with ctx.
func (e *Engine) startFinalizerController(ctx context.Context, r *reconciler) error {
	c, err := controller.NewTypedUnmanaged("finalizer-"+r.def.Operator.Name, e.queues.options(&finalizerReconciler{r: r}, finalizerWorkers))
	if err != nil {
		return err
	}
	owner := &unstructured.Unstructured{}
	owner.SetGroupVersionKind(r.def.GVK)
	if err := c.Watch(source.Kind[client.Object](e.mgr.GetCache(), owner, &handler.EnqueueRequestForObject{}, lackingFinalizer(FinalizerName(r.def.Operator.Name)))); err != nil {
		return err
	}
	go func() {
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			e.mgr.GetLogger().Error(err, "finalizer controller stopped", "operator", r.def.Operator.Name)
		}
	}()
	return nil
}
