package source

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// CloudEvents requests are read as the CloudEvents HTTP protocol binding,
// version 1.0, says, in its three modes:
//
//   - structured: Content-Type application/cloudevents+json, the body one
//     event in the JSON format (its attributes, and data or data_base64);
//   - binary: the attributes in ce-<name> headers (their values
//     percent-decoded), the body the data, Content-Type the data's
//     content type (datacontenttype);
//   - batch: Content-Type application/cloudevents-batch+json, the body a
//     JSON array of structured events. A source refuses it (415) unless
//     its batch is Split: then each event is a delivery of its own.
//
// Only CloudEvents 1.0 is read (specversion "1.0"); id, source and type
// are required and not empty, time is RFC 3339, attribute names are
// lower-case letters and digits. A request that breaks one of them is a
// 400 Refusal naming the attribute (or header) at fault.
//
// What a handler reads of an event:
//
//   - the delivery id is CloudEventID(source, id): replays are
//     recognised by the event's source and id together, as the
//     specification says an event is identified;
//   - the event is its type;
//   - the payload is its data, as JSON. Data whose content type is JSON
//     (application/json, text/json, any */*+json) or not said is that
//     JSON, checked; other data is text, given as a JSON string (a
//     structured event's non-JSON data is such a string already). Data
//     that is not UTF-8 text (an image, a protobuf) is refused 415:
//     handlers read JSON, and a base64 string would look like text. An
//     event without data has the payload null;
//   - the headers are the request's, with every ce-* header replaced by
//     the event's attributes, each as ce-<name> (ce-id, ce-source,
//     ce-type, ce-subject, ce-datacontenttype, the extensions...) in both
//     modes: a filter reads headers['ce-subject'] whichever way the
//     sender sent the event. A number or boolean attribute is its JSON
//     text.

// Content types of the structured and batch modes.
const (
	ContentTypeCloudEvent      = "application/cloudevents+json"
	ContentTypeCloudEventBatch = "application/cloudevents-batch+json"
)

// CloudEventsSpecVersion is the one version of CloudEvents read.
const CloudEventsSpecVersion = "1.0"

// CloudEvent is one event of a request, as its delivery records it.
type CloudEvent struct {
	// ID, Source and Type are its required attributes.
	ID, Source, Type string
	// DeliveryID is CloudEventID(Source, ID).
	DeliveryID string
	// Attributes are its context attributes by name, each as text:
	// specversion, id, source, type, the optional ones it has (subject,
	// time, datacontenttype, dataschema) and its extensions.
	Attributes map[string]string
	// Payload is its data as handlers read it: JSON, null for none.
	Payload []byte
	// Data is Payload decoded.
	Data any
}

// Headers returns h with its ce-* headers replaced by the event's
// attributes, as Ce-<Name>: what the delivery records and its filter and
// handlers read.
func (ev *CloudEvent) Headers(h http.Header) http.Header {
	out := make(http.Header, len(h)+len(ev.Attributes))
	for k, vs := range h {
		if !isCEHeader(k) {
			out[k] = vs
		}
	}
	for name, v := range ev.Attributes {
		out.Set("ce-"+name, v)
	}
	return out
}

// CloudEvents reads the events of a request to a cloudEvents source: one
// for the structured and the binary mode, and whether the request is a
// batch, whose events are returned when split is true (a Split source).
// A request whose content type CloudEventsMode refuses, that is not a
// CloudEvent, or an event that breaks the specification, is a *Refusal.
func CloudEvents(h http.Header, body []byte, split bool) (events []CloudEvent, batch bool, err error) {
	batch, err = CloudEventsMode(h, split)
	switch {
	case err != nil:
		return nil, batch, err
	case batch:
		events, err := cloudEventBatch(body)
		return events, true, err
	case isStructured(h):
		ev, err := structuredEvent(body, "")
		if err != nil {
			return nil, false, err
		}
		return []CloudEvent{*ev}, false, nil
	}
	ev, err := binaryEvent(h, body)
	if err != nil {
		return nil, false, err
	}
	return []CloudEvent{*ev}, false, nil
}

