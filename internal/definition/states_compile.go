package definition

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// The loader of spec.states: each state compiled into a State, each guard
// into a CEL bool over self, children, related and run, each reason
// defaulted, and the handlers on enter and exit listed with the states
// they name. The checks of the whole machine (targets, reachability, dead
// ends) are in states_check.go.

var stateNameRE = regexp.MustCompile(v1alpha1.StateNamePattern)

// MaxStateName is the longest state name (and reason): a label value's
// limit, so that a state can be selected on.
const MaxStateName = 63

// MinStateTimeout is the shortest timeout of a state.
const MinStateTimeout = MinEvery

// compileHandlerStates checks a handler's states against its triggers: the
// enter and exit triggers need them, no other trigger has them.
func compileHandlerStates(l *errorList, field string, h v1alpha1.Handler, c *Handler, subj subject) {
	stateful := c.Fires(v1alpha1.OnEnter) || c.Fires(v1alpha1.OnExit)
	switch {
	case stateful && subj == watchedSubject:
		l.add(field+".on", "a handler on enter or exit runs when a custom resource enters or leaves one of its states, and a watch operator owns none: declare spec.resource and spec.states")
	case stateful && subj == calendarSubject:
		// The calendar's own check names the triggers it allows.
	case stateful && len(h.States) == 0:
		l.add(field+".states", "required by the %s trigger: the states whose %s runs the handler, like states: [Ready]", stateTrigger(c), stateTriggerVerb(c))
	case !stateful && len(h.States) > 0:
		l.add(field+".states", "states names the states of the enter and exit triggers, which this handler does not have: add enter or exit to on, or remove states")
	}
	c.States = slices.Clone(h.States)
}

func stateTrigger(c *Handler) string {
	if c.Fires(v1alpha1.OnEnter) {
		return v1alpha1.OnEnter
	}
	return v1alpha1.OnExit
}

func stateTriggerVerb(c *Handler) string {
	if c.Fires(v1alpha1.OnEnter) {
		return "entering"
	}
	return "leaving"
}

// compileStates compiles spec.states into d.States (nil for none) and
// lists each handler on enter or exit with the states it names.
func compileStates(l *errorList, envs *celEnvs, d *Definition) {
	op := d.Operator
	if len(op.Spec.States) == 0 {
		for i, h := range op.Spec.Handlers {
			if len(h.States) > 0 {
				l.add(fmt.Sprintf("spec.handlers[%d].states", i), "names states, and the Operator declares none: declare them under spec.states")
			}
		}
		return
	}
	m := &StateMachine{byName: map[string]*State{}}
	for i, s := range op.Spec.States {
		st := compileState(l, envs, fmt.Sprintf("spec.states[%d]", i), s)
		m.States = append(m.States, st)
		if _, dup := m.byName[st.Name]; !dup {
			m.byName[st.Name] = st
		}
		if s.Initial && m.Initial == nil {
			m.Initial = st
		}
	}
	linkStateHandlers(l, d, m)
	checkStates(l, d, m)
	checkSetFields(l, op, m)
	d.States = m
}

// checkSetFields checks the status fields transitions set: none is a
// spec.status field (which every reconcile writes again), and all that
// set one field compute one type.
func checkSetFields(l *errorList, op *v1alpha1.Operator, m *StateMachine) {
	first := map[string]*StatusField{}
	for _, f := range m.setFields() {
		if _, ok := op.Spec.Status[f.Name]; ok {
			l.add(f.Field, "spec.status.%s writes this field at every reconcile, and would undo what the transition sets: set it in one place", f.Name)
			continue
		}
		if other, ok := first[f.Name]; ok {
			if a, b := other.schemaType(), f.schemaType(); a != b {
				l.add(f.Field, "computes %s, and %s computes %s for the same field: a status field has one type", aType(b), other.Field, aType(a))
			}
			continue
		}
		first[f.Name] = f
	}
}

// aType names a schema type with its article; "" is a value of another
// type (a list or a map).
func aType(t string) string {
	switch t {
	case "":
		return "a list or a map"
	case "integer":
		return "an integer"
	}
	return "a " + t
}

