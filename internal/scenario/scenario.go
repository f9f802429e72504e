package scenario

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// TimeoutScaleEnv names the environment variable that multiplies the
// waits of tests on a loaded machine: opkit test's expect steps (its
// --timeout-scale's default) and pkg/opkittest's waits. A number, 1 or
// more.
const TimeoutScaleEnv = "OPKIT_TEST_TIMEOUT_SCALE"

// TimeoutScale reads TimeoutScaleEnv: 1 when it is unset, an error
// naming it when it is not a number from 1 to 100.
func TimeoutScale() (float64, error) {
	v := os.Getenv(TimeoutScaleEnv)
	if v == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 100 {
		return 1, fmt.Errorf("%s=%q: want a number from 1 to 100", TimeoutScaleEnv, v)
	}
	return f, nil
}

// DefaultTimeout is how long an expect step waits when neither it nor its
// scenario says.
const DefaultTimeout = 30 * time.Second

// MaxTimeout is the longest timeout a scenario or an expect step may set.
const MaxTimeout = 10 * time.Minute

// DefaultSendStatus is the HTTP status a send step expects when it names
// none: 202 Accepted, the answer to a delivery that passed every check.
const DefaultSendStatus = 202

// Scenario is one YAML document of a scenario file.
type Scenario struct {
	// Name is the scenario's name (scenario:), unique in its file.
	Name string
	// File is the path the scenario was read from, as given to Load.
	File string
	// Line is the 1-based line of the first field of the scenario's
	// document.
	Line int
	// Operators are the operator definition files to run, resolved
	// against the scenario file's directory: relative to the working
	// directory when File is, absolute when File or the path is. Each
	// existed when the scenario was loaded.
	Operators []string
	// Timeout is the default timeout of the expect steps. Defaults to
	// DefaultTimeout.
	Timeout time.Duration
	// Steps are run in order; there is at least one.
	Steps []Step
}

// Step is one step of a scenario: exactly one of its action fields is set.
type Step struct {
	// Line is the 1-based line of the step in its scenario's file, to
	// report a failing step as file:line.
	Line int
	// Name is the step's free-text name (name:), or empty.
	Name string

	Apply   *Apply
	Patch   *Patch
	Delete  *Delete
	Retry   *Retry
	Advance *Advance
	Stub    *Stub
	Unstub  *Unstub
	Send    *Send
	Expect  *Expect

	// Refused, with Apply, Patch or Delete, is the refusal the API server
	// must answer the step's request with; nil when the request must be
	// accepted.
	Refused *Refused
}

// Refused is how the API server must refuse a step's request: with an
// error of a check (a schema or CEL rule, an immutable field, a field the
// object's state refuses, an admission handler's denial), not of a
// missing object or an unreachable server.
type Refused struct {
	// Message is text the refusal's message contains; not empty.
	Message string
}

// stepKinds are the actions of a step, in the order the format reference
// lists them.
var stepKinds = []string{"apply", "patch", "delete", "retry", "advance", "stub", "unstub", "send", "expect"}

// Kind is the step's action as written in YAML: apply, patch, delete,
// retry, advance, stub, unstub, send or expect.
func (s Step) Kind() string {
	switch {
	case s.Apply != nil:
		return "apply"
	case s.Patch != nil:
		return "patch"
	case s.Delete != nil:
		return "delete"
	case s.Retry != nil:
		return "retry"
	case s.Advance != nil:
		return "advance"
	case s.Stub != nil:
		return "stub"
	case s.Unstub != nil:
		return "unstub"
	case s.Send != nil:
		return "send"
	case s.Expect != nil:
		return "expect"
	}
	return ""
}

// Object is a Kubernetes object or a free-form JSON object as read from
// YAML: map[string]any holding only JSON values (string, int64, float64,
// bool, nil, []any, map[string]any), as unstructured.Unstructured takes.
type Object = map[string]any

// Ref names an object in the scenario's namespace (or a cluster-scoped
// one). It has no namespace: the runner gives each scenario its own.
type Ref struct {
	// APIVersion is the object's group/version, or empty: the runner
	// resolves Kind through discovery.
	APIVersion string
	Kind       string
	Name       string
}

func (r Ref) String() string {
	if r.APIVersion == "" {
		return r.Kind + "/" + r.Name
	}
	return r.APIVersion + " " + r.Kind + "/" + r.Name
}

// Apply creates or updates objects in the scenario's namespace.
type Apply struct {
	// File is the file of objects, resolved as Scenario.Operators are;
	// empty for one object given inline.
	File string
	// Objects are the inline object, or every object of File in order,
	// this step's own copies. Each has apiVersion, kind and metadata.name,
	// and no metadata.namespace.
	Objects []Object
}

// Patch changes an object with a JSON merge patch (RFC 7386).
type Patch struct {
	Object Ref
	// Merge is the merge patch: the fields to set, null removing one.
	Merge Object
}

// Delete deletes an object.
type Delete struct {
	Object Ref
}

// Retry asks the engine to retry a Stalled object now, as opkit retry
// does.
type Retry struct {
	Object Ref
}

// Advance moves the engine's fake clock forward.
type Advance struct {
	// By is more than 0.
	By time.Duration
}

