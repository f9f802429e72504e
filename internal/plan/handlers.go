package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// timed are the triggers of time, not of the definition: not planned.
var timed = []string{v1alpha1.OnResume, v1alpha1.OnSchedule, v1alpha1.TriggerRequeue}

// handlers lists the runs the new definition decides for cr, in the
// order the engine makes them: Decide is asked, its run taken as
// succeeded, and asked again.
func (pl *planner) handlers(cr *unstructured.Unstructured, vars definition.Vars, fail func(string, ...any)) []HandlerRun {
	if len(pl.def.Handlers) == 0 {
		return nil
	}
	in := cause.Input{Handlers: pl.def.Handlers, Object: cr, State: cause.Read(cr), Now: pl.now, Started: pl.now, Related: vars.Related}
	if _, paused := cr.GetAnnotations()[v1alpha1.PauseAnnotation]; paused {
		return nil // no handler runs for a paused object
	}
	in.Visit = pl.visit(cr)
	in.When = map[string]bool{}
	for _, h := range pl.def.Handlers {
		if h.When == nil {
			continue
		}
		holds, err := h.WhenHolds(vars)
		switch {
		case err == nil:
			in.When[h.Name] = holds
		case !errors.Is(err, definition.ErrChildMissing):
			fail("handler %s: its when condition: %v", h.Name, err)
		}
	}
	var out []HandlerRun
	// Each handler runs at most once per trigger for one change; the bound
	// keeps a decision that repeats from looping.
	for range 4 * len(pl.def.Handlers) {
		d := cause.Decide(in)
		c := d.Cause
		if c == nil {
			break
		}
		if !slices.Contains(timed, c.Trigger) {
			out = append(out, HandlerRun{Handler: c.Handler.Name, Trigger: c.Trigger, Reason: pl.reason(c, in.State, in.Visit), Key: c.Key, AtResume: pl.paused})
		}
		d.State.Succeeded(pl.def.Handlers, c, cause.Spec(cr), 0, pl.now)
		in.State = d.State
	}
	return out
}

// reason says why a run is decided.
func (pl *planner) reason(c *cause.Cause, st *cause.State, v *cause.Visit) string {
	h := c.Handler
	switch c.Trigger {
	case v1alpha1.OnCreate:
		if !slices.ContainsFunc(pl.old.Handlers, func(o *definition.Handler) bool { return o.Name == h.Name && o.Fires(v1alpha1.OnCreate) }) {
			return "new create handler: its first run for this existing object"
		}
		return "create handler that has not succeeded for this object yet"
	case v1alpha1.OnUpdate:
		if c.Inputs != "" && st.Of(h.Name).Inputs != c.Inputs && st.Of(h.Name).Generation >= c.Generation {
			return "the related fields it names changed"
		}
		paths := cause.Paths(c.Diff)
		if len(h.Fields) > 0 {
			paths = slices.DeleteFunc(paths, func(p string) bool { return !h.Touches([]string{p}) })
		}
		return fmt.Sprintf("generation %d has changes it has not handled: %s", c.Generation, strings.Join(paths, ", "))
	case v1alpha1.OnWhen:
		return fmt.Sprintf("its when condition %s becomes true", h.When.Source)
	case v1alpha1.OnEnter:
		return "entering state " + v.State.Name
	case v1alpha1.OnExit:
		return "leaving state " + v.Left.Name
	case v1alpha1.OnDelete:
		return "the object is being deleted"
	}
	return c.Trigger
}

// status lists the status fields the definition computes that change.
func (pl *planner) status(cr *unstructured.Unstructured, vars definition.Vars, fail func(string, ...any)) []Change {
	old, _ := cr.Object["status"].(map[string]any)
	var out []Change
	for _, f := range pl.def.Status {
		v, err := f.Evaluate(vars)
		switch {
		case errors.Is(err, definition.ErrChildMissing):
			continue // kept until the child exists
		case err != nil:
			fail("status.%s: %v", f.Name, err)
			continue
		}
		was, had := old[f.Name]
		switch {
		case !had:
			out = append(out, Change{Op: "add", Path: "status." + f.Name, New: v})
		case !compare.SameValue(was, v):
			out = append(out, Change{Op: "change", Path: "status." + f.Name, Old: was, New: v})
		}
	}
	return out
}

// states says what the new state machine does to cr: the move its
// next step makes (statemachine.Next, the engine's step, with the guards
// over the planned children and the handler state st), a state it no
// longer declares, a machine new to it.
func (pl *planner) states(cr *unstructured.Unstructured, vars definition.Vars, st *cause.State) []string {
	m := pl.def.States
	cur, err := v1alpha1.ReadObjectState(cr.Object)
	switch {
	case err != nil:
		return []string{err.Error()}
	case m == nil && cur != nil && cur.Name != "":
		return []string{fmt.Sprintf("in state %s; the new definition declares no states: status.state stays as it is and nothing moves it", cur.Name)}
	case m == nil:
		return nil
	}
	_, paused := cr.GetAnnotations()[v1alpha1.PauseAnnotation]
	in := statemachine.Input{Machine: m, Current: cur, Paused: paused, OperatorPaused: pl.paused, Deleting: cr.GetDeletionTimestamp() != nil, Now: pl.now}
	var run definition.Run
	if cur != nil && cur.Name != "" {
		if v := cause.VisitOf(m, cur); v != nil && v.State != nil {
			in.Awaited, run = v.Awaited(st, cr.GetGeneration()), v.Run(st)
		}
	}
	in.Guard = func(t *definition.Transition) (bool, error) { return t.Holds(vars, run) }
	step := statemachine.Next(in)
	var out []string
	switch {
	case step.Unknown != "":
		out = append(out, step.Unknown)
	case step.Action == statemachine.Initialize:
		out = append(out, "enters the initial state "+step.Next.Name)
	case step.Action == statemachine.Move:
		out = append(out, fmt.Sprintf("moves from %s to %s: %s", cur.Name, step.Next.Name, step.Why))
	}
	for _, e := range step.GuardErrors {
		out = append(out, e.Error())
	}
	return out
}

// visit is the state visit cr's handlers are decided for: its state's,
// or for an object in none yet, the initial state's first visit, which
// the engine puts it in before its handlers step.
func (pl *planner) visit(cr *unstructured.Unstructured) *cause.Visit {
	m := pl.def.States
	if m == nil {
		return nil
	}
	cur, err := v1alpha1.ReadObjectState(cr.Object)
	switch {
	case err != nil:
		return nil
	case (cur == nil || cur.Name == "") && m.Initial != nil:
		return cause.VisitOf(m, &v1alpha1.ObjectState{Name: m.Initial.Name, Seq: 1})
	case cur == nil:
		return nil
	}
	return cause.VisitOf(m, cur)
}
