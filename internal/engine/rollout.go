package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Staged rollouts (spec.rollout, docs/changing-operators.md).
//
// The Rollout object of an operator (api/v1alpha1.RolloutObject) is the
// one record of where its objects are: the definition they were on
// (From), the one they move to (To), the objects moved, the step. The
// engine keeps it whenever the operator has spec.rollout, so that the
// next start with a changed definition, whether from a file or an
// Operator, knows which definition the objects are on and can run both.
//
// While a rollout is under way, the operator's one controller runs two
// reconcilers, one per definition (split), each with its handlers, and
// sharing the operator's memory: every object is reconciled by the
// definition the Rollout says, and an object moved keeps what the engine
// knew of it. The driver, in the operator (so on the acting replica
// alone), takes the steps: it writes the Rollout first, then moves the
// objects in memory, so that a restart finds them where it left them.
//
// An object is healthy when it has been reconciled by To
// (status.opkit.definition), is Ready, is neither Degraded nor Stalled,
// every create and update handler of To is done with its generation (a
// handler still running holds the step: its outcome is not known), and
// no handler of it has failed since its last success. The
// next step waits until every moved object has been healthy for settle;
// a moved object Degraded, Stalled or with a failed handler pauses the
// rollout until a person continues (that object then pauses it no more
// until it is healthy again) or undoes it (every object back on From;
// To is not rolled out again until the definition changes, or a person
// continues).

// rolloutTick is how often the driver looks at its objects and at the
// Rollout's requests.
const rolloutTick = time.Second

// rollout is an operator's rollout: prepared at its start, driven while
// it runs.
type rollout struct {
	e   *Engine
	def *definition.Definition // To: the definition the engine was given
	// from is the definition objects not moved are on; nil when every
	// object is on def (then nothing is driven).
	from  *definition.Definition
	moved map[types.NamespacedName]bool // as the Rollout says at the start
	// split runs both definitions; nil when from is.
	split *split
	// moves wakes the objects a step or an undo moved.
	moves chan event.GenericEvent
	log   logr.Logger
	// said is the last problem logged, so that it is logged once.
	said string

	noteMu sync.Mutex
	note   *rolloutNote // what its Operator says of it; nil: nothing
}

// rolloutNote is what a rollout that waits for a person says on its
// Operator (operators.go's setStatus): Ready stays True, the operator
// runs, with this reason and message, and Degraded is True with them,
// so that kubectl get operators shows it.
type rolloutNote struct{ reason, message string }

// noteOf is the note of a rollout's status: Paused and RolledBack wait
// for a person; nil for any other phase.
func noteOf(op string, st *v1alpha1.RolloutStatus) *rolloutNote {
	switch st.Phase {
	case v1alpha1.RolloutPaused:
		return &rolloutNote{ReasonRolloutPaused, fmt.Sprintf("running; the rollout of definition %s is paused (%s): opkit rollout continue %s, or opkit rollout undo %s", st.To.Hash, st.Reason, op, op)}
	case v1alpha1.RolloutRolledBack:
		return &rolloutNote{ReasonRolledBack, fmt.Sprintf("running definition %s, not this one (%s), whose rollout was undone (%s): change the definition, or opkit rollout continue %s", st.From.Hash, st.To.Hash, st.Reason, op)}
	}
	return nil
}

// say keeps the note of st and, when it changed, writes it on the
// Operator.
func (ro *rollout) say(ctx context.Context, st *v1alpha1.RolloutStatus) {
	if !ro.setNote(st) {
		return
	}
	if err := ro.noteOnOperator(ctx); err != nil {
		ro.log.Error(err, "saying the rollout's state on the Operator")
	}
}

// setNote keeps the note of st, and reports whether it changed.
func (ro *rollout) setNote(st *v1alpha1.RolloutStatus) bool {
	note := noteOf(ro.def.Operator.Name, st)
	ro.noteMu.Lock()
	defer ro.noteMu.Unlock()
	if (note == nil) == (ro.note == nil) && (note == nil || *note == *ro.note) {
		return false
	}
	ro.note = note
	return true
}

// rolloutNote is the note of operator's rollout; nil when it has none,
// or none that waits for a person.
func (e *Engine) rolloutNote(operator string) *rolloutNote {
	e.mu.Lock()
	o := e.running[operator]
	e.mu.Unlock()
	if o == nil || o.rollout == nil {
		return nil
	}
	o.rollout.noteMu.Lock()
	defer o.rollout.noteMu.Unlock()
	return o.rollout.note
}

