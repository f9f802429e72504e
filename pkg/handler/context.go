package handler

import (
	"encoding/json"
	"fmt"
	"time"
)

// Trigger is why a handler runs: the binding context's "trigger".
type Trigger string

// The triggers of a run (Context.Trigger), as docs/handlers.md lists them.
const (
	OnCreate   Trigger = "create"
	OnUpdate   Trigger = "update"
	OnDelete   Trigger = "delete"
	OnResume   Trigger = "resume"
	OnSchedule Trigger = "schedule"
	OnWhen     Trigger = "when"
	OnRequeue  Trigger = "requeue"
	OnEvent    Trigger = "event"
	// OnRerun is a run a person asked for again (opkit rerun):
	// Context.RerunOf names the run it repeats.
	OnRerun Trigger = "rerun"
	// OnManual is an operator-wide schedule's run a person asked for
	// (opkit schedule run): Context.Schedule.Manual says who and why.
	OnManual Trigger = "manual"
	// OnEnter and OnExit are the runs of an operator with states, when
	// the object enters or leaves one of the handler's states.
	OnEnter Trigger = "enter"
	OnExit  Trigger = "exit"
)

// The triggers of an admission call (AdmissionContext.Trigger).
const (
	OnValidate Trigger = "validate"
	OnMutate   Trigger = "mutate"
)

// OnAny registers a table's default: the function for every trigger that
// has none of its own. The empty trigger "" means the same.
const OnAny Trigger = "*"

// runTriggers and admissionTriggers are the triggers each table may name,
// in the order messages list them.
var (
	runTriggers       = []Trigger{OnCreate, OnUpdate, OnDelete, OnResume, OnSchedule, OnWhen, OnRequeue, OnEvent, OnRerun, OnManual, OnEnter, OnExit}
	admissionTriggers = []Trigger{OnValidate, OnMutate}
)

// Context is the binding context of a run, the input of a Func. O is the
// object's type: the custom resource (an Object, or a generated type), the
// watched object (a KubeObject, or the Kubernetes type), for an
// operator-wide schedule or a delivery anything (Object is nil). Old is
// the type of Old: the custom resource's spec type, or a watched object's
// projection (its own type, or map[string]any).
//
// Generated code names it once: type GreetContext =
// handler.Context[Greeting, GreetingSpec].
type Context[O, Old any] struct {
	Operator string  `json:"operator"`
	Handler  string  `json:"handler"`
	Trigger  Trigger `json:"trigger"`
	// RunID is the run's id in the archive (opkit logs RUN).
	RunID string `json:"runId"`
	// IdempotencyKey is kept by every attempt of the run and by a run
	// interrupted by the engine's end: a side effect keyed by it is done
	// once (docs/handlers.md, "Idempotency keys").
	IdempotencyKey string `json:"idempotencyKey"`
	// Attempt is 1 for the first run of the key, then one more per
	// failed run.
	Attempt int `json:"attempt"`
	// RerunOf, on OnRerun, is the id of the run this one repeats.
	RerunOf string `json:"rerunOf,omitempty"`
	// Traceparent and Tracestate are the W3C trace context of the run's
	// span, for the handler's own spans to continue; empty when the run
	// has none.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`

	// Object is the object the run is for, as the engine read it; nil for
	// an operator-wide schedule's run and a delivery's.
	Object *O `json:"object"`
	// Old is the spec as of the last generation every create and update
	// handler was done with (a watched object's projection); nil before
	// the first.
	Old *Old `json:"old"`
	// Diff lists the changes from Old to the object's spec.
	Diff []Change `json:"diff"`
	// Children holds each child's current object by id (Secrets without
	// data); decode one with json.Unmarshal into its type.
	Children map[string]json.RawMessage `json:"children"`
	// Related holds each related object by id: the object named, or the
	// list (a JSON array) a selector matched.
	Related map[string]json.RawMessage `json:"related,omitempty"`
	// Schedule is set in an operator-wide schedule's run only.
	Schedule *Schedule `json:"schedule,omitempty"`
	// Event is the delivery of a run on OnEvent, and nil in any other.
	Event *Delivery `json:"event,omitempty"`
}

// Change is one entry of Context.Diff. Its values are JSON, to be decoded
// into the field's type; Old is nil for "add", New for "remove".
type Change struct {
	// Op is "add", "remove" or "change".
	Op string `json:"op"`
	// Path is dotted from the object's root: spec.language,
	// metadata.labels.team.
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
}

// Schedule is the slot of an operator-wide schedule's run.
type Schedule struct {
	// Slot is the time the run is for (not when it started), in UTC; for
	// a run asked for by a person, when they asked.
	Slot time.Time `json:"slot"`
	// Manual is set in a run asked for by a person (OnManual).
	Manual *Manual `json:"manual,omitempty"`
}

// Manual says who asked for a schedule's run now, and why.
type Manual struct {
	// Request is the request's id, the end of the run's key.
	Request string `json:"request"`
	// By is the Kubernetes user who asked.
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// Delivery is the webhook delivery a run on OnEvent handles
// (docs/events.md).
type Delivery struct {
	// ID is the archive's id of the delivery (opkit events show ID).
	ID string `json:"id"`
	// Source is the operator's source it came in on.
	Source string `json:"source"`
	// DeliveryID is the sender's id of the delivery (X-GitHub-Delivery).
	DeliveryID string `json:"deliveryId,omitempty"`
	// Event is what the sender says the event is (X-GitHub-Event's
	// issue_comment).
	Event      string    `json:"event,omitempty"`
	ReceivedAt time.Time `json:"receivedAt"`
	// Headers are the delivery's headers by lower-case name, first value,
	// credentials redacted.
	Headers map[string]string `json:"headers"`
	// Payload is the delivery's JSON body as received.
	Payload json.RawMessage `json:"payload"`
}

// ObjectMeta is the metadata of a Kubernetes object, as much of it as a
// handler reads (managedFields are never sent).
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp time.Time         `json:"creationTimestamp,omitzero"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
}

// OwnerReference names an object's owner.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// Object is a custom resource with a typed spec and status: the O of a
// Context for an operator's own resource, when no generated type is at
// hand (type Greeting = handler.Object[GreetingSpec, GreetingStatus]).
type Object[Spec, Status any] struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       Spec       `json:"spec"`
	Status     *Status    `json:"status,omitempty"`
}

// KubeObject is any Kubernetes object: its apiVersion, kind and metadata,
// and every other top-level field (spec, status, data...) as JSON in
// Fields. It is the O of a handler that has no type for its objects.
type KubeObject struct {
	APIVersion string
	Kind       string
	Metadata   ObjectMeta
	Fields     map[string]json.RawMessage
}

// MarshalJSON writes o as one JSON object: Fields beside apiVersion, kind
// and metadata.
func (o KubeObject) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(o.Fields)+3)
	for k, v := range o.Fields {
		m[k] = v
	}
	m["apiVersion"], m["kind"], m["metadata"] = o.APIVersion, o.Kind, o.Metadata
	return json.Marshal(m)
}

// UnmarshalJSON reads a JSON object into o.
func (o *KubeObject) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*o = KubeObject{}
	for name, field := range map[string]any{"apiVersion": &o.APIVersion, "kind": &o.Kind, "metadata": &o.Metadata} {
		if raw, ok := m[name]; ok {
			if err := json.Unmarshal(raw, field); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			delete(m, name)
		}
	}
	if len(m) > 0 {
		o.Fields = m
	}
	return nil
}
