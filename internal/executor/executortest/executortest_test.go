package executortest_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/executor/executortest"
)

// TestTheFieldsOfAResultAreKnown: HiddenIn and Normalized read
// executor.Result's fields by name; a field added to it is either words
// HiddenIn must read, or not, and is said here.
func TestTheFieldsOfAResultAreKnown(t *testing.T) {
	known := []string{"Status", "Events", "RequeueAfter", "Error", "Skipped", "Refuse", "Allowed", "Message", "Patch", "Warnings"}
	var fields []string
	for f := range reflect.TypeFor[executor.Result]().Fields() {
		fields = append(fields, f.Name)
	}
	if !slices.Equal(fields, known) {
		t.Fatalf("executor.Result's fields are %q, not %q: say whether HiddenIn reads a new one", fields, known)
	}
}

// TestHiddenInReadsEveryWordOfAResult: a value is found in each field of
// a result that carries words, and in an error quoted, and not in a
// requeueAfter nor an event's type.
func TestHiddenInReadsEveryWordOfAResult(t *testing.T) {
	const s = "s3cr3t"
	for _, c := range []struct {
		where string
		res   executor.Result
	}{
		{"status.a", executor.Result{Status: map[string]any{"a": []any{"x " + s}}}},
		{"status.a key", executor.Result{Status: map[string]any{"a": map[string]any{s: 1}}}},
		{"patch.spec.a", executor.Result{Patch: map[string]any{"spec": map[string]any{"a": s}}}},
		{"event", executor.Result{Events: []executor.Event{{Type: "Normal", Reason: "Greeted", Message: "hi " + s}}}},
		{"event", executor.Result{Events: []executor.Event{{Type: "Normal", Reason: s}}}},
		{"error message", executor.Result{Error: &executor.ResultError{Message: s}}},
		{"refusal", executor.Result{Refuse: s}},
		{"admission message", executor.Result{Message: s}},
		{"warning", executor.Result{Warnings: []string{"w", s}}},
	} {
		if got := executortest.HiddenIn(s, &c.res, nil, ""); !strings.HasPrefix(got, c.where+" ") {
			t.Errorf("%+v: HiddenIn says %q, want the %s", c.res, got, c.where)
		}
	}
	none := executor.Result{RequeueAfter: s, Events: []executor.Event{{Type: s, Reason: "Greeted"}}}
	if got := executortest.HiddenIn(s, &none, nil, ""); got != "" {
		t.Errorf("%+v: HiddenIn says %q, want nothing", none, got)
	}
	if got := executortest.HiddenIn(s, (*executor.Result)(nil), nil, "log "+s); got != `log "log s3cr3t"` {
		t.Errorf("in the log: HiddenIn says %q", got)
	}
	const quoted = "a\"b\n"
	err := &executor.Failure{Message: fmt.Sprintf("output begins %q", quoted)}
	if got := executortest.HiddenIn(quoted, (*executor.Result)(nil), err, ""); !strings.HasPrefix(got, "error, unquoted ") {
		t.Errorf("%v: HiddenIn says %q, want the error, unquoted", err, got)
	}
	if got := executortest.HiddenIn("", &executor.Result{Refuse: s}, err, s); got != "" {
		t.Errorf("no value: HiddenIn says %q", got)
	}
}

// TestNormalized: the empty status, events and warnings are nil, the
// rest (an empty patch is one) as it was, the result itself unchanged.
func TestNormalized(t *testing.T) {
	r := executor.Result{Status: map[string]any{}, Events: []executor.Event{}, Warnings: []string{}, Patch: map[string]any{}, Refuse: "no"}
	n := executortest.Normalized(&r)
	if n.Status != nil || n.Events != nil || n.Warnings != nil || n.Patch == nil || n.Refuse != "no" {
		t.Errorf("normalized as %#v", n)
	}
	if r.Status == nil || r.Events == nil || r.Warnings == nil {
		t.Errorf("the result itself changed: %#v", r)
	}
	full := executor.Result{Status: map[string]any{"a": 1}, Events: []executor.Event{{Reason: "R"}}, Warnings: []string{"w"}}
	if n := executortest.Normalized(&full); !reflect.DeepEqual(n, full) {
		t.Errorf("%#v normalized as %#v", full, n)
	}
}