// Stub replaces a handler's executor by canned results from this step on.
type Stub struct {
	Handler string
	// Operator is the Operator's name, or empty: the scenario's files must
	// then define one Operator, which the runner checks.
	Operator string
	// Results are returned by the handler's next runs in order, the last
	// one repeating; there is at least one.
	Results []StubResult
}

// StubResult is what one stubbed run returns: a failure (Fail set) or a
// result (Result set), never both.
type StubResult struct {
	// Fail is the failure's message; empty for a success.
	Fail string
	// Permanent makes the failure permanent: no retries, the object is
	// Stalled. Only with Fail.
	Permanent bool
	// Result is the handler result (docs/handlers.md#the-result) of a
	// success; nil for a failure, empty for a result of nothing.
	Result Object
	// Log is what the stubbed run writes to its log.
	Log string
}

// Unstub lets a stubbed handler run its executor again.
type Unstub struct {
	Handler  string
	Operator string // as in Stub
}

// Send delivers a webhook to one of an operator's sources, signed as the
// source requires.
type Send struct {
	Source   string
	Operator string // as in Stub
	// Event goes in the source's event header, when given.
	Event string
	// Payload is the JSON body. Defaults to {}.
	Payload Object
	// Headers are more request headers (a message's headers, for a
	// consumed source).
	Headers map[string]string
	// ID is the message's id, for a consumed source (githubPoll, nats,
	// kafka), whose messages are handed to the engine as its consumer
	// would: a GitHub event's id, <stream>:<sequence>. Defaults to a
	// random one.
	ID string
	// Status is the HTTP status the delivery must be answered with.
	// Defaults to DefaultSendStatus.
	Status int
}

// Expect waits until something holds, or fails after Timeout. Exactly one
// of Object, Run, Event and Log is set.
type Expect struct {
	// Timeout is the step's own, or its scenario's.
	Timeout time.Duration

	Object *ExpectObject
	Run    *ExpectRun
	Event  *ExpectEvent
	Log    *ExpectLog
}

// ExpectObject checks an object: it is Absent, or it exists and every
// check given (at least one of Matches, CEL and Condition) holds.
type ExpectObject struct {
	Ref Ref
	// Matches are fields the object must have, as partial YAML: a map
	// matches when every key given matches, a list when it has the same
	// length and matches item by item, a scalar when it is equal (numbers
	// by value: 1 equals 1.0). Nil when not given.
	Matches Object
	// CEL is a bool expression over object; nil when not given.
	CEL *CEL
	// Condition must be in the object's status.conditions; nil when not
	// given.
	Condition *Condition
	// Absent: the object does not exist. Never with the other checks.
	Absent bool
}

// Condition is a condition an object must have in status.conditions.
type Condition struct {
	Type string
	// Status is True, False or Unknown.
	Status string
	// Reason must be the condition's reason, when not empty.
	Reason string
}

// ExpectRun waits for a handler run recorded in the archive, or, when
// Trigger is a transition's (Transition), for a state transition's
// record. Empty fields match any run.
type ExpectRun struct {
	// Handler is the handler's name; empty, and only then, for a state
	// transition.
	Handler  string
	Operator string // as in Stub
	// Object is the name of the object the run was for.
	Object string
	// Trigger is one of v1alpha1's On* values, TriggerRequeue, or one of
	// its Transition* values (TransitionTriggers).
	Trigger string
	// From and To are the states a transition left and entered; only for
	// a transition.
	From, To string
	// Outcome is one of archive's Outcomes.
	Outcome string
	// Attempt is the run's attempt, from 1; 0 for any.
	Attempt int
	// Count, when set, is how many runs must match, exactly: 0 checks
	// that none did. Without it, one is enough.
	Count *int
}

// TransitionTriggers are the triggers of a state transition's record in
// the archive (v1alpha1.Transition*): how the transition came.
var TransitionTriggers = []string{v1alpha1.TransitionInitial, v1alpha1.TransitionGuard, v1alpha1.TransitionTimeout, v1alpha1.TransitionDecision}

// Transition reports whether e expects a state transition's record rather
// than a handler's run.
func (e *ExpectRun) Transition() bool { return slices.Contains(TransitionTriggers, e.Trigger) }

// ExpectEvent waits for a Kubernetes Event.
type ExpectEvent struct {
	// Object is the object the Event is about; nil for any.
	Object *Ref
	Reason string
	// Type is Normal or Warning; empty for any.
	Type string
	// Message is text the Event's message contains; empty for any.
	Message string
}

// ExpectLog waits for a line in a handler run's log.
type ExpectLog struct {
	Handler  string
	Operator string // as in Stub
	// Object is the name of the object the run was for; empty for any.
	Object string
	// Contains is text the line contains.
	Contains string
}

// CEL is a compiled CEL expression over object, the expected object as a
// map, whose type is bool.
type CEL struct {
	// Source is the expression as written.
	Source  string
	Program cel.Program
}

// Eval reports whether the expression holds for object. An error is an
// evaluation error, such as a field object does not have.
func (c *CEL) Eval(object Object) (bool, error) {
	out, _, err := c.Program.Eval(map[string]any{"object": object})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%s: got %v, not a bool", c.Source, out.Value())
	}
	return b, nil
}
