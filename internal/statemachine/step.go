package statemachine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Input is what Next decides from.
type Input struct {
	// Machine is the Operator's compiled spec.states.
	Machine *definition.StateMachine
	// Current is the object's status.state as read; nil (or a zero Name)
	// for an object that has none yet.
	Current *v1alpha1.ObjectState
	// Guard evaluates a transition's guard over the object (the engine
	// calls definition.Transition.Holds with the object's variables and
	// the visit's run). Nil: every guard holds.
	Guard func(*definition.Transition) (bool, error)
	// Awaited names the exit handlers of the state left and the enter
	// handlers of the current state that have not finished for this visit
	// (cause.Visit.Awaited: a handler that gave up is done with), with
	// what each waits for; empty when they all have.
	Awaited []string
	// Decision is the value of the object's DecisionAnnotation; nil when
	// it has none.
	Decision *string
	// Paused: the object carries opkit.dev/paused. Deleting: it has a
	// deletion timestamp.
	Paused, Deleting bool
	// OperatorPaused: the object's whole operator is paused (its Operator
	// carries opkit.dev/paused), which holds it as its own pause does.
	OperatorPaused bool
	// Now is the time of the step.
	Now time.Time
}

// Action is what a step does.
type Action int

// Actions.
const (
	// Stay: the object stays where it is.
	Stay Action = iota
	// Initialize: a new object enters the initial state.
	Initialize
	// Move: the object takes a transition.
	Move
)

func (a Action) String() string {
	switch a {
	case Initialize:
		return "Initialize"
	case Move:
		return "Move"
	}
	return "Stay"
}

// Step is what Next decided.
type Step struct {
	Action Action
	// Next is the new status.state, for Initialize and Move; its Run is
	// left for the engine to set.
	Next *v1alpha1.ObjectState
	// Why says in one sentence what caused the move: the guard that held,
	// the timeout that expired, or who decided and why. For the record.
	Why string
	// Until is when the current state's timeout comes due, while it has
	// not; zero otherwise.
	Until time.Time
	// Consume: the decision annotation is done with (taken or refused)
	// and is to be removed.
	Consume bool
	// Decision is the decision in the annotation, when it is one: taken
	// (a Move with Consume), refused (Refused), or waiting (Waits).
	Decision *v1alpha1.Decision
	// Transition is the transition taken, for a Move by a guard or a
	// decision (nil for a timeout): the engine writes its Set with it.
	Transition *definition.Transition
	// Refused says why the decision annotation is refused; "" when it is
	// not.
	Refused string
	// Waits says why a valid decision is not taken yet, and when it is:
	// the object is paused, or the visit's handlers have not finished.
	// The annotation stays; "" when no decision waits.
	Waits string
	// GuardErrors are the guards that failed to evaluate for another
	// reason than what they read not existing yet.
	GuardErrors []GuardError
	// Unknown says why nothing can move: the object is in a state the
	// machine does not declare; "" otherwise.
	Unknown string
}

// GuardError is a guard that could not be evaluated.
type GuardError struct {
	State string
	To    string
	Err   error
}

func (e GuardError) Error() string {
	return fmt.Sprintf("state %s, transition to %s: %v", e.State, e.To, e.Err)
}

// Next decides one step of an object's life cycle; see the package doc.
func Next(in Input) Step {
	m, cur := in.Machine, in.Current
	if cur == nil || cur.Name == "" {
		init := m.Initial
		next := &v1alpha1.ObjectState{Name: init.Name, Seq: 1, Since: stamp(in.Now), Trigger: v1alpha1.TransitionInitial}
		entering(next, init)
		return Step{Action: Initialize, Next: next, Why: "the object was created: it starts in " + init.Name}
	}
	st := m.State(cur.Name)
	if in.Decision != nil {
		return decide(in, st, *in.Decision) // taken, refused or waiting: said at once
	}
	if in.Paused || in.OperatorPaused || in.Deleting {
		return Step{}
	}
	if st == nil {
		return Step{Unknown: unknown(cur)}
	}
	if len(in.Awaited) > 0 {
		return Step{}
	}
	if st.NeedsPerson {
		return Step{} // only a decision leaves it
	}
	var step Step
	if t := st.Timeout; t != nil {
		since, err := time.Parse(time.RFC3339, cur.Since)
		if err != nil {
			since = time.Time{} // unreadable: its deadline is long past
		}
		deadline := since.Add(t.After)
		if !in.Now.Before(deadline) {
			next := move(in, st, t.To, v1alpha1.TransitionTimeout, t.Reason)
			return Step{Action: Move, Next: next, Why: fmt.Sprintf("the state's timeout of %s expired at %s (in %s since %s)", t.After, stamp(deadline), cur.Name, cur.Since)}
		}
		step.Until = deadline
	}
	for _, t := range st.Transitions {
		holds := true
		if in.Guard != nil && t.When != nil {
			var err error
			holds, err = in.Guard(t)
			if err != nil {
				holds = false
				if !errors.Is(err, definition.ErrChildMissing) {
					step.GuardErrors = append(step.GuardErrors, GuardError{State: st.Name, To: t.To, Err: err})
				}
			}
		}
		if !holds {
			continue
		}
		why := "it has no guard"
		if t.When != nil {
			why = "its guard held: " + t.When.Source
		}
		step.Action, step.Next, step.Transition = Move, move(in, st, t.To, v1alpha1.TransitionGuard, t.Reason), t
		step.Why, step.Until = fmt.Sprintf("the transition from %s to %s was taken: %s", st.Name, t.To, why), time.Time{}
		return step
	}
	return step
}

