package conformance

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Kind is what an operator reacts to.
type Kind string

// The kinds of operator the model knows.
const (
	// CustomResource: spec.resource, the operator's own kind.
	CustomResource Kind = "resource"
	// Watch: spec.watch of ConfigMaps carrying a label.
	Watch Kind = "watch"
)

// Trigger is a value of a handler's on:.
type Trigger string

// The triggers the model knows.
const (
	Create Trigger = "create"
	Update Trigger = "update"
	Delete Trigger = "delete"
	Resume Trigger = "resume"
	When   Trigger = "when"
	Enter  Trigger = "enter"
	// Event: a handler on the deliveries of the operator's source
	// (docs/events.md). It has no other trigger.
	Event Trigger = "event"
	// Rerun: a run a person asked for again (opkit rerun); no handler's
	// on: names it.
	Rerun Trigger = "rerun"
)

// Behaviour is what a handler's program does with each run, the same for
// every run of one idempotency key: the first Fail runs of the key fail
// (permanently, giving up at once, when Permanent), the later ones succeed.
// A success with Write returns the status patch {count: c+1}, c being the
// status.count of the object in the run's binding context (0 when it has
// none): the handler that each run of the first defect was.
type Behaviour struct {
	Fail      int
	Permanent bool
	Write     bool
}

func (b Behaviour) String() string {
	var parts []string
	if b.Fail > 0 {
		kind := "fail"
		if b.Permanent {
			kind = "give up"
		}
		parts = append(parts, fmt.Sprintf("%s %d×", kind, b.Fail))
	}
	if b.Write {
		parts = append(parts, "write count+1")
	} else {
		parts = append(parts, "succeed")
	}
	return strings.Join(parts, ", then ")
}

// Handler is one handler of a Def.
type Handler struct {
	Name string
	On   []Trigger
	// Fields are the spec fields (a custom resource) or data keys (a
	// watched ConfigMap) an update is about: "a" or "b"; none: any change.
	Fields []string
	// States are the states an enter handler runs for.
	States    []string
	Behaviour Behaviour
	// MaxAttempts is the handler's retry.maxAttempts, from 1.
	MaxAttempts int
	// Serve runs the handler in exec.mode Serve: processes that outlive
	// runs, a binding context per line. What the handler does is the same.
	Serve bool
}

// Fires reports whether h has trigger t.
func (h *Handler) Fires(t Trigger) bool { return slices.Contains(h.On, t) }

// Def is an operator drawn from the model's space: one kind, handlers in
// declared order, and for a custom resource an optional state machine.
type Def struct {
	Kind     Kind
	Handlers []Handler
	// States is nil for an operator without spec.states.
	States *Machine
	// Source is the operator's source, nil for none: its handlers are
	// those on Event.
	Source *Source
	// Cluster: the operator is an Operator object in the cluster (not a
	// file), labelled with the case's namespace, run by an engine that
	// runs the cluster's Operators of that label (opkit run --selector);
	// its history may pause and resume it whole (OpPauseOperator).
	Cluster bool
	// Slot sets the case's names apart from those of the cases played
	// at the same time (not drawn; the checker sets it): an Operator in
	// the cluster is of one name in the whole cluster, and so is the CRD
	// it owns. Slot 0 renders the Operator OperatorName and the group
	// Group; slot n, OperatorName-n and cn.Group.
	Slot int
}

// Source is the operator's source (docs/events.md), SourceName: a webhook,
// CloudEvents over HTTP, a NATS JetStream stream or a Kafka topic. Each delivery's payload is {"delivery":
// "d<n>"}, and with Object also {"a": value}.
type Source struct {
	// Kind is the source's kind: a webhook (the zero value), CloudEvents,
	// NATS or Kafka.
	Kind SourceKind
	// Object: the source's object template server-side applies the
	// history's custom resource, its spec.a the payload's a: the first
	// delivery creates the object, the next ones change a. Custom
	// resources only.
	Object bool
}

