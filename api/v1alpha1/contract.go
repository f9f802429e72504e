package v1alpha1

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The names opkit shares with the user and its own parts (engine, console,
// CLI): the annotations a person or tool sets on a custom resource, the
// conditions the engine writes on it, and the triggers runs are recorded
// with. They are part of the public contract: changing one breaks
// existing objects, scripts and dashboards.

// Annotations on a custom resource.
const (
	// RetryAnnotation, set to any value, clears the object's handlers'
	// failed attempts and Stalled state so that they run again; the engine
	// removes it from a custom resource, and remembers its value on an
	// object it watches (each new value is one retry). opkit retry and
	// the console's Retry set it to the JSON of a RetryRequest, saying who
	// asked and why; any other value (a bare timestamp, as older CLIs
	// wrote) asks too, by someone unknown. The engine records each retry
	// it takes, with its RetryRequest, in the run archive (handler
	// RetryHandler) and in its RetryRequested Event.
	RetryAnnotation = "opkit.dev/retry"
	// PauseAnnotation, set to any value, pauses the object's handlers: a
	// run in flight finishes and is recorded, but no handler starts
	// (create, update, delete, resume or schedule) until the annotation is
	// removed; then what came due meanwhile runs. Children are still kept
	// converged. opkit pause and the console's Pause set it to the JSON of
	// a Pause, saying who paused and why; any other value pauses too, by
	// someone unknown. The engine records each pause it sees, with its
	// Pause, in the run archive (handler PauseHandler) and as an Event.
	PauseAnnotation = "opkit.dev/paused"
	// ResumedAnnotation holds, as the JSON of a Pause, who resumed the
	// object's handlers and why: opkit resume and the console's Resume
	// set it in the patch that removes PauseAnnotation. The engine
	// records the resume with it and removes it; a PauseAnnotation
	// removed without it is recorded as resumed by someone unknown.
	ResumedAnnotation = "opkit.dev/resumed"
	// AppliedHashAnnotation, on a child, holds a hash of what opkit last
	// applied to it: a child whose template renders the same is not
	// written again.
	AppliedHashAnnotation = "opkit.dev/applied-hash"
	// DecisionAnnotation holds a person's answer to a state that
	// NeedsPerson, as the JSON of a Decision; the engine takes the
	// transition it names, records it, and removes the annotation. A
	// decision for another visit of the state (another Seq), or for a
	// state the object is not in, is refused with a Warning Event and
	// removed. `opkit decide` and the console's buttons set it.
	DecisionAnnotation = "opkit.dev/decision"
)

// Decision is a person's answer to a state that NeedsPerson
// (DecisionAnnotation).
type Decision struct {
	// State and Seq are the state visit decided on: status.state.name and
	// status.state.seq as the person saw them.
	State string `json:"state"`
	Seq   int64  `json:"seq"`
	// Choose is the state to go to: one of status.state.choices.
	Choose string `json:"choose"`
	// Reason is why, in the person's words. Required.
	Reason string `json:"reason"`
	// By is who decided: the Kubernetes user opkit decide runs as, or the
	// console's signed-in user.
	By string `json:"by"`
	// At is when, RFC 3339.
	At string `json:"at"`
}

// Patch is the JSON merge patch that writes d as obj's DecisionAnnotation,
// over the resourceVersion read: the API server refuses it when the
// object changed since, so a decision is made on the state seen.
func (d Decision) Patch(resourceVersion string) []byte {
	value, _ := json.Marshal(d) // strings and an int: it cannot fail
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
		"annotations":     map[string]string{DecisionAnnotation: string(value)},
	}})
	return patch
}

// Request is who asked, as a person, for what an annotation on an object
// asks of its handlers, and why: the value of PauseAnnotation,
// ResumedAnnotation and RetryAnnotation.
type Request struct {
	// By is the Kubernetes user the CLI runs as (opkit pause, resume,
	// retry), or the console's signed-in user.
	By string `json:"by"`
	// Reason is why, in the person's words; optional.
	Reason string `json:"reason,omitempty"`
	// At is when, RFC 3339; a retry's with fractions of a second: on a
	// watched object, where each new value is one retry, two retries by
	// the same person for the same reason are two values.
	At string `json:"at"`
}

