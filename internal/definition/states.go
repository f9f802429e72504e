package definition

import (
	"errors"
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
func (m *StateMachine) State(name string) *State { return m.byName[name] }

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

	schemas map[string]common.Schema // types children and related for When
}

// Timeout is a compiled state timeout.
type Timeout struct {
	After  time.Duration
	To     string
	Reason string // defaults to Timeout
}

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

// errNotBuilt marks what the skeleton of the state machine has not
// implemented yet.
var errNotBuilt = errors.New("states: not built yet")

// Holds evaluates the guard over vars and run: true for a transition
// without one. An error wrapping ErrChildMissing means the guard cannot be
// known yet (it reads what does not exist); the transition is not taken.
func (t *Transition) Holds(vars Vars, run Run) (bool, error) {
	if t.When == nil {
		return true, nil
	}
	return false, errNotBuilt
}