// CloudEventsMode checks a request's content type, before anything else
// of it (the sender's verification too), and says whether it is a batch:
// a batch when split is false (the source refuses them), an event format
// other than JSON, or a content type that cannot be read is a 415
// Refusal.
func CloudEventsMode(h http.Header, split bool) (batch bool, err error) {
	ct := h.Get("Content-Type")
	mt, _, ctErr := mime.ParseMediaType(ct)
	switch {
	case ct != "" && ctErr != nil:
		return false, refuse(http.StatusUnsupportedMediaType, "content type %q cannot be read", clip(ct))
	case mt == ContentTypeCloudEventBatch && !split:
		return true, refuse(http.StatusUnsupportedMediaType, "a batch of events (%s): this source takes one event per request; send them one by one, or set the source's cloudEvents.batch to Split", ContentTypeCloudEventBatch)
	case mt == ContentTypeCloudEventBatch:
		return true, nil
	case mt != ContentTypeCloudEvent && strings.HasPrefix(mt, "application/cloudevents"):
		return false, refuse(http.StatusUnsupportedMediaType, "content type %s: opkit reads the JSON event format only (%s, or %s for a batch)", clip(mt), ContentTypeCloudEvent, ContentTypeCloudEventBatch)
	}
	return false, nil
}

// isStructured reports whether a request is a structured-mode event.
func isStructured(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == ContentTypeCloudEvent
}

