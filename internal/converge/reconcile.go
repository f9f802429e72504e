package converge

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/finalizer"
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
	// namespace is Config.Namespace: children and related objects
	// elsewhere are refused.
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
	ctx, endSpan := run.Traced(ctx, r.runner, r.def.Operator.Name, cr)
	defer endSpan()
	r.conditions.Record(cr)
	fin := finalizer.Name(r.def.Operator.Name)
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
	if c.failure != nil {
		failure = errors.Join(failure, c.failure)
	}
	if err := r.pruneInventory(ctx, cr, listed, c.keep); err != nil {
		failure = errors.Join(failure, err)
	}
	c.failure = failure
	step := r.step(ctx, cr, &vars, sv, &c)
	err := r.write(ctx, cr, vars, &c, step, sv)
	failure, requeue := c.failure, c.requeue
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

// step steps the object's handlers and life cycle (stepHandlers), c
// what the reconcile found so far: its failure and requeue are updated.
// A short run (one the runner can wait for, RunWait) is launched now and
// waited for, so that it is recorded by the status write to come, not a
// second one; the handlers are then stepped again.
func (r *reconciler) step(ctx context.Context, cr *unstructured.Unstructured, vars *definition.Vars, sv *lifecycle.Visit, c *converged) *run.Step {
	step, stepRequeue, serr := r.stepHandlers(ctx, cr, vars, sv)
	c.failure = errors.Join(c.failure, serr)
	c.requeue = sooner(c.requeue, stepRequeue)
	if step == nil || step.Status != nil || sv != nil || r.runWait <= 0 || !r.runner.Waitable(step.Start) {
		return step
	}
	// It sees the object as the write would leave it had the run not
	// ended yet (its record Running): what a run launched after the
	// write sees.
	self := withStatus(cr, r.statusFor(cr, *vars, c.keep, c.waiting, c.notReady, c.failure, step, sv).status)
	start := step.Start
	step.Start = nil // launched
	if r.runner.LaunchWaiting(ctx, start, self.Object, r.runWait) {
		next, nextRequeue, nerr := r.stepHandlers(ctx, cr, vars, sv)
		c.failure = errors.Join(c.failure, nerr)
		if next != nil {
			step = next
		}
		c.requeue = sooner(c.requeue, nextRequeue)
	}
	return step
}

// write writes the status (updateStatus) and tells the runner of it: a
// run's result written with it, or refused; the run the step decided
// starts once the status is written, and sees it. A life cycle's visit
// ends (its failure joins c's). It returns the write's error.
func (r *reconciler) write(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars, c *converged, step *run.Step, sv *lifecycle.Visit) error {
	written, err := r.updateStatus(ctx, cr, vars, c.keep, c.waiting, c.notReady, c.failure, step, sv)
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
		self := vars.Self
		if written != nil {
			self = written.Object
		}
		r.runner.Launch(step.Start, self)
	}
	if sv != nil {
		if serr := r.states.After(ctx, cr, sv, err == nil); serr != nil {
			c.failure = errors.Join(c.failure, serr)
		}
	}
	return err
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
		operatorPaused := false
		if step != nil {
			handlers, operatorPaused = step.State, step.OperatorPause != nil
		}
		requeue = sooner(requeue, r.states.Step(cr, sv, vars, handlers, operatorPaused)) // the state's timeout
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