// noteOnOperator writes the rollout's note on its Operator's conditions,
// as its reconcile would (setStatus): an Operator that is not Ready for
// another reason keeps that.
func (ro *rollout) noteOnOperator(ctx context.Context) error {
	op := &v1alpha1.Operator{}
	if err := ro.e.client.Get(ctx, client.ObjectKey{Name: ro.def.Operator.Name}, op); err != nil {
		return client.IgnoreNotFound(err)
	}
	ready := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != op.Generation {
		return nil // its reconcile writes it, with the note
	}
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonRunning, Message: runningMessage(ro.def, op.Status.CRD)}
	return (&operatorReconciler{engine: ro.e}).setStatus(ctx, op, c, op.Status.CRD)
}

// split is the reconciler of an operator with two definitions: each
// object goes to the one it is on.
type split struct {
	from, to *reconciler

	mu    sync.RWMutex
	moved map[types.NamespacedName]bool
}

// pick returns the reconciler of the object key.
func (s *split) pick(key types.NamespacedName) *reconciler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.moved[key] {
		return s.to
	}
	return s.from
}

// Reconcile reconciles the object with its definition's reconciler.
func (s *split) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return s.pick(req.NamespacedName).Reconcile(ctx, req)
}

// setMoved replaces the objects moved, returning those whose definition
// changed.
func (s *split) setMoved(moved map[types.NamespacedName]bool) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []types.NamespacedName
	for k := range moved {
		if !s.moved[k] {
			changed = append(changed, k)
		}
	}
	for k := range s.moved {
		if !moved[k] {
			changed = append(changed, k)
		}
	}
	s.moved = moved
	return changed
}

// rolloutName names an operator's Rollout object: the operator's name,
// and .<namespace> for an engine of one namespace (its objects are its
// own to roll out).
func (e *Engine) rolloutName(operator string) string {
	if e.opts.Namespace != "" {
		return operator + "." + e.opts.Namespace
	}
	return operator
}

// ensureRollouts installs the Rollout CRD, once.
func (e *Engine) ensureRollouts(ctx context.Context) error {
	e.mu.Lock()
	done := e.rolloutsCRD
	e.mu.Unlock()
	if done {
		return nil
	}
	if err := e.installOwnCRD(ctx, v1alpha1.RolloutCRD(), v1alpha1.RolloutKind); err != nil {
		return err
	}
	e.mu.Lock()
	e.rolloutsCRD = true
	e.mu.Unlock()
	return nil
}

// rolloutDefinition is d as a Rollout keeps it.
func rolloutDefinition(d *definition.Definition) (v1alpha1.RolloutDefinition, error) {
	op := d.Operator
	data, err := json.Marshal(struct {
		APIVersion string                `json:"apiVersion"`
		Kind       string                `json:"kind"`
		Metadata   map[string]string     `json:"metadata"`
		Spec       v1alpha1.OperatorSpec `json:"spec"`
	}{v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind, map[string]string{"name": op.Name}, op.Spec})
	if err != nil {
		return v1alpha1.RolloutDefinition{}, err
	}
	return v1alpha1.RolloutDefinition{Hash: d.Hash(), Operator: string(data)}, nil
}

// compileKept compiles a definition a Rollout keeps, with its files
// (exec handlers' commands) where d's are.
func (e *Engine) compileKept(d *definition.Definition, kept v1alpha1.RolloutDefinition) (*definition.Definition, error) {
	var op v1alpha1.Operator
	if err := json.Unmarshal([]byte(kept.Operator), &op); err != nil {
		return nil, fmt.Errorf("operator %s: the definition %s its Rollout keeps is not an Operator: %w", d.Operator.Name, kept.Hash, err)
	}
	old, err := definition.Compile(&definition.Source{Operator: &op, File: d.Source})
	if err != nil {
		return nil, fmt.Errorf("operator %s: the definition %s its objects are on, which its Rollout keeps, does not compile: %w; delete the Rollout %s (kubectl delete rollouts.opkit.dev %s) to apply the new definition to every object at once",
			d.Operator.Name, kept.Hash, err, e.rolloutName(d.Operator.Name), e.rolloutName(d.Operator.Name))
	}
	return e.typed(old)
}

