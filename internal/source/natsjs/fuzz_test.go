package natsjs

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/sourcetest"
)

// fuzzBound is the longest one input may take to read.
const fuzzBound = 2 * time.Second

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
		fuzzcheck.Within(t, "message", fuzzBound, func() {
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
		sourcetest.CheckBody(t, m.Body)
	})
}
