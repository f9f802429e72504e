package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/gauges"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/inventory"
	"github.com/opkit-dev/opkit/internal/lifecycle"
	"github.com/opkit-dev/opkit/internal/related"
	"github.com/opkit-dev/opkit/internal/run"
)

type reconciler struct {
	def    *definition.Definition
	client client.Client
	reader client.Reader // the API, uncached
	scopes *informer.Scopes
	// metadata writes children and statuses, asking for metadata
	// answers (see apply).
	metadata metadata.Interface
	events   events.EventRecorder
	runner   *run.Runner        // nil without handlers
	states   *lifecycle.Machine // nil without states (package lifecycle)
	// related indexes what each custom resource refers to.
	related *related.Index
	// conditions keeps each object's conditions for the gauges (package gauges).
	conditions *gauges.Table
	// namespace is Options.Namespace: children and related objects
	// elsewhere are refused (scope.go).
	namespace string
	// memory is the operator's per-object memory (package run): each
	// reconcile reads its object through it (read-your-writes), so that
	// a status written is not written twice while the cache does not show
	// it, and a run sees every earlier write; it forgets an object gone.
	memory *run.Memory
	// runWait is how long a reconcile waits for a run it starts
	// (Options.RunWait).
	runWait time.Duration
	// rolloutHash is the definition's hash (Definition.Hash) for an
	// operator with spec.rollout, written to status.opkit.definition:
	// which definition an object is on, and that it has been reconciled
	// by it. Empty otherwise, and nothing is written.
	rolloutHash string
}

var _ reconcile.Reconciler = &reconciler{}

