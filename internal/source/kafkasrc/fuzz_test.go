package kafkasrc

import (
	"bytes"
	"encoding/base64"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/sourcetest"
)

// fuzzBound is the longest one input may take to read.
const fuzzBound = 2 * time.Second

// validTopic reports whether s is a topic name Kafka accepts: 1 to 249
// ASCII letters, digits, '.', '_' and '-', not "." or "..".
func validTopic(s string) bool {
	if s == "" || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'; !letter && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// fuzzHeaders are a record's headers of lines of name: value (the value
// may be empty, the line without a colon a header without a value).
func fuzzHeaders(s string) []kgo.RecordHeader {
	if s == "" {
		return nil
	}
	var hs []kgo.RecordHeader
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		h := kgo.RecordHeader{Key: k}
		if ok {
			h.Value = []byte(strings.TrimPrefix(v, " "))
		}
		hs = append(hs, h)
	}
	return hs
}

// FuzzKafkaRecord: a record of a topic's partition at an offset, its key
// (none when noKey), headers (name: value lines), value and timestamp (ms
// since the epoch), to a source of a limit (0: 1 MiB), as the consumer
// hands it to the sink (Consumer.message) and the sink decodes its body.
// The message has the ID <topic>:<partition>:<offset> (at most 200
// printable characters), the topic as its event, the headers by
// lower-case name (the first of a name, UTF-8), the key as kafka-key or
// kafka-key-base64 and never a header's of those names, the value cut
// past the limit, and a body that is JSON nested at most jsondepth.Max
// or refused with a *source.Refusal saying why.
func FuzzKafkaRecord(f *testing.F) {
	const at = int64(1735787045000) // 2025-01-02T03:04:05Z
	for _, c := range []struct {
		topic     string
		partition int32
		offset    int64
		key       string
		noKey     bool
		headers   string
		value     string
		ts        int64
		limit     uint16
	}{
		// As the tests produce them.
		{"deploys", 0, 0, "svc/api", false, "X-Trace: t1\nx-trace: t2\nkafka-key: forged", `{"image":"api:1"}`, at, 0},
		{"deploys", 1, 41, "\xff\x00a", false, "", `{}`, at, 0},
		{"deploys", 2, 9_223_372_036_854_775_807, "", true, "", strings.Repeat("x", 100), at, 64},
		// A CloudEvent in Kafka's binary mode, and one structured.
		{"orders.eu", 7, 1234, "order-A-1", false, "ce_specversion: 1.0\nce_id: 5f1c\nce_source: /orders\nce_type: order.created\ncontent-type: application/json",
			`{"order":{"id":"A-1","total":19.98,"lines":[{"sku":"x","qty":2}]}}`, at, 0},
		{"orders.eu", 7, 1235, "", true, "content-type: application/cloudevents+json; charset=UTF-8",
			`{"specversion":"1.0","id":"5f1d","source":"/orders","type":"order.paid","data":{"id":"A-1"}}`, at, 0},
		// Keys and headers: empty, binary, control characters, UTF-8.
		{"t", 0, 0, "", false, "kafka-key-base64: Zm9yZ2Vk\n:\nno-colon\nX-Bin: caf\xe9\xff", `[]`, 0, 0},
		{"t", -1, -1, "line\nbreak", false, "Émoji: ✓", `"text"`, -1, 0},
		// A topic whose ID must be cut.
		{strings.Repeat("t", 249), 2147483647, 9_223_372_036_854_775_807, "k", false, "", `{}`, at, 0},
		// Bodies: empty, not JSON, deep, huge numbers, duplicate keys.
		{"deploys", 0, 3, "", true, "", ``, at, 0},
		{"deploys", 0, 4, "", true, "", `image=api:1`, at, 0},
		{"deploys", 0, 5, "", true, "", strings.Repeat("[", 101) + strings.Repeat("]", 101), at, 0},
		{"deploys", 0, 6, "", true, "", strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100), at, 0},
		{"deploys", 0, 7, "", true, "", `{"replicas":1e400,"big":-123456789012345678901234567890}`, at, 0},
		{"deploys", 0, 8, "", true, "", `{"a":1,"a":[2]}`, at, 0},
		{"deploys", 0, 9, "", true, "", "{\"a\":\"\xff\"}", at, 0},
	} {
		f.Add(c.topic, c.partition, c.offset, []byte(c.key), c.noKey, c.headers, []byte(c.value), c.ts, c.limit)
	}
	f.Fuzz(func(t *testing.T, topic string, partition int32, offset int64, key []byte, noKey bool, headers string, value []byte, ts int64, limit uint16) {
		legal := validTopic(topic)
		if noKey {
			key = nil
		} else if key == nil {
			key = []byte{}
		}
		r := &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Key: key, Value: value,
			Headers: fuzzHeaders(headers), Timestamp: time.UnixMilli(ts)}
		c := &Consumer{spec: &v1alpha1.KafkaSource{MaxBodyBytes: v1alpha1.DefaultWebhookBody}}
		if limit > 0 {
			c.spec.MaxBodyBytes = int64(limit)
		}
		lim := c.spec.MaxBodyBytes
		var m, again source.Message
		fuzzcheck.Within(t, "message", fuzzBound, func() {
			m = c.message(r)
			again = c.message(r)
		})

		// ID: <topic>:<partition>:<offset>, or the topic cut and hashed.
		tail := ":" + strconv.Itoa(int(partition)) + ":" + strconv.FormatInt(offset, 10)
		switch {
		case len(m.ID) > maxID || m.ID == "" || !strings.HasSuffix(m.ID, tail):
			t.Errorf("ID %q: want at most %d characters ending %q", m.ID, maxID, tail)
		case len(topic)+len(tail) <= maxID && m.ID != topic+tail:
			t.Errorf("ID %q, want %q", m.ID, topic+tail)
		case legal && strings.ContainsFunc(m.ID, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '/' || r == '\\' }):
			t.Errorf("ID %q of topic %q is not printable ASCII without slashes", m.ID, topic)
		}
		if other := topic + "x"; legal && ID(other, partition, offset) == m.ID {
			t.Errorf("topics %q and %q have the same ID %q", topic, other, m.ID)
		}
		if m.Event != topic {
			t.Errorf("event %q, want the topic %q", m.Event, topic)
		}
		if want := time.UnixMilli(ts); (ts > 0) != !m.Published.IsZero() || (ts > 0 && !m.Published.Equal(want)) {
			t.Errorf("published %s, for a timestamp of %d ms", m.Published, ts)
		}
		// The body is the value, cut to limit+1 bytes past the limit.
		switch n := int64(len(value)); {
		case n <= lim && !bytes.Equal(m.Body, value):
			t.Errorf("a value of %d bytes, under the limit, handed as %d bytes", n, len(m.Body))
		case n > lim && (int64(len(m.Body)) != lim+1 || !bytes.HasPrefix(value, m.Body)):
			t.Errorf("a value of %d bytes, over the limit of %d, handed as %d bytes", n, lim, len(m.Body))
		}
		// The key is the record's, as text or base64, never a header's.
		text, hasText := m.Headers[KeyHeader]
		b64, hasB64 := m.Headers[KeyBase64Header]
		switch {
		case key == nil && (hasText || hasB64):
			t.Errorf("a record without a key has the key headers %q %q", text, b64)
		case key != nil && hasText == hasB64:
			t.Errorf("key %q: headers %s %q and %s %q, want one", key, KeyHeader, text, KeyBase64Header, b64)
		case hasText && text != string(key):
			t.Errorf("key %q as %s %q", key, KeyHeader, text)
		case hasText && !utf8.ValidString(text):
			t.Errorf("key %q is not UTF-8 text, and is given as %s", key, KeyHeader)
		case hasB64:
			if raw, err := base64.StdEncoding.DecodeString(b64); err != nil || !bytes.Equal(raw, key) {
				t.Errorf("key %q as %s %q (%v)", key, KeyBase64Header, b64, err)
			}
		}
		// The other headers: by lower-case name, the first of a name.
		first := map[string]string{}
		for _, h := range r.Headers {
			k := strings.ToLower(h.Key)
			if _, seen := first[k]; !seen {
				first[k] = strings.ToValidUTF8(string(h.Value), "\uFFFD")
			}
		}
		for k, v := range m.Headers {
			if k == KeyHeader || k == KeyBase64Header {
				continue
			}
			if k != strings.ToLower(k) || !utf8.ValidString(v) || first[k] != v {
				t.Errorf("header %q: %q, want the lower-case name and the first value, UTF-8 (%q)", k, v, first[k])
			}
		}
		for k := range first {
			if _, ok := m.Headers[k]; !ok && k != KeyHeader && k != KeyBase64Header {
				t.Errorf("header %q is missing", k)
			}
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("the same record read twice differs:\n%q\n%q", m, again)
		}
		sourcetest.CheckBody(t, m.Body)
	})
}