// SourceKind is the kind of a Source.
type SourceKind string

// The kinds of source the model knows.
const (
	// Webhook: verified by a bearer token, its delivery id the header
	// DeliveryHeader; a delivery posted again with the same id is a
	// replay. One posted while no engine runs gets no answer (not drawn).
	Webhook SourceKind = "webhook"
	// NATS: a JetStream stream, NATSStream, read by the engine's durable
	// consumer (deliverPolicy All). A delivery is a message published on
	// NATSSubject, its id <stream>:<stream sequence>: the stream is the
	// case's own, so delivery n is its n-th message. One published while
	// no engine runs waits in the stream for the next start. A message
	// published again is a new message, with a new sequence: a new
	// delivery, so nothing is posted again.
	NATS SourceKind = "nats"
	// CloudEvents: CloudEvents 1.0 posted to the hooks listener as a
	// webhook's deliveries are, verified by the same bearer token; the
	// event CloudEventsType from CloudEventsSource, its id DeliveryID.
	// The checker posts a delivery in the binding's binary mode or its
	// structured one, by turns, and posts it again in the other mode: a
	// replay all the same (the id and source are the event's, whichever
	// the mode).
	CloudEvents SourceKind = "cloudevents"
	// Kafka: the topic KafkaTopic, of one partition, read by the engine's
	// consumer group (startOffset Earliest). A delivery is a record
	// produced to it, its id <topic>:0:<offset>: the cluster is the
	// case's own, so delivery n is the record at offset n-1. Otherwise
	// as NATS: one produced while no engine runs waits for the next
	// start, and one produced again is a new record.
	Kafka SourceKind = "kafka"
)

// KafkaTopic is a Kafka source's topic.
const KafkaTopic = "conformance"

// The attributes of the model's CloudEvents besides their id.
const (
	CloudEventsSource = "conformance"
	CloudEventsType   = "dev.opkit.conformance"
)

// Consumed reports whether s is a source the engine reaches out to (a
// NATS stream, a Kafka topic), rather than one posted to (a webhook,
// CloudEvents).
func (s *Source) Consumed() bool { return s.Kind == NATS || s.Kind == Kafka }

// The names of a NATS source's stream and subject.
const (
	NATSStream  = "CONFORMANCE"
	NATSSubject = "conformance.events"
)

// The names of the rendered source.
const (
	SourceName     = "src"
	DeliveryHeader = "X-Conformance-Delivery"
	// HookSecret is the Secret (key token) of the source's bearer token,
	// in the engine's namespace.
	HookSecret = "conformance-hook"
	HookToken  = "conformance-token"
)

// DeliveryID is the model's name of delivery n, and a webhook sender's id
// of it (Def.SourceDeliveryID is the id the engine records).
func DeliveryID(n int) string { return "d" + strconv.Itoa(n) }

// SourceDeliveryID is the id the engine records of delivery n of d's
// source: the webhook sender's, <id>@<source> of a CloudEvent (neither
// has a character to percent-encode), <stream>:<sequence> of a NATS
// message, or <topic>:<partition>:<offset> of a Kafka record.
func (d *Def) SourceDeliveryID(n int) string {
	if d.Source == nil {
		return DeliveryID(n)
	}
	switch d.Source.Kind {
	case NATS:
		return NATSStream + ":" + strconv.Itoa(n)
	case Kafka:
		return KafkaTopic + ":0:" + strconv.Itoa(n-1)
	case CloudEvents:
		return DeliveryID(n) + "@" + CloudEventsSource
	}
	return DeliveryID(n)
}

// DeliveryPayload is the payload of delivery n; a is its "a" (the value
// the source's object gives spec.a), "" for none.
func DeliveryPayload(n int, a string) map[string]string {
	p := map[string]string{"delivery": DeliveryID(n)}
	if a != "" {
		p["a"] = a
	}
	return p
}