// Reconcile converges one custom resource.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(r.def.GVK)
	if err := r.client.Get(ctx, req.NamespacedName, cr); err != nil {
		// Gone: its children are garbage-collected through their ownerReferences.
		if apierrors.IsNotFound(err) {
			r.memory.Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cr = r.memory.Newest(cr) // read-your-writes: the cache may not show the last write yet
	r.conditions.Record(cr)
	fin := FinalizerName(r.def.Operator.Name)
	holds := slices.Contains(cr.GetFinalizers(), fin)
	if cr.GetDeletionTimestamp() != nil {
		return r.deleting(ctx, cr, fin, holds)
	}
	// The finalizer comes before any other side effect, so that no
	// deletion can pass unseen.
	if wants := r.runner.HasDelete(); wants != holds {
		return r.patchFinalizer(ctx, cr, fin, wants)
	}
	vars := definition.Vars{Self: cr.Object, Children: map[string]map[string]any{}, Related: map[string]any{}}
	var sv *lifecycle.Visit
	if r.states != nil {
		sv = r.states.Begin(ctx, cr, &vars) // a new object's initial state, before its children render
	}
	listed := inventory.Read(cr)
	// What reads a related object that cannot be read waits for it, and
	// no handler runs for a change of one (a read error is not a change).
	failure := r.readRelated(ctx, cr, vars.Related)
	if failure != nil {
		vars.Related = nil
	}
	c := r.convergeChildren(ctx, cr, vars, listed)
	keep, waiting, notReady, requeue := c.keep, c.waiting, c.notReady, c.requeue
	if c.failure != nil {
		failure = errors.Join(failure, c.failure)
	}
	if err := r.pruneInventory(ctx, cr, listed, keep); err != nil {
		failure = errors.Join(failure, err)
	}
	step, stepRequeue, serr := r.stepHandlers(ctx, cr, &vars, sv)
	failure = errors.Join(failure, serr)
	requeue = sooner(requeue, stepRequeue)
	if step != nil && step.Status == nil && sv == nil && r.runWait > 0 && r.runner.Waitable(step.Start) {
		// A short run ends before the status is written, and is recorded
		// by the same write, not a second one. It sees the object as that
		// write would leave it had the run not ended yet (its record
		// Running): what a run launched after the write sees.
		self := withStatus(cr, r.statusFor(cr, vars, keep, waiting, notReady, failure, step, sv).status)
		start := step.Start
		step.Start = nil // launched
		if r.runner.LaunchWaiting(ctx, start, self.Object, r.runWait) {
			next, nextRequeue, nerr := r.stepHandlers(ctx, cr, &vars, sv)
			failure = errors.Join(failure, nerr)
			if next != nil {
				step = next
			}
			requeue = sooner(requeue, nextRequeue)
		}
	}
	written, err := r.updateStatus(ctx, cr, vars, keep, waiting, notReady, failure, step, sv)
	if step != nil && step.Status != nil {
		if err != nil {
			// The step is undone and done again: the run is recorded
			// again, failed by a refusal of its result; the run the step
			// decided does not start.
			r.runner.StatusRefused(cr, step, err)
			if run.Refusal(err) {
				err = nil // the run's failure, not the reconcile's
			}
		} else {
			r.runner.Written(cr, step)
		}
	}
	if step != nil {
		// The run decided starts once the status is written, and sees it:
		// the earlier run's record, a transition.
		self := vars.Self
		if written != nil {
			self = written.Object
		}
		r.runner.Launch(step.Start, self)
	}
	if sv != nil {
		if serr := r.states.After(ctx, cr, sv, err == nil); serr != nil {
			failure = errors.Join(failure, serr)
		}
	}
	if errors.Is(err, errGone) {
		return reconcile.Result{}, nil // its deletion reconciles it again
	}
	if apierrors.IsConflict(err) && sv != nil {
		// The state was decided over an older object than the API's: read
		// it again (the write was refused, so nothing moved twice).
		return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if failure != nil {
		return reconcile.Result{}, failure // retried with back-off
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// stepHandlers steps the object's handlers (package run), then its
// state machine's visit: the step (nil without handlers, or when it
// failed, with its error), and when to look again (0: no need).
func (r *reconciler) stepHandlers(ctx context.Context, cr *unstructured.Unstructured, vars *definition.Vars, sv *lifecycle.Visit) (step *run.Step, requeue time.Duration, failure error) {
	if r.runner != nil {
		var err error
		if step, err = r.runner.StepWriting(ctx, cr, *vars); err != nil {
			failure = err
		} else {
			requeue = step.Requeue
		}
		switch {
		case step != nil && step.Status != nil:
			// The guards and status fields read what the run's result
			// sets, written below with the rest.
			vars.Self = sv.Self(run.WithStatus(cr, step.Status).Object)
		case step != nil && step.Wrote:
			vars.Self = sv.Self(cr.Object) // the guards and status fields read what the run wrote
		}
	}
	if sv != nil && (r.runner == nil || step != nil) {
		var handlers *cause.State
		if step != nil {
			handlers = step.State
		}
		requeue = sooner(requeue, r.states.Step(cr, sv, vars, handlers)) // the state's timeout
	}
	return step, requeue, failure
}

// sooner is the sooner of two times to look again, 0 being never.
func sooner(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// converged is what converging a custom resource's children found.
type converged struct {
	keep              []inventory.Ref // the inventory to write
	waiting, notReady []string        // children by id
	requeue           time.Duration   // when to look again; 0 for no need
	failure           error
}

// convergeChildren converges cr's children in order, each live child put
// into vars.Children for the next; listed is the inventory read, whose
// refs of a child that failed or waits are kept.
func (r *reconciler) convergeChildren(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, listed []inventory.Ref) converged {
	var c converged
	for _, child := range r.def.Children {
		res, err := r.convergeChild(ctx, cr, child, vars)
		if err != nil && !errors.Is(err, errRecreating) {
			err = fmt.Errorf("child %s: %w", child.ID, err) // named once, here
		}
		if res.ref != nil {
			c.keep = inventory.Append(c.keep, *res.ref)
		}
		if err != nil || res.waiting {
			// What this child rendered to before is unknown now: keep it.
			for _, ref := range listed {
				if ref.ID == child.ID {
					c.keep = inventory.Append(c.keep, ref)
				}
			}
		}
		switch {
		case errors.Is(err, errRecreating):
			c.waiting = append(c.waiting, child.ID) // the Recreating event says why
			c.requeue = time.Second
		case err != nil:
			c.failure = errors.Join(c.failure, err)
			r.events.Eventf(cr, nil, corev1.EventTypeWarning, "ChildFailed", "Reconcile", "%v", err)
		case res.waiting:
			c.waiting = append(c.waiting, child.ID)
		case res.live != nil:
			vars.Children[child.ID] = res.live.Object
			if ready, err := child.Ready(res.live.Object); err != nil || !ready {
				c.notReady = append(c.notReady, child.ID)
			}
		}
	}
	return c
}

// deleting is the reconcile of an object being deleted: a decision on it
// is refused (its state moves no more), and the finalizer's holder
// finalizes it.
func (r *reconciler) deleting(ctx context.Context, cr *unstructured.Unstructured, fin string, holds bool) (reconcile.Result, error) {
	if r.states != nil {
		if err := r.states.Deleting(ctx, cr); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !holds {
		return reconcile.Result{}, nil
	}
	return r.finalize(ctx, cr, fin)
}

var errRecreating = errors.New("deleted to be re-created: a field it changes is immutable")

// errGone: the object was deleted before its status was written.
var errGone = errors.New("the object is gone")

// childResult is what converging one child found.
type childResult struct {
	// live is the object as it now is; nil when it is not known.
	live *unstructured.Unstructured
	// ref is what the child rendered to; nil when it was not rendered.
	ref *inventory.Ref
	// waiting: the child reads another child that does not exist yet.
	waiting bool
}

// convergeChild renders one child and applies it when the live object
// differs. A child excluded by includeWhen gives an empty result: the
// inventory prunes it.
func (r *reconciler) convergeChild(ctx context.Context, cr *unstructured.Unstructured, child *definition.Child, vars definition.Vars) (childResult, error) {
	obj, err := Desired(r.def.Operator.Name, cr, child, vars, r.scopes.Namespaced) // in plan.go: opkit plan renders with it
	if errors.Is(err, definition.ErrChildMissing) {
		return childResult{waiting: true}, nil
	}
	if err != nil || obj == nil {
		return childResult{}, err
	}
	if namespaced, _ := r.scopes.Namespaced(child.GVK); namespaced { // known: Desired asked
		if why := outside(r.namespace, obj.GetNamespace()); why != "" {
			return childResult{}, fmt.Errorf("%s %s: %s", child.GVK.Kind, obj.GetName(), why)
		}
	}
	hash := obj.GetAnnotations()[v1alpha1.AppliedHashAnnotation]

	ref := inventory.RefOf(child.ID, obj)
	rendered := childResult{ref: &ref}

	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(child.GVK)
	err = r.client.Get(ctx, client.ObjectKeyFromObject(obj), current)
	switch {
	case err == nil && current.GetAnnotations()[v1alpha1.AppliedHashAnnotation] == hash && compare.Contains(current.Object, obj.Object):
		rendered.live = current
		return rendered, nil // converged: no write
	case err != nil && !apierrors.IsNotFound(err):
		return rendered, err
	}
	existed := err == nil
	if existed && !metav1.IsControlledBy(current, cr) {
		return rendered, fmt.Errorf("%s %s exists and is not controlled by this %s; opkit does not take over objects it did not make", child.GVK.Kind, obj.GetName(), cr.GetKind())
	}
	if existed && child.Recreate && current.GetAnnotations()[v1alpha1.AppliedHashAnnotation] != hash {
		return rendered, r.recreate(ctx, cr, child, current)
	}
	err = r.apply(ctx, obj)
	if existed && immutable(err) {
		return rendered, r.recreate(ctx, cr, child, current)
	}
	if err != nil {
		return rendered, fmt.Errorf("applying %s %s: %w", child.GVK.Kind, obj.GetName(), err)
	}
	// A change to an existing child is posted; a creation is not: the
	// inventory and Ready show it, and an Event per child created would be
	// one more API write per object.
	if existed {
		r.events.Eventf(cr, nil, corev1.EventTypeNormal, "Updated", "Apply", "updated %s %s", child.GVK.Kind, obj.GetName())
	}
	rendered.live = obj
	return rendered, nil
}

// apply applies obj with server-side apply, as the engine's field manager,
// taking over conflicting fields. The answer is asked as metadata only:
// the API server encodes it in protobuf without the object's content,
// which costs it and the engine less than the whole object as JSON, and
// the engine reads nothing of it but the error (the applied object is
// obj).
func (r *reconciler) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = r.patch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
	return err
}

// patch patches an object of kind gvk, or its subresource, through the
// metadata client: the answer is the object's metadata.
func (r *reconciler) patch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresource ...string) (*metav1.PartialObjectMetadata, error) {
	k, err := r.scopes.Of(gvk)
	if err != nil {
		return nil, err
	}
	return r.metadata.Resource(k.Resource).Namespace(namespace).Patch(ctx, name, pt, data, opts, subresource...)
}

// immutable reports whether the API refused an update because it would
// change a field that cannot change.
func immutable(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "immutable") || strings.Contains(msg, "Forbidden: pod updates may not change")
}

func (r *reconciler) recreate(ctx context.Context, cr *unstructured.Unstructured, child *definition.Child, current *unstructured.Unstructured) error {
	err := r.client.Delete(ctx, current, client.Preconditions{UID: ptr.To(current.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s to re-create it: %w", child.GVK.Kind, current.GetName(), err)
	}
	r.events.Eventf(cr, nil, corev1.EventTypeNormal, "Recreating", "Delete", "deleted %s %s to re-create it with its new template", child.GVK.Kind, current.GetName())
	return errRecreating
}

// updateStatus writes the status fields, observedGeneration and the
// conditions, only when they changed. It returns the object as its write
// left it, also recorded in r.memory; nil when it wrote nothing.
func (r *reconciler) updateStatus(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, children []inventory.Ref, waiting, notReady []string, failure error, step *run.Step, sv *lifecycle.Visit) (*unstructured.Unstructured, error) {
	d := r.statusFor(cr, vars, children, waiting, notReady, failure, step, sv)
	oldStatus, _ := cr.Object["status"].(map[string]any)
	status, precondition := d.status, d.precondition
	if compare.SameValue(oldStatus, status) {
		return nil, nil // also a status written already: cr is read through r.memory
	}
	// Only what this reconcile changes is written: the object read may be
	// older than a handler's result, whose status fields a whole-status
	// patch would set back.
	newJSON, err := json.Marshal(compare.StatusDelta(oldStatus, status))
	if err != nil {
		return nil, err
	}
	head := []byte(`{"status":`)
	if precondition {
		// The state moves: only over the object it was decided from.
		rv, _ := json.Marshal(cr.GetResourceVersion())
		head = append(append([]byte(`{"metadata":{"resourceVersion":`), rv...), `},"status":`...)
	}
	patch := append(append(head, newJSON...), '}')
	// Patched as metadata: the API server answers with the object's
	// metadata only, in protobuf, which is cheaper for both sides to
	// encode and decode than the whole object as JSON; nothing reads the
	// answer but its error.
	answer, err := r.patch(ctx, r.def.GVK, cr.GetNamespace(), cr.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errGone
		}
		return nil, err
	}
	// The object as the write left it: what was read, with this status and
	// the answer's resourceVersion (the answer has no content to read).
	written := withStatus(cr, status)
	written.SetResourceVersion(answer.GetResourceVersion())
	r.memory.Record(written.DeepCopy()) // cr's maps are shared, and its caller's
	return written, nil
}

// desiredStatus is the status a reconcile writes.
type desiredStatus struct {
	status map[string]any
	// precondition: the write is made only over the resourceVersion read
	// (the object's state moves).
	precondition bool
}

// statusFor is the status a reconcile writes: the status fields,
// observedGeneration, opkit's own record (the inventory, the handlers')
// and the conditions, over the status read. It changes nothing cr holds.
func (r *reconciler) statusFor(cr *unstructured.Unstructured, vars definition.Vars, children []inventory.Ref, waiting, notReady []string, failure error, step *run.Step, sv *lifecycle.Visit) desiredStatus {
	// Read, not copied: nothing below changes what oldStatus holds.
	oldStatus, _ := cr.Object["status"].(map[string]any)
	status := make(map[string]any, len(oldStatus)+len(r.def.Status)+3)
	for k, v := range oldStatus {
		status[k] = v
	}
	if step != nil && step.Status != nil {
		run.MergeStatus(status, step.Status) // the run's result, in this one patch
	}
	for _, f := range r.def.Status {
		v, err := f.Evaluate(vars)
		if errors.Is(err, definition.ErrChildMissing) {
			continue // keep the last value until the child exists
		}
		if err != nil {
			failure = errors.Join(failure, err)
			continue
		}
		status[f.Name] = v
	}
	status["observedGeneration"] = cr.GetGeneration()
	own, _ := status["opkit"].(map[string]any)
	own = maps.Clone(own)
	if own == nil {
		own = map[string]any{}
	}
	if len(children) == 0 {
		delete(own, "children")
	} else {
		own["children"] = inventory.Generic(children)
	}
	if step != nil {
		step.State.WriteTo(own)
	}
	if r.rolloutHash != "" {
		own["definition"] = r.rolloutHash
	} else {
		delete(own, "definition")
	}
	if len(own) == 0 {
		delete(status, "opkit")
	} else {
		status["opkit"] = own
	}

	conds := compare.Conditions(cr)
	set := conditionsToSet(&conds, r.def.Operator.Name, waiting, notReady, failure, step)
	precondition := false
	if sv != nil {
		set, precondition = sv.WriteTo(status, set)
	}
	for _, c := range set {
		c.ObservedGeneration = cr.GetGeneration()
		meta.SetStatusCondition(&conds, c) // keeps lastTransitionTime when the status is unchanged
	}
	status["conditions"] = compare.ConditionValues(conds)
	return desiredStatus{status: status, precondition: precondition}
}

// withStatus is cr with status in place of its own, sharing cr's maps
// but its metadata and status.
func withStatus(cr *unstructured.Unstructured, status map[string]any) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: maps.Clone(cr.Object)}
	md, _ := cr.Object["metadata"].(map[string]any)
	out.Object["metadata"] = maps.Clone(md)
	out.Object["status"] = status
	return out
}

// conditionsToSet are the conditions a reconcile sets: Ready and
// Degraded, and with handlers Stalled and Paused (by the object or by its
// operator's pause, operator naming it); Paused is removed from
// conds while the handlers are not paused.
func conditionsToSet(conds *[]metav1.Condition, operator string, waiting, notReady []string, failure error, step *run.Step) []metav1.Condition {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "ChildrenReady", Message: "all children exist and are ready"}
	switch {
	case failure != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ReconcileFailed", truncate(failure.Error())
	case len(waiting) > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ChildrenPending", "waiting for: "+strings.Join(waiting, ", ")
	case step != nil && step.Stalled != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Stalled", step.Stalled
	case len(notReady) > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ChildrenNotReady", "not ready: "+strings.Join(notReady, ", ")
	}
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "NoErrors", Message: "the last reconcile succeeded"}
	if failure != nil {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, "ReconcileFailed", truncate(failure.Error())
	}
	set := []metav1.Condition{ready, degraded}
	if c, ok := stalledCondition(*conds, step); ok {
		set = append(set, c)
	}
	switch {
	case step != nil && step.Paused && step.OperatorPause != nil:
		set = append(set, metav1.Condition{Type: v1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: "OperatorPaused",
			Message: operatorPausedMessage(operator, *step.OperatorPause)})
	case step != nil && step.Paused:
		set = append(set, metav1.Condition{Type: v1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: "PausedByAnnotation",
			Message: "handlers are paused: no run starts until the annotation " + v1alpha1.PauseAnnotation + " is removed"})
	default:
		meta.RemoveStatusCondition(conds, v1alpha1.ConditionPaused)
	}
	return set
}

// stalledCondition is the Stalled condition to set, if any: True while a
// handler has given up; False once it no longer has, for an object that
// was Stalled (lastTransitionTime says since when). An object that never
// was has none, which reads as False (kstatus): every status write of
// an operator with handlers is the smaller for it.
func stalledCondition(conds []metav1.Condition, step *run.Step) (metav1.Condition, bool) {
	switch {
	case step == nil:
		return metav1.Condition{}, false
	case step.Stalled != "":
		return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "HandlerGaveUp", Message: truncate(step.Stalled)}, true
	case meta.FindStatusCondition(conds, v1alpha1.ConditionStalled) != nil:
		return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: "NoStalledHandler", Message: "no handler has given up"}, true
	}
	return metav1.Condition{}, false
}