// prepareRollout reads, or begins, the rollout of d, an operator with a
// custom resource: nil without spec.rollout (a Rollout left from one is
// told that every object is on d).
func (e *Engine) prepareRollout(ctx context.Context, d *definition.Definition) (*rollout, error) {
	name := e.rolloutName(d.Operator.Name)
	log := e.mgr.GetLogger().WithValues("operator", d.Operator.Name)
	to, err := rolloutDefinition(d)
	if err != nil {
		return nil, err
	}
	if d.Rollout == nil {
		e.forgetRollout(ctx, d, name, to)
		return nil, nil
	}
	if err := e.ensureRollouts(ctx); err != nil {
		return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
	}
	ro := &rollout{e: e, def: d, moves: make(chan event.GenericEvent, 1024), log: log}
	u, err := e.readRollout(ctx, name)
	if apierrors.IsNotFound(err) {
		// The first definition: every object is on it.
		obj := &v1alpha1.RolloutObject{Status: v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to, Steps: len(d.Rollout.Steps), Step: len(d.Rollout.Steps),
			Reason: "the first definition the engine ran with spec.rollout: every object is on it"}}
		u = &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
		u.SetName(name)
		if err := obj.Unstructured(u); err != nil {
			return nil, err
		}
		if err := e.client.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("operator %s: creating its Rollout %s: %w", d.Operator.Name, name, err)
		}
		return ro, nil
	}
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its Rollout %s: %w", d.Operator.Name, name, err)
	}
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return nil, err
	}
	st := &obj.Status
	// on is the definition every object is on, when one is.
	var on string
	switch st.Phase {
	case v1alpha1.RolloutComplete:
		on = st.To.Hash
	case v1alpha1.RolloutRolledBack:
		on = st.From.Hash
		if st.To.Hash == to.Hash {
			// Undone: every object stays on From until the definition
			// changes or a person continues.
			if ro.from, err = e.compileKept(d, st.From); err != nil {
				return nil, err
			}
			ro.moved = map[types.NamespacedName]bool{}
			log.Info(fmt.Sprintf("operator %s: definition %s was rolled back (%s): every object stays on %s; change the definition, or run opkit rollout continue %s to roll it out again",
				d.Operator.Name, to.Hash, st.Reason, st.From.Hash, d.Operator.Name))
			return ro, nil
		}
	default: // under way
		if st.To.Hash == to.Hash {
			if ro.from, err = e.compileKept(d, st.From); err != nil {
				return nil, err
			}
			ro.moved = keys(st.Moved)
			log.Info(fmt.Sprintf("operator %s: goes on with the rollout of definition %s from %s: %s at step %d of %d, %d objects moved",
				d.Operator.Name, to.Hash, st.From.Hash, st.Phase, st.Step, st.Steps, len(st.Moved)))
			return ro, nil
		}
		// A definition other than the one rolled out: objects not
		// moved are on From; the moved ones go back to it, and the new
		// one rolls out from there.
		on = st.From.Hash
	}
	if on == to.Hash {
		if st.Phase != v1alpha1.RolloutComplete || st.To.Hash != to.Hash {
			*st = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to, Steps: len(d.Rollout.Steps), Step: len(d.Rollout.Steps),
				Reason: "the definition is the one every object is on"}
			if err := e.writeRollout(ctx, u, obj); err != nil {
				return nil, err
			}
		}
		return ro, nil
	}
	from := st.To
	if on != st.To.Hash {
		from = st.From
	}
	if ro.from, err = e.compileKept(d, from); err != nil {
		return nil, err
	}
	ro.moved = map[types.NamespacedName]bool{}
	obj.Spec = v1alpha1.RolloutRequest{}
	*st = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutProgressing, From: from, To: to, Steps: len(d.Rollout.Steps),
		Reason: "a new definition: its first step is taken"}
	if err := e.writeRollout(ctx, u, obj); err != nil {
		return nil, err
	}
	log.Info(fmt.Sprintf("operator %s: rolls definition %s out in %d steps from %s, which every object is on until moved (opkit rollout status %s)",
		d.Operator.Name, to.Hash, st.Steps, from.Hash, d.Operator.Name))
	return ro, nil
}

