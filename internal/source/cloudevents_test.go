package source

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// ceHeader is a request's header of name: value pairs.
func ceHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestCloudEventsReadsStructuredAndBinaryEventsAlike(t *testing.T) {
	structured := `{"specversion": "1.0", "id": "42", "source": "/ci/builds", "type": "dev.ci.build.finished",
		"subject": "main", "time": "2025-01-02T03:04:05Z", "datacontenttype": "application/json", "attempt": 3, "retried": false,
		"data": {"status": "ok"}}`
	binary := ceHeader("Content-Type", "application/json", "Ce-Specversion", "1.0", "Ce-Id", "42", "Ce-Source", "%2Fci%2Fbuilds",
		"Ce-Type", "dev.ci.build.finished", "Ce-Subject", "main", "Ce-Time", "2025-01-02T03:04:05Z", "Ce-Attempt", "3", "Ce-Retried", "false")
	want := map[string]string{
		"Ce-Specversion": "1.0", "Ce-Id": "42", "Ce-Source": "/ci/builds", "Ce-Type": "dev.ci.build.finished", "Ce-Subject": "main",
		"Ce-Time": "2025-01-02T03:04:05Z", "Ce-Datacontenttype": "application/json", "Ce-Attempt": "3", "Ce-Retried": "false",
	}
	for _, c := range []struct {
		name string
		h    http.Header
		body string
	}{
		{"structured", ceHeader("Content-Type", "application/cloudevents+json; charset=utf-8", "Ce-Subject", "forged"), structured},
		{"binary", binary, `{"status": "ok"}`},
	} {
		events, batch, err := CloudEvents(c.h, []byte(c.body), false)
		if err != nil || batch || len(events) != 1 {
			t.Fatalf("%s: %d events, batch %v, %v; want one event", c.name, len(events), batch, err)
		}
		ev := events[0]
		if ev.ID != "42" || ev.Source != "/ci/builds" || ev.Type != "dev.ci.build.finished" || ev.DeliveryID != "42@%2Fci%2Fbuilds" {
			t.Errorf("%s: id %q source %q type %q delivery id %q", c.name, ev.ID, ev.Source, ev.Type, ev.DeliveryID)
		}
		if data, ok := ev.Data.(map[string]any); !ok || data["status"] != "ok" || !strings.Contains(string(ev.Payload), `"status"`) {
			t.Errorf("%s: the payload is %s (%v), want the data", c.name, ev.Payload, ev.Data)
		}
		h := ev.Headers(c.h)
		for k, v := range want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: header %s is %q, want %q", c.name, k, got, v)
			}
		}
		if n := len(Headers(h)); n != len(want)+1 { // and Content-Type
			t.Errorf("%s: %d headers %v, want the %d attributes and the content type", c.name, n, h, len(want))
		}
	}
}

