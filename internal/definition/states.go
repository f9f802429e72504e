package definition

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/cel/common"
)

// StateMachine is a compiled spec.states: the life cycle of each custom
// resource. Load checks it whole (see the checks in states*.go): one
// initial state, every target known, every state reachable from the
// initial one, every state but a final one with a way out, every guard a
// bool over self, children, related and run.
type StateMachine struct {
	// Initial is the state a new object starts in.
	Initial *State
	// States in the order declared.
	States []*State

	byName map[string]*State
}

// State returns the state named name, or nil.
func (m *StateMachine) State(name string) *State {
	if m.byName == nil {
		// A machine built by hand, not loaded: looked through.
		for _, s := range m.States {
			if s.Name == name {
				return s
			}
		}
	}
	return m.byName[name]
}

// State is one compiled state.
type State struct {
	Name string
	// Final: no way out, by declaration.
	Final bool
	// NeedsPerson: only a decision leaves it; Question is what is asked,
	// and Transitions are the choices (none has a guard).
	NeedsPerson bool
	Question    string
	// Transitions in the order declared, which is the order they are
	// tried.
	Transitions []*Transition
	// Timeout is nil for a state without one.
	Timeout *Timeout
	// Refuses are the dotted paths (spec, spec.version) that cannot change
	// while an object is in the state.
	Refuses []string
	// Enter and Exit are the operator's handlers on enter and on exit
	// that name the state, in the order declared.
	Enter, Exit []*Handler
	// Line is where the state is declared, for errors found later.
	Line int
	// Field is the state's path in the Operator, e.g. spec.states[2].
	Field string

	initial bool // as declared: the checks count them
}

// Choices are the states a person may choose from a state that
// NeedsPerson: its transitions' targets, in order.
func (s *State) Choices() []string {
	out := make([]string, 0, len(s.Transitions))
	for _, t := range s.Transitions {
		out = append(out, t.To)
	}
	return out
}

// Transition is one compiled transition.
type Transition struct {
	To string
	// When is the guard, nil for always.
	When *Expression
	// Reason is recorded with the transition; defaulted at load.
	Reason      string
	Description string
	// Field is the transition's path in the Operator, e.g.
	// spec.states[2].transitions[0].
	Field string
	// Set are the status fields written with the transition, sorted by
	// name; their templates read what guards read (Assign).
	Set []*StatusField

	schemas map[string]common.Schema // types children and related for When
	// broken: its guard did not compile (reported); it is not a
	// transition without one.
	broken bool
	// readsRun: its guard reads run.
	readsRun bool
}

// Timeout is a compiled state timeout.
type Timeout struct {
	After  time.Duration
	To     string
	Reason string // defaults to Timeout
	// Field is the timeout's path in the Operator, e.g.
	// spec.states[2].timeout.
	Field string
}

// Default reasons of transitions that declare none.
const (
	// ReasonGuardHeld is a guarded transition's.
	ReasonGuardHeld = "GuardHeld"
	// ReasonUnconditional is the reason of a transition without a guard:
	// taken as soon as the state's enter handlers are done.
	ReasonUnconditional = "Unconditional"
	// ReasonTimeout is a timeout's.
	ReasonTimeout = "Timeout"
	// ReasonDecided is a person's choice's, from a state that NeedsPerson.
	ReasonDecided = "Decided"
)

// Run is what a guard reads as run: the state's last finished enter run
// in the current visit. The zero Run (no run finished yet) reads as an
// empty map, so run.outcome does not exist and a guard reading it does
// not hold.
type Run struct {
	Handler string
	// Outcome is Succeeded or GaveUp.
	Outcome string
	Error   string
}

// value is run as a guard reads it: handler, outcome and error; an empty
// map for the zero Run.
func (r Run) value() map[string]string {
	if r == (Run{}) {
		return map[string]string{}
	}
	return map[string]string{"handler": r.Handler, "outcome": r.Outcome, "error": r.Error}
}

// ErrNotKnownYet is matched (errors.Is) by the error of a guard that reads
// a field that does not exist (yet): a status field not written,
// run.outcome before any enter run finished. So is ErrChildMissing: the
// guard does not hold, and that is no failure.
var ErrNotKnownYet = errors.New("not known yet")

// notKnownYet is a guard's "no such key".
type notKnownYet struct{ err error }

func (e notKnownYet) Error() string { return e.err.Error() + " (not known yet)" }
func (e notKnownYet) Unwrap() error { return e.err }
func (e notKnownYet) Is(target error) bool {
	return target == ErrNotKnownYet || target == ErrChildMissing
}

// Assign evaluates the transition's Set over vars and run: the status
// fields to write with it, by name; nil for a transition that sets none.
// An error names the field; one wrapping ErrChildMissing (or
// ErrNotKnownYet) means a template reads what does not exist yet.
func (t *Transition) Assign(vars Vars, run Run) (map[string]any, error) {
	if len(t.Set) == 0 {
		return nil, nil
	}
	act := t.activation(vars, run)
	out := make(map[string]any, len(t.Set))
	for _, f := range t.Set {
		v, err := f.Slot.eval(act)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Field, unknownAsNotYet(err))
		}
		out[f.Name] = v
	}
	return out, nil
}

// activation binds what the transition's guard and set read: self,
// children, related, and run.
func (t *Transition) activation(vars Vars, run Run) map[string]any {
	act := vars.activation(t.schemas)
	act["run"] = run.value()
	return act
}

// unknownAsNotYet marks an evaluation error that reads a key that does
// not exist (a status field not written yet, run.outcome before any run)
// as not known yet.
func unknownAsNotYet(err error) error {
	if !errors.Is(err, ErrChildMissing) && strings.Contains(err.Error(), "no such key") {
		return notKnownYet{err}
	}
	return err
}

// Holds evaluates the guard over vars and run: true for a transition
// without one. An error wrapping ErrChildMissing means the guard cannot be
// known yet (it reads what does not exist: a child, a related object, a
// field, run.outcome before any run); the transition is not taken, and
// that is no failure. Any other error is one (a division by zero, a
// value of the wrong type).
func (t *Transition) Holds(vars Vars, run Run) (bool, error) {
	if t.When == nil {
		return true, nil
	}
	v, err := t.When.Eval(t.activation(vars, run))
	if err != nil {
		return false, unknownAsNotYet(err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: ${%s} gave %v, not a bool", t.When.Field, t.When.Source, v)
	}
	return b, nil
}