// unknown says why an object in a state the machine does not declare
// does not move.
func unknown(cur *v1alpha1.ObjectState) string {
	return fmt.Sprintf("status.state.name is %s, which the Operator does not declare: nothing moves until the Operator declares it again", cur.Name)
}

// decide takes the decision raw, refuses it, or says why it waits: what
// makes it wrong is said at once, whatever else holds the object; a valid
// one waits only while the object is paused or the visit's handlers run.
func decide(in Input, st *definition.State, raw string) Step {
	cur := in.Current
	var d v1alpha1.Decision
	refuse := func(format string, args ...any) Step {
		s := Step{Consume: true, Refused: fmt.Sprintf(format, args...)}
		if d != (v1alpha1.Decision{}) {
			s.Decision = &d
		}
		return s
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		d = v1alpha1.Decision{}
		return refuse("the annotation %s is not a decision (%v): use opkit decide", v1alpha1.DecisionAnnotation, err)
	}
	switch {
	case in.Deleting:
		return refuse("the object is being deleted: its state does not move any more")
	case st == nil:
		s := refuse("%s", unknown(cur))
		s.Unknown = s.Refused
		return s
	case !st.NeedsPerson:
		return refuse("the object is in %s, which does not wait for a person", cur.Name)
	case d.State != cur.Name || d.Seq != cur.Seq:
		return refuse("the decision is for %s (visit %d), and the object is in %s (visit %d): decide again on what it is in now", d.State, d.Seq, cur.Name, cur.Seq)
	case strings.TrimSpace(d.By) == "":
		return refuse("the decision does not say who decided (by)")
	case strings.TrimSpace(d.Reason) == "":
		return refuse("the decision gives no reason")
	}
	i := slices.IndexFunc(st.Transitions, func(t *definition.Transition) bool { return t.To == d.Choose })
	if i < 0 {
		return refuse("%s is not a choice of %s: choose one of %s", d.Choose, cur.Name, strings.Join(st.Choices(), ", "))
	}
	switch {
	case in.Paused:
		return Step{Decision: &d, Waits: PausedWaits}
	case in.OperatorPaused:
		return Step{Decision: &d, Waits: OperatorPausedWaits}
	case len(in.Awaited) > 0:
		return Step{Decision: &d, Waits: fmt.Sprintf("the handlers of this visit of %s have not finished: %s; it is taken once they have (one that gives up is done with)",
			cur.Name, strings.Join(in.Awaited, ", "))}
	}
	t := st.Transitions[i]
	next := move(in, st, t.To, v1alpha1.TransitionDecision, t.Reason) // defaulted at load
	next.By, next.Message = d.By, d.Reason
	return Step{
		Action: Move, Next: next, Consume: true, Decision: &d, Transition: t,
		Why: fmt.Sprintf("%s decided, in %s, to go to %s: %s", d.By, cur.Name, t.To, d.Reason),
	}
}

// move is the state after the transition from st to the state named to.
func move(in Input, st *definition.State, to, trigger, reason string) *v1alpha1.ObjectState {
	next := &v1alpha1.ObjectState{Name: to, Seq: in.Current.Seq + 1, Since: stamp(in.Now), Reason: reason, From: st.Name, Trigger: trigger}
	if target := in.Machine.State(to); target != nil {
		entering(next, target)
	}
	return next
}

// entering sets what a state that NeedsPerson asks.
func entering(next *v1alpha1.ObjectState, st *definition.State) {
	if st.NeedsPerson {
		next.Question, next.Choices = st.Question, st.Choices()
	}
}

// stamp writes a time as status.state does.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