func TestCloudEventsDataIsJSONOrText(t *testing.T) {
	for _, c := range []struct {
		name    string
		h       http.Header
		body    string
		payload string // "" refused
		reason  string
		status  int
	}{
		{"structured, no data", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t"}`, "null", "", 0},
		{"structured, data without content type is JSON", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","data":[1,2]}`, "[1,2]", "", 0},
		{"structured, text data", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"text/plain","data":"hi"}`, `"hi"`, "", 0},
		{"structured, base64 JSON", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"application/vnd.x+json","data_base64":"eyJhIjoxfQ=="}`, `{"a":1}`, "", 0},
		{"structured, base64 text", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"text/plain","data_base64":"aGk="}`, `"hi"`, "", 0},
		{"structured, base64 bytes", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"image/png","data_base64":"iVBORw=="}`, "",
			"data_base64, of content type image/png, is not UTF-8 text", http.StatusUnsupportedMediaType},
		{"structured, both", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","data":1,"data_base64":"aGk="}`, "", "both data and data_base64", http.StatusBadRequest},
		{"structured, bad base64", ceHeader("Content-Type", ContentTypeCloudEvent), `{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"!!"}`, "", "data_base64 is not base64", http.StatusBadRequest},
		{"binary, no body", ceHeader("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), "", "null", "", 0},
		{"binary, JSON without content type", ceHeader("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), `{"a":1}`, `{"a":1}`, "", 0},
		{"binary, text", ceHeader("Content-Type", "text/plain; charset=utf-8", "Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), "héllo\n", `"héllo\n"`, "", 0},
		{"binary, not JSON", ceHeader("Content-Type", "application/json", "Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), `status=ok`, "",
			"the body is not JSON, as its content type application/json says", http.StatusBadRequest},
		{"binary, bytes", ceHeader("Content-Type", "application/octet-stream", "Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), "\xff\xfe", "",
			"the body, of content type application/octet-stream, is not UTF-8 text: opkit gives handlers JSON or text", http.StatusUnsupportedMediaType},
		{"binary, nested too deep", ceHeader("Content-Type", "application/json", "Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t"), strings.Repeat("[", 200) + strings.Repeat("]", 200), "",
			"opkit reads JSON at most 100 deep", http.StatusBadRequest},
	} {
		events, _, err := CloudEvents(c.h, []byte(c.body), false)
		if c.payload != "" {
			if err != nil || len(events) != 1 || string(events[0].Payload) != c.payload {
				t.Errorf("%s: %v, %v; want the payload %s", c.name, events, err, c.payload)
			}
			if err == nil {
				if _, err := Payload(events[0].Payload); err != nil {
					t.Errorf("%s: the payload %s is not read back: %v", c.name, events[0].Payload, err)
				}
			}
			continue
		}
		r := refusal(t, err)
		if r == nil || r.Status != c.status || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: %v, want %d saying %q", c.name, err, c.status, c.reason)
		}
	}
}

func TestCloudEventsRefusalsNameTheAttribute(t *testing.T) {
	structured := func(members string) (http.Header, string) {
		return ceHeader("Content-Type", ContentTypeCloudEvent), "{" + members + "}"
	}
	binary := func(kv ...string) (http.Header, string) {
		return ceHeader(append([]string{"Content-Type", "application/json"}, kv...)...), "{}"
	}
	for _, c := range []struct {
		name   string
		h      http.Header
		body   string
		status int
		reason string
	}{
		{"binary, no ce-id", nil, "", 400, "no ce-id header: the event's id"},
		{"binary, no ce-source", nil, "", 400, "no ce-source header"},
		{"binary, no ce-type", nil, "", 400, "no ce-type header"},
		{"binary, version 0.3", nil, "", 400, `ce-specversion header is "0.3": opkit reads CloudEvents 1.0`},
		{"binary, bad escape", nil, "", 400, "header Ce-Subject is not percent-encoded UTF-8 text"},
		{"binary, control character", nil, "", 400, "header Ce-Subject is not percent-encoded UTF-8 text without control characters"},
		{"binary, bad time", nil, "", 400, `ce-time header "yesterday" is not an RFC 3339 timestamp`},
		{"binary, bad name", nil, "", 400, `header Ce-Trace-Id: "trace-id" is not an attribute name`},
		{"neither mode", ceHeader("Content-Type", "application/json"), "{}", 400,
			"not a CloudEvent: no ce-specversion header (binary mode), and content type application/json, not application/cloudevents+json (structured mode)"},
		{"structured, no id", nil, "", 400, "no id attribute: the event's id"},
		{"structured, empty source", nil, "", 400, "no source attribute"},
		{"structured, no specversion", nil, "", 400, "no specversion attribute: the CloudEvents version, 1.0"},
		{"structured, object attribute", nil, "", 400, "attribute subject is an object or array"},
		{"structured, bad name", nil, "", 400, `"Subject" is not an attribute name`},
		{"structured, not an object", ceHeader("Content-Type", ContentTypeCloudEvent), "[]", 400, "the event is not a JSON object"},
		{"structured XML", ceHeader("Content-Type", "application/cloudevents+xml"), "<e/>", 415, "opkit reads the JSON event format only"},
		{"a batch", ceHeader("Content-Type", ContentTypeCloudEventBatch), "[]", 415, "a batch of events (application/cloudevents-batch+json): this source takes one event per request; send them one by one, or set the source's cloudEvents.batch to Split"},
	} {
		h, body := c.h, c.body
		switch c.name {
		case "binary, no ce-id":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Source", "s", "Ce-Type", "t")
		case "binary, no ce-source":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Type", "t")
		case "binary, no ce-type":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s")
		case "binary, version 0.3":
			h, body = binary("Ce-Specversion", "0.3", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t")
		case "binary, bad escape":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t", "Ce-Subject", "100%")
		case "binary, control character":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t", "Ce-Subject", "a%0Ab")
		case "binary, bad time":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t", "Ce-Time", "yesterday")
		case "binary, bad name":
			h, body = binary("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "s", "Ce-Type", "t", "Ce-Trace-Id", "x")
		case "structured, no id":
			h, body = structured(`"specversion":"1.0","source":"s","type":"t"`)
		case "structured, empty source":
			h, body = structured(`"specversion":"1.0","id":"1","source":"","type":"t"`)
		case "structured, no specversion":
			h, body = structured(`"id":"1","source":"s","type":"t"`)
		case "structured, object attribute":
			h, body = structured(`"specversion":"1.0","id":"1","source":"s","type":"t","subject":{"a":1}`)
		case "structured, bad name":
			h, body = structured(`"specversion":"1.0","id":"1","source":"s","type":"t","Subject":"x"`)
		}
		_, _, err := CloudEvents(h, []byte(body), false)
		r := refusal(t, err)
		if r == nil || r.Status != c.status || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: %v, want %d saying %q", c.name, err, c.status, c.reason)
		}
	}
}

func TestCloudEventsBatchIsSplitIntoItsEvents(t *testing.T) {
	h := ceHeader("Content-Type", ContentTypeCloudEventBatch)
	body := `[{"specversion":"1.0","id":"1","source":"s","type":"a","data":{"n":1}},
		{"specversion":"1.0","id":"2","source":"s","type":"b","subject":"x","data":{"n":2}}]`
	events, batch, err := CloudEvents(h, []byte(body), true)
	if err != nil || !batch || len(events) != 2 {
		t.Fatalf("%d events, batch %v, %v; want two of a batch", len(events), batch, err)
	}
	for i, ev := range events {
		if ev.DeliveryID != fmt.Sprintf("%d@s", i+1) || string(ev.Payload) != fmt.Sprintf(`{"n":%d}`, i+1) {
			t.Errorf("event %d: delivery id %q payload %s", i+1, ev.DeliveryID, ev.Payload)
		}
	}
	if events[0].Headers(h).Get("Ce-Subject") != "" || events[1].Headers(h).Get("Ce-Subject") != "x" {
		t.Errorf("each event's headers are not its own attributes")
	}
	for _, c := range []struct{ body, reason string }{
		{`[]`, "the batch holds no event"},
		{`{}`, "the batch is not a JSON array of events"},
		{`[{"specversion":"1.0","id":"1","source":"s","type":"a"},{"specversion":"1.0","source":"s","type":"b"}]`, "event 2 of the batch: no id attribute"},
	} {
		_, _, err := CloudEvents(h, []byte(c.body), true)
		if r := refusal(t, err); r == nil || r.Status != http.StatusBadRequest || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("batch %s: %v, want 400 saying %q", c.body, err, c.reason)
		}
	}
}

func TestCloudEventIDIsAShortPrintableIDOfSourceAndID(t *testing.T) {
	for _, c := range []struct{ source, id, want string }{
		{"/ci/builds", "42", "42@%2Fci%2Fbuilds"},
		{"https://example.com/x y", "a/b", "a%2Fb@https%3A%2F%2Fexample.com%2Fx%20y"},
		{"s", "1@t", "1%40t@s"}, // '@' in an id cannot join another pair
		{"s@1", "t", "t@s%401"},
		{strings.Repeat("s", 300), "1", ""},
	} {
		got := CloudEventID(c.source, c.id)
		if c.want != "" && got != c.want {
			t.Errorf("CloudEventID(%q, %q) = %q, want %q", c.source, c.id, got, c.want)
		}
		if len(got) > maxID || !printable(got) {
			t.Errorf("CloudEventID(%q, %q) = %q: not at most %d printable characters without slashes", c.source, c.id, got, maxID)
		}
	}
	long := strings.Repeat("s", 300)
	if a, b := CloudEventID(long, "1"), CloudEventID(long, "2"); a == b || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("two long sources' ids: %q and %q, want two different sha256: ids", a, b)
	}
	if a, b := CloudEventID("ab", "c"), CloudEventID("a", "bc"); a == b {
		t.Errorf("two pairs have the same id %q", a)
	}
}
