package engine

// The finalizer protocol: how opkit makes sure the delete handlers of a
// custom resource (or of a watched object with spec.watch.finalizer) run
// before the object goes, as kube-rs's finalizer.rs documents its own.
//
// Flow:
//  1. An operator with delete handlers holds the finalizer
//     opkit.dev/<operator> (FinalizerName) on its objects. It is added
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

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/finalizer"
	"github.com/opkit-dev/opkit/internal/run"
)

// FinalizerName is the finalizer opkit holds on the custom resources of an
// operator with delete handlers (finalizer.Name).
func FinalizerName(operator string) string { return finalizer.Name(operator) }

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
	fin := FinalizerName(r.def.Operator.Name)
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

// startFinalizerController starts the finalizer controller of an operator
// whose reconciler holds finalizers, pick giving each object's; it stops
// with ctx.
func (e *Engine) startFinalizerController(ctx context.Context, d *definition.Definition, pick func(types.NamespacedName) *reconciler) error {
	c, err := controller.NewTypedUnmanaged("finalizer-"+d.Operator.Name, e.queues.Options(&finalizerReconciler{pick: pick}, finalizerWorkers))
	if err != nil {
		return err
	}
	owner := &unstructured.Unstructured{}
	owner.SetGroupVersionKind(d.GVK)
	if err := c.Watch(source.Kind[client.Object](e.mgr.GetCache(), owner, &handler.EnqueueRequestForObject{}, lackingFinalizer(FinalizerName(d.Operator.Name)))); err != nil {
		return err
	}
	go func() {
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			e.mgr.GetLogger().Error(err, "finalizer controller stopped", "operator", d.Operator.Name)
		}
	}()
	return nil
}

// finalizerPolicyName names the MutatingAdmissionPolicy and its binding
// that give an operator's custom resources its finalizer at creation:
// opkit-finalizer.<operator>, and .<namespace> for an engine that acts in
// one namespace (Options.Namespace), whose policy is its own, bound to
// that namespace, so that engines of several namespaces neither share
// nor remove each other's.
func (e *Engine) finalizerPolicyName(operator string) string {
	if e.opts.Namespace != "" {
		return "opkit-finalizer." + operator + "." + e.opts.Namespace
	}
	return "opkit-finalizer." + operator
}

// syncFinalizerPolicy gives an operator the finalizer policy it is to
// have: with AdmissionFinalizers, applyFinalizerPolicy's; without, none.
// A policy an earlier engine with AdmissionFinalizers left would make
// every deletion wait for an engine that no longer asks for it: it is
// removed, and the log says so in one line. An engine that may not delete
// policies (its RBAC made without --admission-finalizers), or an API
// server without them, cannot have one to remove: nothing is said.
func (e *Engine) syncFinalizerPolicy(ctx context.Context, d *definition.Definition) error {
	if e.opts.AdmissionFinalizers {
		return e.applyFinalizerPolicy(ctx, d)
	}
	_, err := e.removeFinalizerPolicy(ctx, d.Operator.Name, "this engine runs without --admission-finalizers")
	if err != nil && !apierrors.IsForbidden(err) && !meta.IsNoMatchError(err) {
		e.mgr.GetLogger().Error(err, "removing the admission policy an engine with --admission-finalizers left; delete it by hand", "operator", d.Operator.Name, "policy", e.finalizerPolicyName(d.Operator.Name))
	}
	return nil
}

// applyFinalizerPolicy makes the API server itself add the operator's
// finalizer to each custom resource it creates, with a
// MutatingAdmissionPolicy (Kubernetes 1.36+): an object created and deleted
// before the engine reconciles it (during an outage, or while the engine
// is away) still gets its delete handlers. Operators without delete
// handlers have no policy. The policy of an Operator read from the
// cluster is owned by it: deleting the Operator deletes its policy, even
// while no engine runs.
func (e *Engine) applyFinalizerPolicy(ctx context.Context, d *definition.Definition) error {
	name := e.finalizerPolicyName(d.Operator.Name)
	if !run.HasDeleteHandler(d) {
		_, err := e.removeFinalizerPolicy(ctx, d.Operator.Name, "the operator has no delete handler")
		return err
	}
	labels := map[string]string{definition.OperatorLabel: d.Operator.Name}
	var owners []metav1.OwnerReference
	if op := d.Operator; op.UID != "" {
		owners = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Name: op.Name, UID: op.UID}}
	}
	match := &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule:       admissionv1.Rule{APIGroups: []string{d.GVK.Group}, APIVersions: []string{"*"}, Resources: []string{d.Plural}},
		},
	}}}
	if ns := e.opts.Namespace; ns != "" {
		// The engine's namespace alone (scope.go).
		match.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	policy := &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: match,
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				// finalizers is a set: the entry joins those given.
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: fmt.Sprintf(`Object{metadata: Object.metadata{finalizers: [%q]}}`, FinalizerName(d.Operator.Name))},
			}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	for _, obj := range []client.Object{policy, binding} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
		if err := e.client.Apply(ctx, apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, name, err)
		}
	}
	return nil
}

// removeFinalizerPolicy deletes an operator's finalizer policy and its
// binding, if any, and reports whether there was one; the log says so in
// one line, with why.
func (e *Engine) removeFinalizerPolicy(ctx context.Context, operator, why string) (bool, error) {
	name := e.finalizerPolicyName(operator)
	removed := false
	for _, obj := range []client.Object{
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
	} {
		switch err := e.client.Delete(ctx, obj); {
		case err == nil:
			removed = true
		case !apierrors.IsNotFound(err):
			return removed, err
		}
	}
	if removed {
		e.mgr.GetLogger().Info("removed the admission policy "+name+" that gave new objects the operator's finalizer: "+why+"; deletions no longer wait for an engine", "operator", operator)
	}
	return removed, nil
}

// deleteAll deletes each of objs in turn, those already gone included,
// and stops at the first other error.
func deleteAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
