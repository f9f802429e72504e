package natsjs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/jsondepth"
	"github.com/opkit-dev/opkit/internal/source"
)

// fuzzBound is the longest one input may take to read.
const fuzzBound = 2 * time.Second

// timed runs f and fails when it took longer than fuzzBound.
func timed(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	hung := time.AfterFunc(5*fuzzBound, func() {
		buf := make([]byte, 1<<20)
		panic(fmt.Sprintf("%s has not returned after %s:\n%s", what, 5*fuzzBound, buf[:runtime.Stack(buf, true)]))
	})
	f()
	hung.Stop()
	if d := time.Since(start); d > fuzzBound {
		t.Fatalf("%s took %s, more than %s", what, d, fuzzBound)
	}
}

// jsonDepth is how deeply valid JSON nests objects and arrays, as
// encoding/json's tokenizer sees it; ok is false for data that is not
// valid JSON.
func jsonDepth(data []byte) (depth int, ok bool) {
	if !json.Valid(data) {
		return 0, false
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	level := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return depth, true
		}
		if err != nil {
			return 0, false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
			depth = max(depth, level)
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
}

// checkBody checks the sink's reading of a message's body
// (source.Payload, as internal/delivery's checkMessage decodes it): JSON
// at most jsondepth.Max deep is accepted and re-encodes as itself, but
// for a number past float64's range; anything else is a 400 *Refusal
// saying what it is.
func checkBody(t *testing.T, body []byte) {
	t.Helper()
	var payload any
	var err error
	timed(t, "source.Payload", func() { payload, err = source.Payload(body) })
	depth, valid := jsonDepth(body)
	if err != nil {
		var ref *source.Refusal
		switch {
		case !errors.As(err, &ref):
			t.Fatalf("the body is refused with %T %v, not a *source.Refusal", err, err)
		case ref.Status != http.StatusBadRequest || ref.Reason == "" || !utf8.ValidString(ref.Reason) || len(ref.Reason) > 1024:
			t.Fatalf("the body is refused %d %.300q: want a 400 with a short reason", ref.Status, ref.Reason)
		case !valid && !strings.HasPrefix(ref.Reason, "the body is"):
			t.Errorf("a body that is not JSON refused as %q", ref.Reason)
		case valid && depth > jsondepth.Max && !strings.Contains(ref.Reason, fmt.Sprintf("nested deeper than %d", jsondepth.Max)):
			t.Errorf("a body %d deep refused as %q", depth, ref.Reason)
		case valid && depth <= jsondepth.Max && !strings.Contains(ref.Reason, "number"):
			t.Errorf("valid JSON %d deep refused as %q", depth, ref.Reason)
		}
		return
	}
	if !valid || depth > jsondepth.Max {
		t.Fatalf("accepted a body that is not JSON at most %d deep (valid %v, %d deep): %.200q", jsondepth.Max, valid, depth, body)
	}
	data, err := json.Marshal(payload)
	var back any
	if err != nil || json.Unmarshal(data, &back) != nil || !reflect.DeepEqual(back, payload) {
		t.Fatalf("the payload of %.200q does not re-encode as JSON: %.200q, %v", body, data, err)
	}
}

// validStream reports whether s can name a JetStream stream that Run
// consumes: no whitespace, '.', '*', '>', path separators or
// non-printable characters, and short enough for its delivery ids
// (checked by Consumer.check).
func validStream(s string) bool {
	if s == "" || len(s)+21 > maxID {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(".*>/\\", c) >= 0 {
			return false
		}
	}
	return true
}

// validSubject reports whether s is a subject a message is published on:
// tokens of no whitespace separated by '.', no wildcard.
func validSubject(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\v") {
			return false
		}
	}
	return true
}

