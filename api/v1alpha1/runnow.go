package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// RunNowAnnotationPrefix is, followed by a handler's name, the annotation
// on an Operator that asks its engine to run that operator-wide schedule's
// handler now, once, besides its slots (opkit schedule run). Its value is
// the JSON of a RunNow. The engine that leads runs it with the key
// RunNowKey, recorded with the trigger TriggerManual and the RunNow's By
// as the run's actor, and removes the annotation once the run has ended;
// an engine stopped during the run leaves it, and the next one runs it
// again with the same key. A handler name is a DNS label, so the
// annotation's name part is one too; a handler per annotation lets two
// handlers be asked for at once.
const RunNowAnnotationPrefix = "run-now.opkit.dev/"

// RunNowAnnotation is the annotation asking for a run of handler now.
func RunNowAnnotation(handler string) string { return RunNowAnnotationPrefix + handler }

// TriggerManual is the trigger of a run asked for by a person (opkit
// schedule run), not by a slot: its binding context's schedule.manual
// says who asked and why. It is not a value of Handler.On.
const TriggerManual = "manual"

// RunNow is who asked for a run now, why and when, and the request's id:
// the value of a RunNowAnnotation.
type RunNow struct {
	// ID names the request: it is in the run's key, so that a run
	// interrupted by the engine's end runs again with the same key, and
	// two requests are two runs. Lower-case letters and digits, at most 40.
	ID string `json:"id"`
	// By is the Kubernetes user opkit schedule run runs as.
	By string `json:"by"`
	// Reason is why, in the person's words; optional.
	Reason string `json:"reason,omitempty"`
	// At is when it was asked, RFC 3339.
	At string `json:"at"`
}

// Value is r as an annotation's value.
func (r RunNow) Value() string {
	value, _ := json.Marshal(r) // strings: it cannot fail
	return string(value)
}

// ReadRunNow reads a RunNowAnnotation's value; an error says what is
// wrong with it (it was set by hand).
func ReadRunNow(value string) (RunNow, error) {
	var r RunNow
	if err := json.Unmarshal([]byte(value), &r); err != nil {
		return RunNow{}, fmt.Errorf("it is not the JSON of a request ({\"id\":...,\"by\":...,\"at\":...}): %w", err)
	}
	if r.ID == "" || len(r.ID) > 40 || strings.Trim(r.ID, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		id := r.ID
		if len(id) > 48 {
			// The start says what it is; a message quotes no more.
			id = strings.ToValidUTF8(id[:48], "") + "..."
		}
		return RunNow{}, fmt.Errorf("its id %q is not 1 to 40 lower-case letters and digits", id)
	}
	if strings.TrimSpace(r.By) == "" {
		return RunNow{}, errors.New("it names nobody (by): a run asked for by a person says who")
	}
	return r, nil
}

// RunNowKey is the idempotency key of the run that request asks of
// operator's handler.
func RunNowKey(operator, handler string, request RunNow) string {
	return operator + "/schedule/" + handler + "/manual/" + request.ID
}