// SenderTraceID is the trace id of the W3C trace context the sender of
// delivery n sends with it (SenderTraceparent): a webhook's traceparent
// header, a CloudEvent's traceparent extension, a NATS message's or a
// Kafka record's traceparent header. The delivery's receipt continues it
// (docs/observability.md, "How a trace is carried").
func SenderTraceID(n int) string { return fmt.Sprintf("c0f0%028x", n) }

// SenderTraceparent is the traceparent the sender of delivery n sends: a
// sampled span of the trace SenderTraceID(n).
func SenderTraceparent(n int) string {
	return "00-" + SenderTraceID(n) + "-" + fmt.Sprintf("5e%014x", n) + "-01"
}

// EventHandlers are d's handlers on Event, in declared order.
func (d *Def) EventHandlers() []Handler {
	var out []Handler
	for _, h := range d.Handlers {
		if h.Fires(Event) {
			out = append(out, h)
		}
	}
	return out
}

// Machine is a small state machine: Start, entered first, leads
// unconditionally to Ask once the enter handlers of Start are done, and
// Ask needs a person, whose choices are Done and Start. Done is final.
// It is the shape of issue 33's third defect (a handler gave up, the state
// needing a person was reached, the decision waited silently) kept small
// enough to be read at a glance.
type Machine struct{}

// The states of Machine.
const (
	StateStart = "Start"
	StateAsk   = "Ask"
	StateDone  = "Done"
)

// Handler returns the handler named name, or nil.
func (d *Def) Handler(name string) *Handler {
	for i := range d.Handlers {
		if d.Handlers[i].Name == name {
			return &d.Handlers[i]
		}
	}
	return nil
}

func (d *Def) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s operator", d.Kind)
	if d.Cluster {
		b.WriteString(", an Operator in the cluster,")
	}
	if d.States != nil {
		b.WriteString(" with states Start -> Ask (a person) -> Done | Start")
	}
	if d.Source != nil {
		fmt.Fprintf(&b, " with a %s source", cmp.Or(d.Source.Kind, Webhook))
		if d.Source.Object {
			b.WriteString(" applying the object (spec.a)")
		}
	}
	for _, h := range d.Handlers {
		fmt.Fprintf(&b, "\n  %s on %v", h.Name, h.On)
		if len(h.Fields) > 0 {
			fmt.Fprintf(&b, " fields %v", h.Fields)
		}
		if len(h.States) > 0 {
			fmt.Fprintf(&b, " states %v", h.States)
		}
		fmt.Fprintf(&b, ": %s, maxAttempts %d", h.Behaviour, h.MaxAttempts)
		if h.Serve {
			b.WriteString(", mode Serve")
		}
	}
	return b.String()
}

// Op is what a history step does.
type Op string