// Pause is the Request of a pause or a resume.
type Pause = Request

// RetryRequest is the Request of a retry (Retry is the retry policy).
type RetryRequest = Request

// Value is r as an annotation's value.
func (r Request) Value() string {
	value, _ := json.Marshal(r) // strings: it cannot fail
	return string(value)
}

// ReadRequest reads an annotation's value as a Request; a value that is
// not one (a bare timestamp, as older CLIs and consoles wrote for a
// retry, or any value set by hand) is a request by nobody known.
func ReadRequest(value string) Request {
	var r Request
	if json.Unmarshal([]byte(value), &r) != nil {
		return Request{}
	}
	return r
}

// PauseHandler is the handler name under which the run archive records
// an object's handlers paused (trigger TriggerPaused) and resumed
// (TriggerResumed), with who did it as the run's actor: not a DNS label,
// so no handler of an Operator has it.
const PauseHandler = "opkit.pause"

// The triggers of PauseHandler's records. Not Handler.On values; not
// OnResume either, which is an engine's start.
const (
	TriggerPaused  = "paused"
	TriggerResumed = "resumed"
)

// RetryHandler is the handler name under which the run archive records a
// retry of an object's handlers (trigger TriggerRetry), with who asked as
// the run's actor: not a DNS label, so no handler of an Operator has it.
const RetryHandler = "opkit.retry"

// TriggerRetry is the trigger of RetryHandler's records. Not a value of
// Handler.On.
const TriggerRetry = "retry"

// ObjectState is status.state of a custom resource whose Operator
// declares states: where it is in its life cycle.
type ObjectState struct {
	// Name is the current state.
	Name string `json:"name"`
	// Seq counts the transitions: 1 for the initial state. Enter and exit
	// runs, and decisions, name the visit by it.
	Seq int64 `json:"seq"`
	// Since is when the object entered the state, RFC 3339.
	Since string `json:"since"`
	// Reason is why it entered it (the transition's Reason).
	Reason string `json:"reason,omitempty"`
	// From is the state it left; "" for the initial state.
	From string `json:"from,omitempty"`
	// Trigger is how the transition came: TransitionInitial,
	// TransitionGuard, TransitionTimeout or TransitionDecision.
	Trigger string `json:"trigger,omitempty"`
	// By and Message are the person and their reason, for a decision.
	By      string `json:"by,omitempty"`
	Message string `json:"message,omitempty"`
	// Run is the id of the transition's record in the run archive.
	Run string `json:"run,omitempty"`
	// Question and Choices are set while the state NeedsPerson: what is
	// asked, and the states a decision may choose.
	Question string   `json:"question,omitempty"`
	Choices  []string `json:"choices,omitempty"`
}

// ReadObjectState reads status.state of a custom resource (obj, as
// unstructured data): nil, without an error, when it has none.
func ReadObjectState(obj map[string]any) (*ObjectState, error) {
	raw, ok, err := unstructured.NestedMap(obj, "status", "state")
	if err != nil {
		return nil, fmt.Errorf("status.state: %w", err)
	}
	if !ok {
		return nil, nil
	}
	var s ObjectState
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
		return nil, fmt.Errorf("status.state: %w", err)
	}
	return &s, nil
}

// How a transition came (ObjectState.Trigger, and the trigger of its run
// in the archive).
const (
	TransitionInitial  = "initial"
	TransitionGuard    = "guard"
	TransitionTimeout  = "timeout"
	TransitionDecision = "decision"
)

// TransitionHandler is the handler name under which the run archive
// records state transitions: not a DNS label, so no handler of an
// Operator has it.
const TransitionHandler = "state.transition"

