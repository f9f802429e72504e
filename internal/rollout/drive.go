package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/request"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// Drive takes the rollout's steps until ctx ends, moving objects in
// split; newest is what the engine knows of an object beyond the cache
// (its last writes). Nothing is driven when every object is on one
// definition (From is nil).
func (ro *Rollout) Drive(ctx context.Context, split splitter, newest func(*unstructured.Unstructured) *unstructured.Unstructured) {
	if ro.from == nil {
		return
	}
	ro.split, ro.newest = split, newest
	sleep.Poll(ctx, Tick, func() {
		if err := ro.tick(ctx); err != nil && ctx.Err() == nil && err.Error() != ro.said {
			ro.said = err.Error()
			ro.cfg.Log.Info(fmt.Sprintf("operator %s: rollout: %v; trying again", ro.def.Operator.Name, err))
		}
	})
}

// tick answers a person's request, or looks at the moved objects and
// takes the next step when they are healthy.
func (ro *Rollout) tick(ctx context.Context) error {
	op := ro.def.Operator.Name
	u, err := read(ctx, ro.cfg.Reader, ro.name())
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
	now := ro.cfg.Clock.Now().UTC()
	if req := obj.Spec.Request; req != "" {
		by := request.Continue.Who(obj.Spec.RequestedBy)
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
		ro.cfg.Log.Info(fmt.Sprintf("operator %s: rollout of definition %s %s; opkit rollout continue %s, or opkit rollout undo %s", op, st.To.Hash, st.Reason, op, op))
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
		ro.cfg.Log.Info(fmt.Sprintf("operator %s: definition %s is rolled out: %s", op, st.To.Hash, st.Reason))
		return ro.commit(ctx, u, obj)
	}
	if err := ro.step(ctx, st, now); err != nil {
		return err
	}
	return ro.commit(ctx, u, obj)
}

// commit writes the Rollout, then moves the objects it says.
func (ro *Rollout) commit(ctx context.Context, u *unstructured.Unstructured, obj *v1alpha1.RolloutObject) error {
	if err := write(ctx, ro.cfg.Client, u, obj); err != nil {
		return err
	}
	ro.say(ctx, &obj.Status)
	if obj.Status.Phase == v1alpha1.RolloutComplete {
		ro.split.complete() // objects made from now on are on To too
	}
	for _, k := range ro.split.setMoved(keys(obj.Status.Moved)) {
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

// objects lists the operator's objects not being deleted, sorted by key.
func (ro *Rollout) objects(ctx context.Context) ([]*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ro.def.GVK.GroupVersion().WithKind(ro.def.GVK.Kind + "List"))
	var opts []client.ListOption
	if ns := ro.cfg.Namespace; ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := ro.cfg.Client.List(ctx, list, opts...); err != nil {
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
func (ro *Rollout) step(ctx context.Context, st *v1alpha1.RolloutStatus, now time.Time) error {
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
	ro.cfg.Log.Info(fmt.Sprintf("operator %s: rollout %s", ro.def.Operator.Name, st.Reason))
	return nil
}
