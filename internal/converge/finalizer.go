package converge

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/finalizer"
)

// The finalizer protocol: how opkit makes sure the delete handlers of a
// custom resource (or of a watched object with spec.watch.finalizer) run
// before the object goes, as kube-rs's finalizer.rs documents its own.
//
// Flow:
//  1. An operator with delete handlers holds the finalizer
//     opkit.dev/<operator> (finalizer.Name) on its objects. It is added
//     before any other side effect of a reconcile, by three hands: the
//     API server itself at creation (a MutatingAdmissionPolicy, with
//     Options.AdmissionFinalizers, Kubernetes 1.36+), the finalizer
//     controller (its own queue and workers, so a new object gets it at
//     once however long the operator's queue is), and the reconcile.
//  2. Once the object is being deleted, its reconcile steps its delete
//     handlers (finalize): a run at a time, each retried by its policy,
//     their progress written to status.opkit.
//  3. When no delete handler has a run in flight, due, paused, stalled or
//     to come back to, the finalizer is removed, and the API server
//     deletes the object.
//
// Guarantees: every change of the finalizers is a JSON patch guarded by a
// test of the resourceVersion read (and of the entry removed): other
// controllers' finalizers are never rewritten, and a concurrent change
// fails the patch, which reads the object again. A delete handler that
// succeeded is never run again for the object (its key is in the archive),
// also across an engine's restart between the run and the finalizer's
// removal. An operator that loses its delete handlers removes its
// finalizer from its objects (the reconcile's wants != holds).
//
// Caveats: without the admission policy, an object created and deleted
// while no engine runs never gets the finalizer, and its delete handlers
// do not run. A delete handler that gave up holds the object (Stalled)
// until opkit retry or the finalizer is removed by hand. A policy left by
// an engine with AdmissionFinalizers is removed by one without, so that
// deletions do not wait for an engine that no longer asks for them.

// finalize runs the delete handlers of an object being deleted, then
// removes opkit's finalizer.
func (r *reconciler) finalize(ctx context.Context, cr *unstructured.Unstructured, fin string) (reconcile.Result, error) {
	if !r.runner.HasDelete() {
		return r.patchFinalizer(ctx, cr, fin, false)
	}
	step, err := r.runner.Step(ctx, cr, definition.Vars{Self: cr.Object})
	if err != nil {
		return reconcile.Result{}, err
	}
	if step.Idle() {
		return r.patchFinalizer(ctx, cr, fin, false)
	}
	// Still at work, waiting for a retry, or stalled: record where it is.
	own, _, _ := unstructured.NestedMap(cr.Object, "status", "opkit")
	if own == nil {
		own = map[string]any{}
	}
	before := maps.Clone(own)
	step.State.WriteTo(own)
	conds := compare.Conditions(cr)
	changed := false
	if c, ok := stalledCondition(conds, step); ok {
		changed = meta.SetStatusCondition(&conds, c)
	}
	if changed || !compare.SameValue(before, own) {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"opkit": compare.WithRemovals(before, own), "conditions": conds}})
		if err = r.client.Status().Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err == nil {
			r.memory.Record(cr.DeepCopy())
		}
	}
	r.runner.Launch(step.Start, cr.Object) // after the write, which its object then holds
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{RequeueAfter: step.Requeue}, nil
}

// patchFinalizer adds or removes opkit's finalizer with a JSON patch
// guarded by the resourceVersion read: other controllers' finalizers are
// never rewritten, and a concurrent change makes the patch fail and the
// object be read again.
func (r *reconciler) patchFinalizer(ctx context.Context, cr *unstructured.Unstructured, fin string, add bool) (reconcile.Result, error) {
	read := cr.GetResourceVersion()
	res, err := finalizer.Patch(ctx, r.client, cr, fin, add)
	if err == nil && cr.GetResourceVersion() != read {
		r.memory.Record(cr.DeepCopy()) // patched: cr is the API's answer
	}
	return res, err
}

// finalizerWorkers are the workers of an operator's finalizer controller.
const finalizerWorkers = 2

// finalizerReconciler gives opkit's finalizer to the objects of an
// operator with delete handlers that lack it. It has its own queue and
// workers, beside the operator's: a new object gets the finalizer at once,
// however many objects wait in the operator's queue, so that an object
// deleted soon after its creation still gets its delete handlers. pick
// is the reconciler of an object (during a rollout, of the definition it
// is on): one without delete handlers adds none.
type finalizerReconciler struct {
	pick func(types.NamespacedName) *reconciler
}

func (f *finalizerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r := f.pick(req.NamespacedName)
	if !r.runner.HasDelete() {
		return reconcile.Result{}, nil
	}
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(r.def.GVK)
	if err := r.client.Get(ctx, req.NamespacedName, cr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	fin := finalizer.Name(r.def.Operator.Name)
	if !lacksFinalizer(cr, fin) {
		return reconcile.Result{}, nil
	}
	return r.patchFinalizer(ctx, cr, fin, true)
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

// startFinalizers starts the finalizer controller of an operator whose
// reconciler holds finalizers, pick giving each object's; it stops with
// ctx.
func (cfg Config) startFinalizers(ctx context.Context, d *definition.Definition, pick func(types.NamespacedName) *reconciler) error {
	c, err := controller.NewTypedUnmanaged("finalizer-"+d.Operator.Name, cfg.Queue(&finalizerReconciler{pick: pick}, finalizerWorkers))
	if err != nil {
		return err
	}
	owner := &unstructured.Unstructured{}
	owner.SetGroupVersionKind(d.GVK)
	if err := c.Watch(source.Kind[client.Object](cfg.Cache, owner, &handler.EnqueueRequestForObject{}, lackingFinalizer(finalizer.Name(d.Operator.Name)))); err != nil {
		return err
	}
	go func() {
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			cfg.Log.Error(err, "finalizer controller stopped", "operator", d.Operator.Name)
		}
	}()
	return nil
}