// compileState compiles one state, reporting what is wrong with it alone.
func compileState(l *errorList, envs *celEnvs, field string, s v1alpha1.State) *State {
	st := &State{Name: s.Name, Final: s.Final, Line: l.line(field), Field: field, initial: s.Initial}
	if s.NeedsPerson != nil {
		st.NeedsPerson = true
		st.Question = strings.TrimSpace(s.NeedsPerson.Question)
	}
	for j, t := range s.Transitions {
		tf := fmt.Sprintf("%s.transitions[%d]", field, j)
		ct := &Transition{To: t.To, Reason: t.Reason, Description: strings.TrimSpace(t.Description), Field: tf}
		if t.When != "" {
			ct.When = compileCondition(l, envs.guard, tf+".when", t.When)
			ct.broken = ct.When == nil
			ct.readsRun = ct.When != nil && readsIdent(envs.guard, ct.When.Source, "run")
		}
		if ct.Reason == "" {
			switch {
			case st.NeedsPerson:
				ct.Reason = ReasonDecided
			case t.When != "":
				ct.Reason = ReasonGuardHeld
			default:
				ct.Reason = ReasonUnconditional
			}
		}
		ct.Set = compileSet(l, envs, tf+".set", t.Set)
		st.Transitions = append(st.Transitions, ct)
	}
	if t := s.Timeout; t != nil {
		st.Timeout = &Timeout{After: t.After.Duration, To: t.To, Reason: t.Reason, Field: field + ".timeout"}
		if st.Timeout.Reason == "" {
			st.Timeout.Reason = ReasonTimeout
		}
	}
	for _, r := range s.Refuses {
		st.Refuses = append(st.Refuses, strings.TrimPrefix(r, "."))
	}
	return st
}

// compileSet compiles a transition's set: status fields, each a template
// over what its guard reads, that are not opkit's own.
func compileSet(l *errorList, envs *celEnvs, field string, set map[string]string) []*StatusField {
	var out []*StatusField
	for _, name := range slices.Sorted(maps.Keys(set)) {
		f := field + "." + name
		switch {
		case !statusRE.MatchString(name):
			l.add(f, "status field names are lowerCamelCase identifiers")
			continue
		case slices.Contains(reservedStatus, name) || name == stateStatus:
			l.add(f, "%q is written by opkit; choose another name", name)
			continue
		}
		if slot := compileString(l, envs.guard, f, set[name], nil); slot != nil {
			out = append(out, &StatusField{Name: name, Slot: slot, Template: set[name], Field: f})
		}
	}
	return out
}

// linkStateHandlers lists each handler on enter or exit in the states it
// names, in the order the handlers are declared.
func linkStateHandlers(l *errorList, d *Definition, m *StateMachine) {
	byName := map[string]*Handler{}
	for _, h := range d.Handlers {
		byName[h.Name] = h
	}
	for i, h := range d.Operator.Spec.Handlers {
		c := byName[h.Name]
		if c == nil || len(c.States) == 0 {
			continue
		}
		for j, name := range c.States {
			st := m.State(name)
			if st == nil {
				l.add(fmt.Sprintf("spec.handlers[%d].states[%d]", i, j), "%s", m.notAState(name))
				continue
			}
			if c.Fires(v1alpha1.OnEnter) && !slices.Contains(st.Enter, c) {
				st.Enter = append(st.Enter, c)
			}
			if c.Fires(v1alpha1.OnExit) && !slices.Contains(st.Exit, c) {
				st.Exit = append(st.Exit, c)
			}
		}
	}
}

// names are the states' names in the order declared.
func (m *StateMachine) names() []string {
	out := make([]string, 0, len(m.States))
	for _, s := range m.States {
		out = append(out, s.Name)
	}
	return out
}

// stateStatus is the status field that holds the object's state
// (v1alpha1.ObjectState), reserved when the Operator declares states.
const stateStatus = "state"

// transitions are every state's transitions, in order; none for a nil
// machine.
func (m *StateMachine) transitions() []*Transition {
	if m == nil {
		return nil
	}
	var out []*Transition
	for _, s := range m.States {
		out = append(out, s.Transitions...)
	}
	return out
}

// setFields are the status fields the transitions set, in the order of
// the states and their transitions.
func (m *StateMachine) setFields() []*StatusField {
	var out []*StatusField
	for _, t := range m.transitions() {
		out = append(out, t.Set...)
	}
	return out
}

// readsIdent reports whether the expression src names the variable name.
func readsIdent(env *cel.Env, src, name string) bool {
	ast, iss := env.Parse(src)
	if iss.Err() != nil {
		return false
	}
	found := false
	celast.PostOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.IdentKind && e.AsIdent() == name {
			found = true
		}
	}))
	return found
}