// Condition types on every custom resource.
const (
	// ConditionReady is True when every child is applied and ready and no
	// handler has given up.
	ConditionReady = "Ready"
	// ConditionDegraded is True while a child cannot be applied.
	ConditionDegraded = "Degraded"
	// ConditionStalled is True while a handler has given up on the
	// object's generation.
	ConditionStalled = "Stalled"
	// ConditionPaused is True while the object's handlers are paused
	// (PauseAnnotation); it is absent otherwise.
	ConditionPaused = "Paused"
	// ConditionState mirrors status.state for objects whose Operator
	// declares states: always True, its reason the state's name, its
	// message the transition's reason.
	// kubectl wait --for=jsonpath='{.status.state.name}'=Ready waits for a
	// state.
	ConditionState = "State"
	// ConditionNeedsPerson is True while the object is in a state that
	// NeedsPerson, its message the question; False otherwise.
	ConditionNeedsPerson = "NeedsPerson"
)

// TriggerRequeue is the trigger of a run that a handler asked for with
// requeueAfter in its result: the same handler runs again for the object
// after that long. It is not a value of Handler.On, whose triggers are the
// On* constants.
const TriggerRequeue = "requeue"

// TriggerRerun is the trigger of a run a person asked for again (opkit
// rerun, the console's Run again; RerunAnnotation): the handler of an
// earlier run runs once more for the same object, recorded as a re-run
// of it. It is not a value of Handler.On.
const TriggerRerun = "rerun"

// RerunAnnotation holds a person's request to run a handler again for
// this object (a custom resource, or an object an Operator watches), as
// the JSON of a Rerun. The engine takes it when the object has no run in
// flight: it checks that the run is this object's and its handler still
// in the definition, starts the re-run, answers with an Event (RerunStarted,
// or RerunRefused with why), and removes the annotation from a custom
// resource; on a watched object, which opkit does not write, the
// request's Request id is remembered instead, so each new value is one
// request. Who may set it is who may patch the object: Kubernetes RBAC.
// `opkit rerun` and the console's Run again set it.
const RerunAnnotation = "opkit.dev/rerun"

// Rerun is a person's request to run a run's handler again
// (RerunAnnotation).
type Rerun struct {
	// Request identifies the request: the engine's Events about it name it.
	Request string `json:"request"`
	// Run is the id of the run to repeat, in the run archive.
	Run string `json:"run"`
	// SameInput: the re-run gets the binding context the run got, as the
	// archive recorded it; otherwise the object as it is now.
	SameInput bool `json:"sameInput,omitempty"`
	// Reason is why, in the person's words; may be empty.
	Reason string `json:"reason,omitempty"`
	// By is who asked: the Kubernetes user opkit rerun runs as, or the
	// console's signed-in user.
	By string `json:"by"`
	// At is when, RFC 3339.
	At string `json:"at"`
}

// Patch is the JSON merge patch that writes r as an object's
// RerunAnnotation, over the resourceVersion read.
func (r Rerun) Patch(resourceVersion string) []byte {
	value, _ := json.Marshal(r) // strings and a bool: it cannot fail
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
		"annotations":     map[string]string{RerunAnnotation: string(value)},
	}})
	return patch
}

// The reasons of the Events that answer a Rerun.
const (
	EventRerunStarted = "RerunStarted"
	EventRerunRefused = "RerunRefused"
)

// MigrationAnnotation holds, on a CRD, the progress of a storage
// migration in flight (`opkit migrate`, or the engine's --migrate-storage):
// the storage version it rewrites objects to, the page it is at and its
// counts, so that an interrupted migration resumes where it stopped. It is
// removed when the migration ends; deleting it makes the next migration
// start over, which is safe (objects already rewritten cost a request each
// and are counted as already current).
const MigrationAnnotation = "opkit.dev/storage-migration"

// ConversionAnnotationPrefix is, followed by a version's name, the
// annotation in which a conversion keeps what the converted object's
// version cannot hold, as JSON, for the version it came from: fields its
// schema has no place for, and mapped values that do not convert back
// exactly. Converting back restores them and removes the annotation; it
// is absent when nothing is kept. See docs/conversion.md.
const ConversionAnnotationPrefix = "opkit.dev/conversion."