// The steps of a history.
const (
	// OpCreate creates the object (name "obj"), spec (or data) {a: "0", b: "0"}.
	OpCreate Op = "create"
	// OpChange sets the spec field (or data key) Field to a new value.
	OpChange Op = "change"
	// OpTouch changes an annotation: no generation, no projection. A
	// watched object's touch is not even reconciled (the watch drops an
	// update that changes nothing a step reads), where the annotations
	// of OpRetry, OpPause, OpResume and OpRerun are.
	OpTouch Op = "touch"
	// OpDelete deletes the object.
	OpDelete Op = "delete"
	// OpRetry sets opkit.dev/retry on the object, as opkit retry does.
	OpRetry Op = "retry"
	// OpDecide writes a person's decision for the object's current
	// visit of Ask, choosing Choice.
	OpDecide Op = "decide"
	// OpStop stops the engine: gracefully (SIGTERM), or with Kill, SIGKILL.
	OpStop Op = "stop"
	// OpStart starts the engine.
	OpStart Op = "start"
	// OpCrash SIGKILLs the engine while it runs the first handler run of
	// the step before (the checker holds that run until the kill), then
	// starts it again; when that step caused no run, it kills the engine
	// once it is quiet.
	OpCrash Op = "crash"
	// OpDeliver posts delivery Delivery, a new id, to a webhook source
	// (drawn while the engine runs: one posted while none does gets no
	// answer, and is the sender's to deliver again), or publishes it to
	// a NATS source's stream (drawn while it is stopped too, but for a
	// source that applies the object).
	OpDeliver Op = "deliver"
	// OpDeliverAgain posts delivery Delivery again to a webhook source,
	// the same id and payload: a replay, as GitHub's Redeliver button
	// sends.
	OpDeliverAgain Op = "deliver-again"
	// OpPause pauses the object's handlers, as opkit pause does: the
	// annotation opkit.dev/paused, saying who and why.
	OpPause Op = "pause"
	// OpResume resumes them, as opkit resume does: the annotation
	// removed, and opkit.dev/resumed saying who.
	OpResume Op = "resume"
	// OpPauseOperator pauses the whole operator, as opkit pause
	// --operator OP --all does: the annotation opkit.dev/paused on its
	// Operator (a Cluster definition's).
	OpPauseOperator Op = "pause-operator"
	// OpResumeOperator resumes it, as opkit resume --operator OP --all
	// does: the annotation removed, and opkit.dev/resumed saying who.
	OpResumeOperator Op = "resume-operator"
	// OpRerun asks, as opkit rerun does (the annotation opkit.dev/rerun),
	// for the last create or update run of handler Handler for the
	// object to run again: with the object as it is then, or with
	// SameInput, the binding context the run got.
	OpRerun Op = "rerun"
	// OpRedeliver asks, as opkit events redeliver does (a Redelivery
	// object), for delivery Delivery, accepted and handled, to be handled
	// again: a new delivery record with the sender's id and payload, its
	// handlers on event under keys of their own, the source's object
	// applied again. While the engine runs, or, for a source that applies
	// no object, while it is stopped (the next start answers it).
	OpRedeliver Op = "redeliver"
)

// Step is one step of a history.
type Step struct {
	Op Op
	// Field is OpChange's field: "a" or "b".
	Field string
	// Kill is OpStop's: SIGKILL rather than SIGTERM.
	Kill bool
	// Choice is OpDecide's: the state chosen.
	Choice string
	// Delivery is OpDeliver's, OpDeliverAgain's and OpRedeliver's: the
	// delivery's number, its id DeliveryID(Delivery).
	Delivery int
	// Handler is, for an OpCrash after an OpDeliver, the handler on event
	// whose first run the SIGKILL comes in: those declared before it run
	// first. "" for the first. For an OpRerun, the handler whose run is
	// asked for again.
	Handler string
	// SameInput is OpRerun's --same-input.
	SameInput bool
}

func (s Step) String() string {
	switch s.Op {
	case OpChange:
		return "change " + s.Field
	case OpStop:
		if s.Kill {
			return "stop (SIGKILL)"
		}
		return "stop (SIGTERM)"
	case OpDecide:
		return "decide " + s.Choice
	case OpDeliver, OpDeliverAgain, OpRedeliver:
		return string(s.Op) + " " + DeliveryID(s.Delivery)
	case OpCrash:
		if s.Handler != "" {
			return "crash in " + s.Handler
		}
	case OpRerun:
		if s.SameInput {
			return "rerun " + s.Handler + " --same-input"
		}
		return "rerun " + s.Handler
	}
	return string(s.Op)
}

// Case is a definition and a history drawn to go together.
type Case struct {
	Def     Def
	History []Step
}

func (c Case) String() string {
	steps := make([]string, len(c.History))
	for i, s := range c.History {
		steps[i] = s.String()
	}
	return c.Def.String() + "\n  history: " + strings.Join(steps, "; ")
}