// binaryEvent reads a binary-mode event: its attributes in the ce-*
// headers, its data the body.
func binaryEvent(h http.Header, body []byte) (*CloudEvent, error) {
	if h.Get("Ce-Specversion") == "" {
		what := "no content type"
		if ct := h.Get("Content-Type"); ct != "" {
			what = "content type " + clip(ct)
		}
		return nil, refuse(http.StatusBadRequest, "not a CloudEvent: no ce-specversion header (binary mode), and %s, not %s (structured mode)", what, ContentTypeCloudEvent)
	}
	attrs := map[string]string{}
	for k, vs := range h {
		if !isCEHeader(k) || len(vs) == 0 {
			continue
		}
		name := strings.ToLower(k[len("ce-"):])
		if !attributeName(name) {
			return nil, refuse(http.StatusBadRequest, "header %s: %q is not an attribute name (lower-case letters and digits)", clip(k), clip(name))
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil || !utf8.ValidString(v) || control(v) {
			return nil, refuse(http.StatusBadRequest, "header %s is not percent-encoded UTF-8 text without control characters", clip(k))
		}
		attrs[name] = v
	}
	delete(attrs, "datacontenttype") // the Content-Type says it
	if ct := h.Get("Content-Type"); ct != "" {
		// A header value may hold a tab, or bytes that are not UTF-8,
		// which no attribute holds.
		if !utf8.ValidString(ct) || control(ct) {
			return nil, refuse(http.StatusBadRequest, "header Content-Type, the event's datacontenttype, is not UTF-8 text without control characters")
		}
		attrs["datacontenttype"] = ct
	}
	ev := &CloudEvent{Attributes: attrs}
	if err := ev.check("", func(name string) string { return "ce-" + name + " header" }); err != nil {
		return nil, err
	}
	var err error
	if len(body) == 0 {
		ev.Payload = []byte("null")
	} else if ev.Payload, ev.Data, err = dataPayload(attrs["datacontenttype"], body, "the body"); err != nil {
		return nil, err
	}
	return ev, nil
}

// cloudEventBatch reads a batch's events.
func cloudEventBatch(body []byte) ([]CloudEvent, error) {
	if err := jsondepth.Check(body, jsondepth.Max); err != nil {
		return nil, refuse(http.StatusBadRequest, "the batch is %v: opkit reads JSON at most %d deep", err, jsondepth.Max)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, refuse(http.StatusBadRequest, "the batch is not a JSON array of events: %v", err)
	}
	if len(raws) == 0 {
		return nil, refuse(http.StatusBadRequest, "the batch holds no event")
	}
	events := make([]CloudEvent, 0, len(raws))
	for i, raw := range raws {
		ev, err := structuredEvent(raw, fmt.Sprintf("event %d of the batch: ", i+1))
		if err != nil {
			return nil, err
		}
		events = append(events, *ev)
	}
	return events, nil
}

// structuredEvent reads an event in the JSON format; where prefixes its
// refusals (which event of a batch).
func structuredEvent(body []byte, where string) (*CloudEvent, error) {
	if err := jsondepth.Check(body, jsondepth.Max); err != nil {
		return nil, refuse(http.StatusBadRequest, "%sthe event is %v: opkit reads JSON at most %d deep", where, err, jsondepth.Max)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		if err == nil {
			err = errors.New("it is null")
		}
		return nil, refuse(http.StatusBadRequest, "%sthe event is not a JSON object: %v", where, err)
	}
	attrs := map[string]string{}
	for name, raw := range members {
		if name == "data" || name == "data_base64" {
			continue
		}
		if !attributeName(name) {
			return nil, refuse(http.StatusBadRequest, "%s%q is not an attribute name (lower-case letters and digits)", where, clip(name))
		}
		v, ok, err := attributeText(raw)
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "%sattribute %s is %v", where, clip(name), err)
		}
		if ok {
			attrs[name] = v
		}
	}
	ev := &CloudEvent{Attributes: attrs}
	if err := ev.check(where, func(name string) string { return name + " attribute" }); err != nil {
		return nil, err
	}
	data, hasData := members["data"]
	b64, hasB64 := members["data_base64"]
	hasData = hasData && !bytes.Equal(bytes.TrimSpace(data), []byte("null"))
	hasB64 = hasB64 && !bytes.Equal(bytes.TrimSpace(b64), []byte("null"))
	var err error
	switch {
	case hasData && hasB64:
		return nil, refuse(http.StatusBadRequest, "%sthe event has both data and data_base64: at most one", where)
	case hasData:
		// JSON data is that JSON; other data in the JSON format is a JSON
		// string of its text already (another value is taken as the
		// sender wrote it).
		ev.Payload = data
		err = json.Unmarshal(data, &ev.Data)
	case hasB64:
		var s string
		if err := json.Unmarshal(b64, &s); err != nil {
			return nil, refuse(http.StatusBadRequest, "%sdata_base64 is not a string", where)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "%sdata_base64 is not base64: %v", where, err)
		}
		if ev.Payload, ev.Data, err = dataPayload(attrs["datacontenttype"], raw, where+"data_base64"); err != nil {
			return nil, err
		}
	default:
		ev.Payload = []byte("null")
	}
	if err != nil {
		if n := outOfRange(err); n != "" {
			return nil, refuse(http.StatusBadRequest, "%sdata holds the number %s, %s", where, n, numberRange)
		}
		return nil, refuse(http.StatusBadRequest, "%sdata: %v", where, err)
	}
	return ev, nil
}

// check checks the required attributes and the time, and sets ID, Source,
// Type and DeliveryID; a refusal starts with where (which event of a
// batch) and names an attribute as named does.
func (ev *CloudEvent) check(where string, named func(string) string) error {
	a := ev.Attributes
	switch v, ok := a["specversion"]; {
	case !ok:
		return refuse(http.StatusBadRequest, "%sno %s: the CloudEvents version, %s", where, named("specversion"), CloudEventsSpecVersion)
	case v != CloudEventsSpecVersion:
		return refuse(http.StatusBadRequest, "%s%s is %q: opkit reads CloudEvents %s", where, named("specversion"), clip(v), CloudEventsSpecVersion)
	}
	for _, r := range []struct{ name, why string }{
		{"id", "the event's id, by which with its source a replay is recognised"},
		{"source", "where the event happened, by which with its id a replay is recognised"},
		{"type", "what happened, the event handlers and filters see"},
	} {
		if a[r.name] == "" {
			return refuse(http.StatusBadRequest, "%sno %s: %s", where, named(r.name), r.why)
		}
	}
	if t := a["type"]; len(t) > maxID {
		return refuse(http.StatusBadRequest, "%s%s is longer than %d bytes", where, named("type"), maxID)
	}
	if t, ok := a["time"]; ok {
		if _, err := time.Parse(time.RFC3339Nano, t); err != nil {
			return refuse(http.StatusBadRequest, "%s%s %q is not an RFC 3339 timestamp", where, named("time"), clip(t))
		}
	}
	ev.ID, ev.Source, ev.Type = a["id"], a["source"], a["type"]
	ev.DeliveryID = CloudEventID(ev.Source, ev.ID)
	return nil
}

