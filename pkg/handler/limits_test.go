package handler_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/jsondepth"
	"github.com/opkit-dev/opkit/pkg/handler"
)

// anyTable is a table whose status is any JSON value.
type anyTable = handler.Handlers[handler.Object[spec, any], spec, any]

// returning is a table that answers every run with status.
func returning(status any) anyTable {
	return anyTable{handler.OnAny: func(context.Context, *handler.Context[handler.Object[spec, any], spec]) (*handler.Result[any], error) {
		return &handler.Result[any]{Status: &status}, nil
	}}
}

// nested is a status n objects and arrays deep: {"x": [[…"deep"…]]}.
func nested(n int) any {
	var v any = "deep"
	for range n - 1 {
		v = []any{v}
	}
	return map[string]any{"x": v}
}

// answers runs h on a context in the three ways a program can (Call,
// Once, Serve), checks that they answer alike, and returns the answer
// and Once's exit status.
func answers(t *testing.T, h anyTable) (string, int) {
	t.Helper()
	c := &handler.Context[handler.Object[spec, any], spec]{Operator: "greetings", Handler: "greet", Trigger: handler.OnCreate, RunID: "01jd5v3q8m2k4x7zab"}
	in := answer(t, c)
	var once, served bytes.Buffer
	exit := handler.Once(t.Context(), h, strings.NewReader(in), &once, io.Discard)
	if err := handler.Serve(t.Context(), h, strings.NewReader(in+"\n"), &served, io.Discard); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	called := answer(t, h.Call(t.Context(), c))
	got := strings.TrimSuffix(once.String(), "\n")
	if served.String() != got+"\n" || called != got {
		t.Fatalf("the modes answer differently: Once %.200s, Serve %.200s, Call %.200s", got, served.String(), called)
	}
	return got, exit
}

func TestTheSDKsLimitsOnAResultAreTheEngines(t *testing.T) {
	if handler.MaxResultBytes != executor.MaxResultBytes || handler.MaxResultDepth != jsondepth.Max {
		t.Errorf("the SDK's limits are %d bytes and %d deep, the engine's %d and %d", handler.MaxResultBytes, handler.MaxResultDepth, executor.MaxResultBytes, jsondepth.Max)
	}
}

func TestAResultPastOpkitsSizeLimitFailsPermanentlyNamingItsSizeAndTheLimit(t *testing.T) {
	got, exit := answers(t, returning(map[string]any{"x": strings.Repeat("y", 3<<20)}))
	want := regexp.MustCompile(`^\{"error":\{"message":"the result is 3145748 bytes with its newline, more than opkit's limit of 1048576 \(1 MiB\)","permanent":true\}\}$`)
	if !want.MatchString(got) || exit != 0 {
		t.Errorf("a 3 MB result: got %.300s and exit %d, want a permanent error naming its size and the limit, exit 0", got, exit)
	}

	// {"status":{"x":"…"}} and a newline: 20 bytes and the string's.
	for _, c := range []struct {
		n    int
		fits bool
	}{{handler.MaxResultBytes - 20, true}, {handler.MaxResultBytes - 19, false}} {
		got, _ := answers(t, returning(map[string]any{"x": strings.Repeat("y", c.n)}))
		if line := len(got) + 1; c.fits && line != handler.MaxResultBytes {
			t.Errorf("a result of %d bytes with its newline, at the limit: got %.200s", handler.MaxResultBytes, got)
		} else if !c.fits && !strings.Contains(got, fmt.Sprintf("the result is %d bytes", handler.MaxResultBytes+1)) {
			t.Errorf("a result one byte past the limit: got %.200s, want it refused", got)
		}
	}
}

func TestAResultNestedPastOpkitsLimitFailsPermanentlyNamingItsDepthAndTheLimit(t *testing.T) {
	// The result's object is a level: its status nests one less.
	got, exit := answers(t, returning(nested(handler.MaxResultDepth)))
	if want := `{"error":{"message":"the result nests 101 objects and arrays deep, more than opkit's limit of 100","permanent":true}}`; got != want || exit != 0 {
		t.Errorf("a result 101 deep: got %.300s and exit %d, want %s and exit 0", got, exit, want)
	}
	got, _ = answers(t, returning(nested(handler.MaxResultDepth-1)))
	if !strings.HasPrefix(got, `{"status":{"x":[[`) {
		t.Errorf("a result 100 deep: got %.300s, want it written", got)
	}
	if _, err := executor.ParseResult([]byte(got)); err != nil {
		t.Errorf("the engine refuses a result 100 deep the SDK writes: %v", err)
	}
	// Brackets in strings are not nesting.
	got, _ = answers(t, returning(map[string]any{`"[{`: strings.Repeat(`[{\"`, 200)}))
	if !strings.HasPrefix(got, `{"status":`) {
		t.Errorf("a result with brackets in its strings: got %.300s, want it written", got)
	}
}
