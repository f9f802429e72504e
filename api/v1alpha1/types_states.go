package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The types of spec.states and spec.rollout.

// State is one state of a custom resource's life cycle.
type State struct {
	// Name is the state's name, shown in status.state.name and kubectl's
	// State column: an identifier starting with an upper-case letter
	// (Ready, NeedsAttention), unique in the Operator.
	Name string `json:"name"`
	// Initial marks the state a new object starts in. Exactly one state
	// has it.
	Initial bool `json:"initial,omitempty"`
	// Final marks a state with no way out: the only kind of state that
	// may have no transitions and no timeout.
	Final bool `json:"final,omitempty"`
	// NeedsPerson makes the state wait for a person's decision: its
	// transitions are the choices offered, they have no guards, and the
	// state has no timeout. Nothing moves the object out of it but a
	// decision (opkit decide, or the console).
	NeedsPerson *NeedsPerson `json:"needsPerson,omitempty"`
	// Transitions leave the state, tried in order: the first whose guard
	// holds is taken. They are tried once the state's enter handlers are
	// done (succeeded or given up).
	Transitions []Transition `json:"transitions,omitempty"`
	// Timeout leaves the state for another when the object has been in it
	// this long, whatever else holds; once, also when it expired while no
	// engine ran.
	Timeout *StateTimeout `json:"timeout,omitempty"`
	// Refuses are fields of the spec that cannot change while an object
	// is in this state, as dotted paths from the object's root (spec.version,
	// or spec for all of it): the API server refuses such a change, with
	// a message that names the state.
	Refuses []string `json:"refuses,omitempty"`
}

// NeedsPerson is what a state waiting for a person asks.
type NeedsPerson struct {
	// Question is shown to the person with the choices, in
	// status.state.question, the console and opkit decide. Required.
	Question string `json:"question"`
}

// Transition is one way out of a state.
type Transition struct {
	// To is the state it leads to. Required.
	To string `json:"to"`
	// When is the guard, a CEL condition over self (the object as read),
	// children, related and run (the state's last finished enter run:
	// run.handler, run.outcome, run.error); a guard that reads
	// what does not exist yet does not hold. Defaults to always; not
	// allowed from a state that NeedsPerson.
	When string `json:"when,omitempty"`
	// Reason is recorded with the transition (status.state.reason, the
	// Event, the archive), a CamelCase word. Defaults to GuardHeld for a
	// transition with a guard, Unconditional for one without, and Decided
	// for a person's choice.
	Reason string `json:"reason,omitempty"`
	// Description tells a person what this choice does, for a state that
	// NeedsPerson: shown beside its button and in opkit decide.
	Description string `json:"description,omitempty"`
	// Set writes status fields with the transition, in the same write as
	// status.state: a map from a status field's name to a ${...}
	// template over self, children, related and run, evaluated when the
	// transition is taken (for a person's choice, when the decision is).
	// What the object was when a state was entered is remembered so
	// (version: "${self.spec.version}" on the way to Ready). A field of
	// spec.status, which is written at every reconcile, cannot be set.
	Set map[string]string `json:"set,omitempty"`
}

// StateTimeout leaves a state after a time.
type StateTimeout struct {
	// After is a Go duration (30s, 15m, 2h), at least 1s.
	After metav1.Duration `json:"after"`
	// To is the state it leads to.
	To string `json:"to"`
	// Reason is recorded with the transition. Defaults to Timeout.
	Reason string `json:"reason,omitempty"`
}

// Rollout is how a change of the definition reaches the custom resources.
type Rollout struct {
	// Steps are the objects on the new definition after each step, each
	// counting those of the steps before: a count, a percentage of the
	// objects, or those matching a label selector (a canary). A last step
	// of 100 percent is implied.
	Steps []RolloutStep `json:"steps"`
	// Settle is how long every object moved so far must stay healthy
	// (Ready, neither Degraded nor Stalled, no handler failed) before the
	// next step. Defaults to 30s.
	Settle metav1.Duration `json:"settle,omitzero"`
}

// RolloutStep is one step of a Rollout: exactly one of its fields.
type RolloutStep struct {
	// Count moves objects until this many are on the new definition.
	Count *int32 `json:"count,omitempty"`
	// Percent moves objects until this percentage of them (rounded up)
	// is on the new definition.
	Percent *int32 `json:"percent,omitempty"`
	// Selector moves the objects with these labels.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}