// FuzzNATSMessage: a JetStream message of a stream, at a sequence, on a
// subject, its headers as they come on the wire (NATS/1.0 and Name:
// value lines, decoded by the NATS client), its data, to a source of a
// limit (0: 1 MiB), as Run hands it to the sink (message) and the sink
// decodes its body. The message has the ID <stream>:<sequence>, the
// subject, its headers by lower-case name (the same for the same
// message: a redelivery is read alike) and its data, cut past the
// limit; its body is JSON nested at most jsondepth.Max, or refused with
// a *source.Refusal saying why.
func FuzzNATSMessage(f *testing.F) {
	deploy := `{"service":"api","image":"registry.example.com/api:1.4.2","replicas":3,"labels":{"team":"a"},"at":"2025-01-02T03:04:05Z"}`
	for _, c := range []struct {
		stream  string
		seq     uint64
		subject string
		headers string
		data    string
		limit   uint16
	}{
		// As the tests publish them: one body, headers of several values.
		{"EVENTS", 1, "events.first", "NATS/1.0\r\nX-Trace-Id: abc\r\nX-Trace-Id: def\r\nnats-msg-id: m1\r\n\r\n", `{"n":1}`, 0},
		{"EVENTS", 2, "events.deploys.api", "NATS/1.0\r\nContent-Type: application/json\r\nNats-Msg-Id: 3f0c2a5e-deploy-api-142\r\n\r\n", deploy, 0},
		{"ORDERS", 18446744073709551615, "orders.eu.created", "", `{"order":{"id":"A-1","lines":[{"sku":"x","qty":2,"price":9.99}]}}`, 0},
		{"EVENTS", 3, "events.big", "", strings.Repeat("x", 100), 64},
		// Headers as the server may send them: a status, no space after
		// the colon, an empty key, folded case.
		{"EVENTS", 4, "events.x", "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\n\r\n", ``, 0},
		{"EVENTS", 5, "events.x", "NATS/1.0\r\nA:1\r\n:skipped\r\nX-TRACE: upper\r\n\r\n", `[]`, 0},
		{"EVENTS", 13, "events.x", "NATS/1.0\r\nNats-Msg-Id: m1\r\nnats-msg-id: m2\r\nX-Trace-Id: abc\r\n\r\n", `{"n":13}`, 0},
		{"EVENTS", 6, "events.x", "NATS/1.0\r\nX-Bin: caf\xe9\xff\r\n\r\n", "\xff\xfe{\"a\":1}", 0},
		// Bodies: empty, not JSON, deep, huge numbers, duplicate keys.
		{"EVENTS", 7, "events.x", "", ``, 0},
		{"EVENTS", 8, "events.x", "", `deploy api`, 0},
		{"EVENTS", 9, "events.x", "", strings.Repeat("[", 101) + strings.Repeat("]", 101), 0},
		{"EVENTS", 10, "events.x", "", strings.Repeat(`{"a":`, 100) + "null" + strings.Repeat("}", 100), 0},
		{"EVENTS", 11, "events.x", "", `{"n":1e400,"m":123456789012345678901234567890}`, 0},
		{"EVENTS", 12, "events.x", "", `{"a":1,"a":{"b":2}}`, 0},
	} {
		f.Add(c.stream, c.seq, c.subject, []byte(c.headers), []byte(c.data), c.limit)
	}
	published := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, stream string, seq uint64, subject string, rawHeaders, data []byte, limit uint16) {
		if !validStream(stream) {
			stream = "EVENTS"
		}
		if !validSubject(subject) {
			subject = "events.fuzz"
		}
		var h nats.Header
		if len(rawHeaders) > 0 {
			var err error
			if h, err = nats.DecodeHeadersMsg(rawHeaders); err != nil {
				h = nil // the client hands the message over without them
			}
		}
		lim := int64(v1alpha1.DefaultWebhookBody)
		if limit > 0 {
			lim = int64(limit)
		}
		meta := &jetstream.MsgMetadata{Stream: stream, Consumer: "opkit", Timestamp: published}
		meta.Sequence.Stream, meta.Sequence.Consumer = seq, 1
		var m source.Message
		var again []source.Message // redeliveries
		timed(t, "message", func() {
			m = message(meta, subject, h, data, lim)
			for range 4 {
				again = append(again, message(meta, subject, h, data, lim))
			}
		})

		if want := stream + ":" + strconv.FormatUint(seq, 10); m.ID != want || len(m.ID) > maxID || strings.ContainsAny(m.ID, " /\\") {
			t.Errorf("ID %q, want %q: at most %d printable characters", m.ID, want, maxID)
		}
		if m.Event != subject || !m.Published.Equal(published) {
			t.Errorf("event %q published %s, want the subject %q and %s", m.Event, m.Published, subject, published)
		}
		// The body is the data, cut to limit+1 bytes past the limit.
		switch n := int64(len(data)); {
		case n <= lim && !bytes.Equal(m.Body, data):
			t.Errorf("a body of %d bytes, under the limit, handed as %d bytes", n, len(m.Body))
		case n > lim && (int64(len(m.Body)) != lim+1 || !bytes.HasPrefix(data, m.Body)):
			t.Errorf("a body of %d bytes, over the limit of %d, handed as %d bytes", n, lim, len(m.Body))
		}
		// The headers: by lower-case name, the first value; of names
		// that differ only in case, the first in byte order's.
		want := map[string]string{}
		from := map[string]string{}
		for hk, vs := range h {
			k := strings.ToLower(hk)
			if prev, ok := from[k]; len(vs) > 0 && (!ok || hk < prev) {
				want[k], from[k] = vs[0], hk
			}
		}
		if !reflect.DeepEqual(m.Headers, want) && len(m.Headers)+len(want) > 0 {
			t.Errorf("headers %q of %q, want %q", m.Headers, h, want)
		}
		// A redelivery is the same message.
		for _, a := range again {
			if !reflect.DeepEqual(m, a) {
				t.Fatalf("the same message read twice differs:\n%q\n%q", m.Headers, a.Headers)
			}
		}
		checkBody(t, m.Body)
	})
}
