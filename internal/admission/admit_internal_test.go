package admission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/cause"
)

func TestAMergePatchBecomesTheJSONPatchOfTheSameChange(t *testing.T) {
	raw := []byte(`{"apiVersion":"demo.example.com/v1","kind":"Website","metadata":{"name":"a","annotations":{"x":"1"}},"spec":{"content":"hi","replicas":1}}`)
	for _, tc := range []struct {
		merge  string
		fields []string
		err    string
	}{
		{`{"spec":{"replicas":3}}`, []string{"spec.replicas"}, ""},
		{`{"spec":{"replicas":null},"metadata":{"annotations":{"demo.example.com/created-by":"me"}}}`,
			[]string{"metadata.annotations.demo.example.com/created-by", "spec.replicas"}, ""},
		{`{"spec":{"replicas":1}}`, nil, ""}, // no change: no patch
		{`{"metadata":{"name":"b"}}`, nil, "it changes metadata.name"},
		{`{"status":{"ready":true}}`, nil, "it changes status"},
	} {
		var merge map[string]any
		if err := json.Unmarshal([]byte(tc.merge), &merge); err != nil {
			t.Fatal(err)
		}
		patch, fields, err := jsonPatchOf(raw, merge)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v; want one saying %q", tc.merge, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(fields, tc.fields) {
			t.Errorf("%s: fields %v, error %v; want %v", tc.merge, fields, err, tc.fields)
		}
		if (len(patch) > 0) != (len(tc.fields) > 0) {
			t.Errorf("%s: patch %s", tc.merge, patch)
		}
	}
}

func TestTheHandlersDeadlineLeavesTheAPIServerTimeForTheAnswer(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		time.Second:      500 * time.Millisecond,
		3 * time.Second:  2500 * time.Millisecond,
		10 * time.Second: 9 * time.Second,
		30 * time.Second: 27 * time.Second,
	} {
		if got := admissionBudget(timeout); got != want {
			t.Errorf("admissionBudget(%s) = %s; want %s", timeout, got, want)
		}
	}
}

func TestARecordedDiffIsCapped(t *testing.T) {
	after := map[string]any{"big": strings.Repeat("x", 1000)}
	for i := range 40 {
		after["f"+strings.Repeat("x", i)] = i
	}
	d := capDiff(cause.Diff(nil, after))
	if len(d) != admissionDiffCap+1 || !strings.Contains(d[admissionDiffCap].Path, "more changes") {
		t.Fatalf("%d changes; want %d and a line saying how many more", len(d), admissionDiffCap+1)
	}
	for _, c := range d {
		if s, ok := c.New.(string); ok && len(s) > admissionValueCap+32 {
			t.Errorf("%s: a value of %d bytes kept", c.Path, len(s))
		}
	}
}