// forgetRollout tells the Rollout of an operator that no longer has
// spec.rollout, if it has one, that every object is on d.
func (e *Engine) forgetRollout(ctx context.Context, d *definition.Definition, name string, to v1alpha1.RolloutDefinition) {
	u, err := e.readRollout(ctx, name)
	if err != nil {
		return // none (or no CRD): nothing to tell
	}
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil || (obj.Status.Phase == v1alpha1.RolloutComplete && obj.Status.To.Hash == to.Hash) {
		return
	}
	obj.Spec = v1alpha1.RolloutRequest{}
	obj.Status = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to,
		Reason: "the definition has no spec.rollout: it was applied to every object at once"}
	if err := e.writeRollout(ctx, u, obj); err != nil {
		e.mgr.GetLogger().Info(fmt.Sprintf("operator %s: its Rollout %s could not be told that every object is on definition %s: %v", d.Operator.Name, name, to.Hash, err))
	}
}

// readRollout reads a Rollout from the API server (not cached: it is
// read once a second by its driver alone).
func (e *Engine) readRollout(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

// writeRollout writes obj over u, the Rollout as read: a conflict (a
// person's request written meanwhile) is an error, and read again next.
func (e *Engine) writeRollout(ctx context.Context, u *unstructured.Unstructured, obj *v1alpha1.RolloutObject) error {
	obj.Status.MovedCount = len(obj.Status.Moved)
	if err := obj.Unstructured(u); err != nil {
		return err
	}
	if err := e.client.Update(ctx, u); err != nil {
		return fmt.Errorf("writing the Rollout %s: %w", u.GetName(), err)
	}
	return nil
}

func keys(names []string) map[types.NamespacedName]bool {
	out := make(map[types.NamespacedName]bool, len(names))
	for _, n := range names {
		out[objectKey(n)] = true
	}
	return out
}

// objectKey reads namespace/name, or a cluster-scoped object's name.
func objectKey(s string) types.NamespacedName {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	return types.NamespacedName{Name: s}
}

// objectName is objectKey's inverse.
func objectName(k types.NamespacedName) string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// drive takes the rollout's steps until ctx ends.
func (ro *rollout) drive(ctx context.Context) {
	if ro.split == nil {
		return
	}
	t := time.NewTicker(rolloutTick)
	defer t.Stop()
	for {
		if err := ro.tick(ctx); err != nil && ctx.Err() == nil && err.Error() != ro.said {
			ro.said = err.Error()
			ro.log.Info(fmt.Sprintf("operator %s: rollout: %v; trying again", ro.def.Operator.Name, err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick answers a person's request, or looks at the moved objects and
// takes the next step when they are healthy.
func (ro *rollout) tick(ctx context.Context) error {
	e, op := ro.e, ro.def.Operator.Name
	u, err := e.readRollout(ctx, e.rolloutName(op))
	if err != nil {
		return fmt.Errorf("reading its Rollout: %w", err)
	}
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return err
	}
	st := &obj.Status
	if st.To.Hash != ro.def.Hash() {
		return fmt.Errorf("its Rollout %s rolls out definition %s, not this engine's %s: another engine runs the operator", u.GetName(), st.To.Hash, ro.def.Hash())
	}
	// As read: an engine started on a rollout paused or undone says so.
	ro.say(ctx, st)
	now := e.opts.Clock.Now().UTC()
	if req := obj.Spec.Request; req != "" {
		by := cmp.Or(obj.Spec.RequestedBy, "someone")
		obj.Spec = v1alpha1.RolloutRequest{}
		switch {
		case req == v1alpha1.RolloutUndo && st.Phase != v1alpha1.RolloutRolledBack:
			st.Phase, st.Moved, st.Accepted, st.HealthySince = v1alpha1.RolloutRolledBack, nil, nil, ""
			st.Reason = fmt.Sprintf("undone by %s at step %d: every object is back on %s", by, st.Step, st.From.Hash)
		case req == v1alpha1.RolloutContinue && st.Phase == v1alpha1.RolloutPaused:
			st.Accepted = ro.unhealthy(ctx, st)
			st.Phase, st.Reason = v1alpha1.RolloutProgressing, "continued by "+by
			if err := ro.step(ctx, st, now); err != nil {
				return err
			}
		case req == v1alpha1.RolloutContinue && st.Phase == v1alpha1.RolloutRolledBack:
			*st = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutProgressing, From: st.From, To: st.To, Steps: st.Steps, Reason: "rolled out again by " + by}
			if err := ro.step(ctx, st, now); err != nil {
				return err
			}
		default:
			st.Reason = fmt.Sprintf("%s by %s: nothing to do, the rollout is %s", req, by, st.Phase)
		}
		return ro.commit(ctx, u, obj)
	}
	switch st.Phase {
	case v1alpha1.RolloutProgressing:
	case "":
		st.Phase = v1alpha1.RolloutProgressing
	default:
		return nil
	}
	if st.Step == 0 {
		if err := ro.step(ctx, st, now); err != nil {
			return err
		}
		return ro.commit(ctx, u, obj)
	}
	health := ro.health(ctx, st)
	if health.failed != "" {
		st.Phase, st.HealthySince = v1alpha1.RolloutPaused, ""
		st.Reason = fmt.Sprintf("paused at step %d of %d: %s", st.Step, st.Steps, health.failed)
		ro.log.Info(fmt.Sprintf("operator %s: rollout of definition %s %s; opkit rollout continue %s, or opkit rollout undo %s", op, st.To.Hash, st.Reason, op, op))
		return ro.commit(ctx, u, obj)
	}
	if health.waiting != "" {
		if st.HealthySince == "" && st.Reason == "waiting: "+health.waiting {
			return nil
		}
		st.HealthySince, st.Reason = "", "waiting: "+health.waiting
		return ro.commit(ctx, u, obj)
	}
	if st.HealthySince == "" {
		st.HealthySince = now.Format(time.RFC3339)
		next := "the next step"
		if st.Step >= st.Steps {
			next = "the rollout completes"
		}
		// A time, not a delay: the reason stays true while it is read.
		st.Reason = fmt.Sprintf("every moved object is healthy: %s at %s, if they stay so (settle %s)", next, now.Add(ro.def.Rollout.Settle).Format(time.RFC3339), ro.def.Rollout.Settle)
		return ro.commit(ctx, u, obj)
	}
	since, err := time.Parse(time.RFC3339, st.HealthySince)
	if err == nil && now.Sub(since) < ro.def.Rollout.Settle {
		return nil
	}
	if st.Step >= st.Steps {
		st.Phase, st.Accepted = v1alpha1.RolloutComplete, nil
		st.Reason = fmt.Sprintf("every object (%d) is on definition %s, and healthy", len(st.Moved), st.To.Hash)
		ro.log.Info(fmt.Sprintf("operator %s: definition %s is rolled out: %s", op, st.To.Hash, st.Reason))
		return ro.commit(ctx, u, obj)
	}
	if err := ro.step(ctx, st, now); err != nil {
		return err
	}
	return ro.commit(ctx, u, obj)
}

// commit writes the Rollout, then moves the objects it says.
func (ro *rollout) commit(ctx context.Context, u *unstructured.Unstructured, obj *v1alpha1.RolloutObject) error {
	if err := ro.e.writeRollout(ctx, u, obj); err != nil {
		return err
	}
	ro.say(ctx, &obj.Status)
	moved := keys(obj.Status.Moved)
	if obj.Status.Phase == v1alpha1.RolloutComplete {
		// Objects made from now on are on To too.
		ro.split.mu.Lock()
		ro.split.from = ro.split.to
		ro.split.mu.Unlock()
	}
	for _, k := range ro.split.setMoved(moved) {
		o := &unstructured.Unstructured{}
		o.SetNamespace(k.Namespace)
		o.SetName(k.Name)
		select {
		case ro.moves <- event.GenericEvent{Object: o}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// objects lists the keys of the operator's objects, sorted.
func (ro *rollout) objects(ctx context.Context) ([]*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ro.def.GVK.GroupVersion().WithKind(ro.def.GVK.Kind + "List"))
	var opts []client.ListOption
	if ns := ro.e.opts.Namespace; ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := ro.e.client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing its %s objects: %w", ro.def.GVK.Kind, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() == nil {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int {
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	return out, nil
}

// step takes the next step that moves an object (or the last one) into
// st.
func (ro *rollout) step(ctx context.Context, st *v1alpha1.RolloutStatus, now time.Time) error {
	objs, err := ro.objects(ctx)
	if err != nil {
		return err
	}
	candidates := make([]definition.Candidate, len(objs))
	for i, o := range objs {
		candidates[i] = definition.Candidate{Key: objectName(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}), Labels: o.GetLabels()}
	}
	moved := map[string]bool{}
	for _, m := range st.Moved {
		moved[m] = true
	}
	var took []string
	for st.Step < st.Steps && len(took) == 0 {
		took = ro.def.Rollout.Take(st.Step, candidates, moved)
		st.Step++
	}
	st.Moved = st.Moved[:0]
	for k := range moved {
		st.Moved = append(st.Moved, k)
	}
	slices.Sort(st.Moved)
	st.StepStarted, st.HealthySince = now.Format(time.RFC3339), ""
	st.Reason = fmt.Sprintf("step %d of %d (%s) moved %d objects: %d of %d on definition %s",
		st.Step, st.Steps, ro.def.Rollout.Steps[st.Step-1], len(took), len(moved), len(objs), st.To.Hash)
	ro.log.Info(fmt.Sprintf("operator %s: rollout %s", ro.def.Operator.Name, st.Reason))
	return nil
}

// rolloutHealth is how the moved objects are: the first that pauses the
// rollout, or the first not healthy yet.
type rolloutHealth struct {
	failed, waiting string
}

// health looks at each moved object as the cache shows it. Accepted
// objects that are healthy again are dropped from st.Accepted.
func (ro *rollout) health(ctx context.Context, st *v1alpha1.RolloutStatus) rolloutHealth {
	var h rolloutHealth
	was := map[string]bool{}
	for _, name := range st.Accepted {
		was[name] = true
	}
	var accepted []string
	for _, name := range st.Moved {
		failed, waiting := ro.objectHealth(ctx, objectKey(name), st.To.Hash)
		isAccepted := was[name]
		if isAccepted && (failed != "" || waiting != "") {
			accepted = append(accepted, name)
		}
		switch {
		case failed != "" && !isAccepted && h.failed == "":
			h.failed = name + ": " + failed
		case (waiting != "" || failed != "") && h.waiting == "":
			h.waiting = name + ": " + cmp.Or(waiting, failed)
		}
	}
	st.Accepted = accepted
	return h
}

// unhealthy returns the moved objects that would pause the rollout.
func (ro *rollout) unhealthy(ctx context.Context, st *v1alpha1.RolloutStatus) []string {
	var out []string
	for _, name := range st.Moved {
		if failed, _ := ro.objectHealth(ctx, objectKey(name), st.To.Hash); failed != "" {
			out = append(out, name)
		}
	}
	return out
}

// objectHealth says why an object pauses the rollout (failed), or why it
// is not healthy yet (waiting); both empty when it is healthy. An object
// gone is healthy: it holds nothing up.
func (ro *rollout) objectHealth(ctx context.Context, key types.NamespacedName, hash string) (failed, waiting string) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(ro.def.GVK)
	if err := ro.e.client.Get(ctx, key, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return "", ""
		}
		return "", "cannot be read: " + err.Error()
	}
	cr = ro.split.to.memory.Newest(cr)
	if on, _, _ := unstructured.NestedString(cr.Object, "status", "opkit", "definition"); on != hash {
		return "", "not reconciled by the new definition yet"
	}
	conds := compare.Conditions(cr)
	for _, t := range []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionStalled} {
		if c := meta.FindStatusCondition(conds, t); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Sprintf("%s: %s", t, c.Message), ""
		}
	}
	st := cause.Read(cr)
	for _, name := range slices.Sorted(maps.Keys(st.Handlers)) {
		if hs := st.Handlers[name]; hs.Attempt > 0 {
			return fmt.Sprintf("handler %s failed (%d attempts since its last success)", name, hs.Attempt), ""
		}
	}
	if h := st.Pending(ro.def.Handlers, cr.GetGeneration()); h != nil {
		// Its run has not ended yet (a handler slower than settle, or
		// waiting for a slot): healthy is judged on its outcome.
		return "", fmt.Sprintf("handler %s not done with generation %d yet", h.Name, cr.GetGeneration())
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		msg := "not Ready"
		if c != nil {
			msg = "not Ready: " + c.Message
		}
		return "", msg
	}
	return "", ""
}
