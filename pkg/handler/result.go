package handler

import (
	"encoding/json"
	"fmt"
	"time"
)

// Result is what a run answers, with exactly the fields of the result
// schema (docs/schemas/result.schema.json) a run may write; an admission
// call answers an AdmissionResult. A nil *Result, or a zero one, is the
// empty result "{}": nothing to do. S is the type of the status fields
// the handler writes.
type Result[S any] struct {
	// Status is merged into the object's .status (a JSON merge patch).
	// observedGeneration, conditions and opkit are opkit's and refused.
	Status *S `json:"status,omitempty"`
	// Events are posted on the object: build them with Normal and
	// Warning.
	Events []Event `json:"events,omitempty"`
	// RequeueAfter, when not zero, runs the handler again for the object
	// after this long, with trigger requeue. Only a successful run asks.
	RequeueAfter Duration `json:"requeueAfter,omitzero"`
	// Skipped says the run found nothing to do: recorded as Skipped, no
	// Event. Its Status and RequeueAfter still apply.
	Skipped bool `json:"skipped,omitempty"`
	// Refuse, in a run on OnEvent only, turns the delivery down with this
	// reason. In a run of another trigger it fails the run permanently.
	Refuse string `json:"refuse,omitempty"`
	// Error fails the run with its message. A Func returns an error
	// instead (Temporary, Permanent), and the SDK writes it here.
	Error *ResultError `json:"error,omitempty"`
}

// Event is a Kubernetes Event a result posts on the object.
type Event struct {
	// Type is "Normal" (the default) or "Warning".
	Type string `json:"type,omitempty"`
	// Reason is UpperCamelCase: Greeted, Announced.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Normal is an Event of type Normal.
func Normal(reason, message string) Event {
	return Event{Type: "Normal", Reason: reason, Message: message}
}

// Warning is an Event of type Warning.
func Warning(reason, message string) Event {
	return Event{Type: "Warning", Reason: reason, Message: message}
}

// ResultError is a result's "error": the run failed with Message;
// Permanent says retrying cannot help (the object is Stalled at once).
type ResultError struct {
	Message   string `json:"message"`
	Permanent bool   `json:"permanent,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string,
// "30s" or "1m30s", as the result's requeueAfter is.
type Duration time.Duration

// String is the duration as time.Duration writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string. A negative duration is an
// error: opkit refuses one.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d < 0 {
		return nil, fmt.Errorf("the duration %s is negative", d)
	}
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// answer is a result the SDK writes: a run's or an admission call's.
type answer interface {
	// failure is the result's error, or nil.
	failure() *ResultError
}

func (r *Result[S]) failure() *ResultError       { return r.Error }
func (r *AdmissionResult) failure() *ResultError { return r.Error }
