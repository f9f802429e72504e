package engine_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/source"
)

// ceOperator is an Operator whose source ci (cloudEvents, verified as
// verify says, with more of its spec) runs the event handler for finished
// builds whose subject is not skip.
func ceOperator(t *testing.T, env *clustertest.Env, out, verify string) *definition.Definition {
	t.Helper()
	yaml := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: ce-%[1]s}
spec:
  sources:
  - name: ci
    cloudEvents:
      %[3]s
      maxBodyBytes: 4096
    filter: event == 'dev.ci.build.finished' && headers['ce-subject'] != 'skip'
  handlers:
  - name: build
    on: [event]
    timeout: 3m
    %[2]s
`, env.Namespace, eventHandlerExec(t, out), verify)
	file := filepath.Join(t.TempDir(), "ce.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return exampleDefinition(t, file)
}

// ceAnswer is the answer to a request to a cloudEvents source.
type ceAnswer struct {
	Delivery   string     `json:"delivery"`
	DeliveryID string     `json:"deliveryId"`
	Outcome    string     `json:"outcome"`
	Reason     string     `json:"reason"`
	Deliveries []ceAnswer `json:"deliveries"`
}

// ceRequest is one request to a cloudEvents source.
type ceRequest struct {
	header http.Header
	body   string
	secret string // signs the body as the source verifies it
}

// structuredEvent is a structured-mode request of an event of source /ci.
func structuredEvent(id, typ, subject, text, secret string) ceRequest {
	body := fmt.Sprintf(`{"specversion": "1.0", "id": %q, "source": "/ci", "type": %q, "subject": %q, "datacontenttype": "application/json", "data": {"text": %q}}`, id, typ, subject, text)
	return ceRequest{header: http.Header{"Content-Type": {source.ContentTypeCloudEvent}}, body: body, secret: secret}
}

// binaryEvent is a binary-mode request of an event of source /ci.
func binaryEvent(id, typ, subject, text, secret string) ceRequest {
	h := http.Header{"Content-Type": {"application/json"}, "Ce-Specversion": {"1.0"}, "Ce-Source": {"%2Fci"}, "Ce-Type": {typ}, "Ce-Subject": {subject}}
	if id != "" {
		h.Set("Ce-Id", id)
	}
	return ceRequest{header: h, body: fmt.Sprintf(`{"text": %q}`, text), secret: secret}
}

// bytesEvent is a binary-mode request of an event whose data is not
// text.
func bytesEvent(secret string) ceRequest {
	c := binaryEvent("8", "dev.ci.build.finished", "main", "", secret)
	c.header.Set("Content-Type", "application/octet-stream")
	c.body = "\xff\xfe"
	return c
}

// postEvent posts c to the source ci of d and returns the status and the
// answer.
func postEvent(t *testing.T, e *engine.Engine, d *definition.Definition, c ceRequest) (int, ceAnswer) {
	t.Helper()
	url := "http://" + e.HooksAddr() + "/hooks/" + d.Operator.Name + "/ci"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader([]byte(c.body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = c.header.Clone()
	if err := source.Authorize(d.EventSource("ci"), []byte(c.secret), []byte(c.body), req.Header); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var a ceAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("the answer is not JSON: %q", data)
	}
	return resp.StatusCode, a
}

// TestCloudEventsAreVerifiedRecordedAndHandledOnce: a structured and a
// binary event each run the handler on event once, with the event's data
// as the payload, its type as the event and id@source as the delivery id;
// the same id and source again (in either mode) is a replay, 409; a bad
// signature, an event without ce-id and a batch are refused with their
// status and reason; the filter reads the type and headers['ce-subject']
// alike in both modes.
func TestCloudEventsAreVerifiedRecordedAndHandledOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "s3cret")
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	d := ceOperator(t, env, out, fmt.Sprintf("hmac: {header: X-Signature, prefix: 'sha256=', secretRef: {namespace: %s, name: hook, key: secret}}", env.Namespace))
	if err := e.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	op := d.Operator.Name

	for _, c := range []struct {
		mode string
		req  ceRequest
		id   string
	}{
		{"structured", structuredEvent("1", "dev.ci.build.finished", "main", "structured", "s3cret"), "1@%2Fci"},
		{"binary", binaryEvent("2", "dev.ci.build.finished", "main", "binary", "s3cret"), "2@%2Fci"},
	} {
		status, a := postEvent(t, e, d, c.req)
		if status != http.StatusAccepted || a.Outcome != "Pending" || a.Delivery == "" {
			t.Fatalf("a signed %s event was answered %d %+v, want 202 Pending with the archive's id", c.mode, status, a)
		}
		got := waitDelivery(t, store, a.Delivery, archive.DeliveryHandled)
		if got.DeliveryID != c.id || got.Event != "dev.ci.build.finished" || len(got.Runs) != 1 {
			t.Errorf("the %s event was recorded with delivery id %q, event %q, runs %v; want %q, its type, one run", c.mode, got.DeliveryID, got.Event, got.Runs, c.id)
		}
		// What the handler reads: the data as the payload, the attributes
		// as ce-* headers, whichever the mode.
		var payload map[string]any
		if err := json.Unmarshal(got.Payload, &payload); err != nil || payload["text"] != c.mode || len(payload) != 1 {
			t.Errorf("the %s event's payload is %s, want its data", c.mode, got.Payload)
		}
		headers := source.Headers(got.Headers)
		for k, v := range map[string]string{"ce-subject": "main", "ce-source": "/ci", "ce-type": "dev.ci.build.finished", "ce-specversion": "1.0", "ce-datacontenttype": "application/json", "x-signature": "[redacted]"} {
			if headers[k] != v {
				t.Errorf("the %s event's header %s is %q, want %q", c.mode, k, headers[k], v)
			}
		}
	}

	batch := ceRequest{header: http.Header{"Content-Type": {source.ContentTypeCloudEventBatch}}, secret: "s3cret",
		body: `[{"specversion": "1.0", "id": "9", "source": "/ci", "type": "dev.ci.build.finished", "data": {"text": "batched"}}]`}
	for _, c := range []struct {
		name   string
		req    ceRequest
		status int
		reason string
	}{
		{"the structured event again", structuredEvent("1", "dev.ci.build.finished", "main", "structured", "s3cret"), http.StatusConflict, "replay of delivery 1@%2Fci: it was accepted before"},
		{"the structured event again, in binary mode", binaryEvent("1", "dev.ci.build.finished", "main", "again", "s3cret"), http.StatusConflict, "replay of delivery 1@%2Fci"},
		{"the binary event again", binaryEvent("2", "dev.ci.build.finished", "main", "binary", "s3cret"), http.StatusConflict, "replay of delivery 2@%2Fci"},
		{"a bad signature", structuredEvent("3", "dev.ci.build.finished", "main", "forged", "guess"), http.StatusUnauthorized, "bad signature"},
		{"no ce-id", binaryEvent("", "dev.ci.build.finished", "main", "anonymous", "s3cret"), http.StatusBadRequest, "no ce-id header: the event's id"},
		{"a batch", batch, http.StatusUnsupportedMediaType, "set the source's cloudEvents.batch to Split"},
		{"bytes", bytesEvent("s3cret"), http.StatusUnsupportedMediaType, "the body, of content type application/octet-stream, is not UTF-8 text"},
		{"bytes with a bad signature", bytesEvent("guess"), http.StatusUnauthorized, "bad signature"}, // the data is read once its sender is verified
		{"another type", structuredEvent("4", "dev.ci.build.started", "main", "started", "s3cret"), http.StatusOK, "filtered out"},
		{"another type, in binary mode", binaryEvent("5", "dev.ci.build.started", "main", "started", "s3cret"), http.StatusOK, "filtered out"},
		{"a subject filtered out", structuredEvent("6", "dev.ci.build.finished", "skip", "skipped", "s3cret"), http.StatusOK, "filtered out"},
		{"a subject filtered out, in binary mode", binaryEvent("7", "dev.ci.build.finished", "skip", "skipped", "s3cret"), http.StatusOK, "filtered out"},
	} {
		status, a := postEvent(t, e, d, c.req)
		if status != c.status || a.Outcome != "Refused" || !strings.Contains(a.Reason, c.reason) {
			t.Errorf("%s: answered %d %+v, want %d Refused with a reason saying %q", c.name, status, a, c.status, c.reason)
			continue
		}
		got, err := store.GetDelivery(t.Context(), a.Delivery)
		if err != nil {
			t.Errorf("%s: the refused delivery's record: %v", c.name, err)
			continue
		}
		if got.Outcome != archive.DeliveryRefused || got.Reason != a.Reason {
			t.Errorf("%s: recorded %s %q, want Refused with the reason answered", c.name, got.Outcome, got.Reason)
		}
	}

	// The handler ran once per accepted event, with its data, type and
	// delivery id, and for nothing else.
	var ran []string
	for _, r := range eventRecords(t, out) {
		ran = append(ran, r.DeliveryID+" "+r.Event+" "+r.Text)
		if r.Trigger != "event" || r.Key != op+"/event/ci/"+r.DeliveryID+"/build" {
			t.Errorf("the handler ran with trigger %q and key %q", r.Trigger, r.Key)
		}
	}
	if want := []string{"1@%2Fci dev.ci.build.finished structured", "2@%2Fci dev.ci.build.finished binary"}; !slices.Equal(ran, want) {
		t.Errorf("the handler ran for %q, want %q", ran, want)
	}
}

// TestCloudEventsBatchIsSplitIntoDeliveries: a Split source records each
// event of a batch as a delivery of its own before it answers 202 with
// the answer to each; an event of a later batch accepted before is a
// replay, named in the answer; each accepted event runs the handler once.
func TestCloudEventsBatchIsSplitIntoDeliveries(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "t0ken")
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	d := ceOperator(t, env, out, fmt.Sprintf("bearer: {secretRef: {namespace: %s, name: hook, key: secret}}\n      batch: Split", env.Namespace))
	if err := e.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	event := func(id, typ string) string {
		return fmt.Sprintf(`{"specversion": "1.0", "id": %q, "source": "/ci", "type": %q, "subject": "main", "data": {"text": "batched %s"}}`, id, typ, id)
	}
	post := func(events ...string) (int, ceAnswer) {
		return postEvent(t, e, d, ceRequest{header: http.Header{"Content-Type": {source.ContentTypeCloudEventBatch}}, secret: "t0ken", body: "[" + strings.Join(events, ",") + "]"})
	}

	status, a := post(event("1", "dev.ci.build.finished"), event("2", "dev.ci.build.started"), event("3", "dev.ci.build.finished"))
	if status != http.StatusAccepted || a.Outcome != "Pending" || len(a.Deliveries) != 3 {
		t.Fatalf("a batch of three events was answered %d %+v, want 202 Pending with three answers", status, a)
	}
	for i, want := range []struct{ id, outcome string }{{"1@%2Fci", "Pending"}, {"2@%2Fci", "Refused"}, {"3@%2Fci", "Pending"}} {
		got := a.Deliveries[i]
		if got.DeliveryID != want.id || got.Outcome != want.outcome || got.Delivery == "" {
			t.Errorf("the answer to event %d: %+v, want %s %s with the archive's id", i+1, got, want.id, want.outcome)
			continue
		}
		// Recorded before the answer: the record is there at once.
		rec, err := store.GetDelivery(t.Context(), got.Delivery)
		if err != nil || rec.DeliveryID != want.id {
			t.Errorf("event %d's record: %+v, %v; want it recorded with %s", i+1, rec, err, want.id)
		}
	}
	waitDelivery(t, store, a.Deliveries[0].Delivery, archive.DeliveryHandled)
	waitDelivery(t, store, a.Deliveries[2].Delivery, archive.DeliveryHandled)

	status, a = post(event("3", "dev.ci.build.finished"), event("4", "dev.ci.build.finished"))
	if status != http.StatusAccepted || len(a.Deliveries) != 2 || !strings.Contains(a.Reason, "1 of the batch's 2 events are replays, accepted before: 3@%2Fci") {
		t.Fatalf("a batch with a replay was answered %d %+v, want 202 naming the replay", status, a)
	}
	if r := a.Deliveries[0]; r.Outcome != "Refused" || !strings.HasPrefix(r.Reason, "replay of delivery 3@%2Fci") {
		t.Errorf("the replayed event's answer: %+v, want Refused as a replay", r)
	}
	waitDelivery(t, store, a.Deliveries[1].Delivery, archive.DeliveryHandled)

	status, a = post(event("1", "dev.ci.build.finished"))
	if status != http.StatusConflict || a.Outcome != "Refused" || len(a.Deliveries) != 1 {
		t.Errorf("a batch of a replay alone was answered %d %+v, want 409 Refused", status, a)
	}
	status, a = post(event("5", "dev.ci.build.finished"), `{"specversion": "1.0", "source": "/ci", "type": "dev.ci.build.finished"}`)
	if status != http.StatusBadRequest || !strings.Contains(a.Reason, "event 2 of the batch: no id attribute") {
		t.Errorf("a batch with an event without id was answered %d %+v, want 400 naming it", status, a)
	}

	var ran []string
	for _, r := range eventRecords(t, out) {
		ran = append(ran, r.DeliveryID+" "+r.Text)
	}
	slices.Sort(ran)
	if want := []string{"1@%2Fci batched 1", "3@%2Fci batched 3", "4@%2Fci batched 4"}; !slices.Equal(ran, want) {
		t.Errorf("the handler ran for %q, want %q", ran, want)
	}
}
