package opkittest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/scenario/runner"
)

// Delivery is a webhook delivery that Send posts to one of an operator's
// sources (docs/events.md), as its sender would.
type Delivery struct {
	// Event is the kind of event, sent in the source's event header
	// (X-GitHub-Event for GitHub); `event` in the source's expressions.
	// Defaults to none; set for a source without an event header, it
	// fails the test.
	Event string
	// Payload is encoded as JSON into the body (a json.RawMessage is sent
	// as is). Defaults to {}.
	Payload any
	// Headers are more headers, set before the source's own.
	Headers map[string]string
	// ID is the sender's delivery id, sent in the source's delivery
	// header (X-GitHub-Delivery for GitHub): send one twice to test a
	// replay. Defaults to a new id; set for a source that reads none, it
	// fails the test.
	ID string
}

// DeliveryAnswer is the engine's answer to a delivery, as its JSON body
// says it (docs/events.md, "What happens to a delivery").
type DeliveryAnswer struct {
	// Delivery is the archive's id of the delivery's record, when one was
	// made.
	Delivery string `json:"delivery"`
	// Outcome is Pending for an accepted delivery, whose handling
	// follows; Refused for one refused (a bad signature, a replay,
	// filtered out...), with the Reason; NotFound or Unavailable for a
	// request that reached no source.
	Outcome string `json:"outcome"`
	// Reason says why it was refused.
	Reason string `json:"reason"`
}

// Send posts a webhook delivery to the operator's source on the engine's
// hooks listener, as the source's sender would, and returns the HTTP
// status and answer: 202 (Outcome Pending) for an accepted delivery,
// whose handlers on `event` then run (wait with WaitRun, Trigger
// "event"), 200 for one the source's filter turns down, and so on
// (docs/events.md). The body is d.Payload as JSON, signed as the source
// verifies it, with the secret in its Secret (secretRef); d.ID and
// d.Event go in the source's delivery and event headers.
//
// When the source's Secret does not exist, Send creates it, with a random
// value, in the namespace its secretRef names (creating that namespace
// if it is missing too): Send plays the sender, who knows the secret. It
// is kept for the binary's other tests, which use it the same way. An
// operator or source the engine does not run, or a request that gets no
// JSON answer, fails the test.
func (e *Engine) Send(t testing.TB, operator, sourceName string, d Delivery) (status int, answer DeliveryAnswer) {
	t.Helper()
	op := e.operator(t, operator)
	src := op.EventSource(sourceName)
	if src == nil {
		names := make([]string, 0, len(op.Sources))
		for _, s := range op.Sources {
			names = append(names, s.Name)
		}
		t.Fatalf("opkittest: operator %s has no source %q; its sources: %s", operator, sourceName, strings.Join(names, ", "))
	}
	body := []byte("{}")
	if d.Payload != nil {
		var err error
		if body, err = json.Marshal(d.Payload); err != nil {
			t.Fatalf("opkittest: sending to %s/%s: the payload does not encode as JSON: %v", operator, sourceName, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h := http.Header{}
	if err := setHeaders(h, src, d); err != nil {
		t.Fatalf("opkittest: sending to %s/%s: %v", operator, sourceName, err)
	}
	status, raw, err := runner.Deliver(ctx, e.env.Client, e.eng.HooksAddr(), operator, src, body, h)
	if err != nil {
		t.Fatalf("opkittest: sending to %s/%s: %v", operator, sourceName, err)
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		t.Fatalf("opkittest: sending to %s/%s: answered %d, %q: not a JSON answer: %v", operator, sourceName, status, raw, err)
	}
	return status, answer
}

// setHeaders sets a delivery's headers on h: its own, then the content
// type, the delivery id and the event, as the source reads them.
func setHeaders(h http.Header, src *definition.EventSource, d Delivery) error {
	for k, v := range d.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	switch {
	case src.DeliveryHeader == "" && d.ID != "":
		return fmt.Errorf("Delivery.ID %q: source %s reads no delivery id (it has no deliveryHeader)", d.ID, src.Name)
	case d.ID != "":
		h.Set(src.DeliveryHeader, d.ID)
	case src.DeliveryHeader != "" && h.Get(src.DeliveryHeader) == "":
		h.Set(src.DeliveryHeader, "opkittest-"+utilrand.String(16))
	}
	switch {
	case src.EventHeader == "" && d.Event != "":
		return fmt.Errorf("Delivery.Event %q: source %s reads no event (it has no eventHeader)", d.Event, src.Name)
	case d.Event != "":
		h.Set(src.EventHeader, d.Event)
	}
	return nil
}