// CloudEventID is the delivery id of the event of source and id: both
// percent-encoded (every byte but ASCII letters, digits and -._~) and
// joined by '@', id first: "42@%2Fci%2Fbuilds" for id 42 of source
// /ci/builds. When that is longer than 200 characters (a delivery id is
// at most 200 printable characters without spaces or slashes: it is in
// idempotency keys and file names), it is "sha256:" and the hex SHA-256
// of source, a NUL byte and id. Each event has one, and two events have
// the same one only when their source and id are the same.
func CloudEventID(source, id string) string {
	s := escapeID(id) + "@" + escapeID(source)
	if len(s) <= maxID {
		return s
	}
	sum := sha256.Sum256([]byte(source + "\x00" + id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// escapeID percent-encodes every byte of s but ASCII letters, digits and
// -._~ (RFC 3986's unreserved characters).
func escapeID(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// dataPayload is the payload of an event's data of content type ct:
// JSON data (ct JSON or empty) checked, text as a JSON string; other
// bytes are a 415 Refusal. what names the data in a refusal.
func dataPayload(ct string, data []byte, what string) ([]byte, any, error) {
	if jsonType(ct) {
		if err := jsondepth.Check(data, jsondepth.Max); err != nil {
			return nil, nil, refuse(http.StatusBadRequest, "%s is %v: opkit reads JSON at most %d deep", what, err, jsondepth.Max)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			if n := outOfRange(err); n != "" {
				return nil, nil, refuse(http.StatusBadRequest, "%s holds the number %s, %s", what, n, numberRange)
			}
			return nil, nil, refuse(http.StatusBadRequest, "%s is not JSON, as its content type %s says: %v", what, orJSON(ct), err)
		}
		return data, v, nil
	}
	if !utf8.Valid(data) {
		return nil, nil, refuse(http.StatusUnsupportedMediaType, "%s, of content type %s, is not UTF-8 text: opkit gives handlers JSON or text", what, clip(ct))
	}
	text := string(data)
	payload, err := json.Marshal(text)
	if err != nil {
		return nil, nil, err
	}
	return payload, text, nil
}

// jsonType reports whether data of content type ct is JSON: ct is empty
// (JSON, the specification's default), application/json, text/json or
// any */*+json.
func jsonType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func orJSON(ct string) string {
	if ct == "" {
		return "(none: JSON)"
	}
	return clip(ct)
}

// attributeText is a structured event's attribute value as text: a string
// as it is, a number or boolean as its JSON text; ok is false for null
// (an attribute without a value is absent).
func attributeText(raw json.RawMessage) (string, bool, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", false, err
	}
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case string:
		if control(v) {
			return "", false, errors.New("text with control characters")
		}
		return v, true, nil
	case json.Number:
		return v.String(), true, nil
	case bool:
		if v {
			return "true", true, nil
		}
		return "false", true, nil
	}
	return "", false, errors.New("an object or array: attributes are strings, numbers or booleans")
}

// attributeName reports whether name is a CloudEvents attribute name:
// lower-case ASCII letters and digits.
func attributeName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// isCEHeader reports whether the header named k is a ce-* header.
func isCEHeader(k string) bool {
	return len(k) > len("ce-") && strings.EqualFold(k[:len("ce-")], "ce-")
}

// control reports whether s holds a control character: attribute values
// are recorded and shown as headers.
func control(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}
