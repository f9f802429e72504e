package opkittest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// StubResult is one made-up outcome of a stubbed handler's run: a failure
// (Fail), or a result (Result, or neither: a success that changes
// nothing).
type StubResult struct {
	// Fail, when not "", fails the run with this message, as a crash or a
	// non-zero exit of the handler would: the run is retried by the
	// handler's retry policy, unless Permanent.
	Fail string
	// Permanent, with Fail, makes the failure permanent: the run gives up
	// at once (GaveUp) and the object is Stalled.
	Permanent bool
	// Result, when Fail is "", is the run's handler result, as a handler
	// writes it on its stdout (docs/handlers.md, "The result"): "status",
	// "events", "requeueAfter", "skipped"... Nil is a success that
	// changes nothing.
	Result map[string]any
	// Log, when not "", is written to the run's log, as a handler's
	// stderr would be.
	Log string
}

// Stub replaces the action of the operator's handler (exec, http or job)
// by results: each run returns the next of them, and once they are used
// up the last repeats (none: every run succeeds, changing nothing). A
// second Stub of the same handler replaces the first. Everything else
// happens as for a real run: it is archived with its attempt and log
// (Runs, WaitRun, Log), its status patch and Events are written, a
// failure is retried by the handler's policy and, after its attempts,
// gives up and stalls the object.
//
// A stub is read when a run starts: it answers the runs that start after
// Stub returns, not one in flight. Set it before creating the objects
// whose runs it should answer. A handler or operator the engine does not
// run, or a result that is not a handler result, fails the test.
func (e *Engine) Stub(t testing.TB, operator, handler string, results ...StubResult) {
	t.Helper()
	e.handler(t, operator, handler)
	canned := make([]executor.CannedResult, len(results))
	for i, r := range results {
		canned[i].Log = r.Log
		switch {
		case r.Fail != "" && r.Result != nil:
			t.Fatalf("opkittest: stub of %s/%s, result %d: Fail and Result are both set; a run either fails or has a result", operator, handler, i)
		case r.Permanent && r.Fail == "":
			t.Fatalf("opkittest: stub of %s/%s, result %d: Permanent without Fail; set Fail to the failure's message", operator, handler, i)
		case r.Fail != "":
			canned[i].Failure = &executor.Failure{Message: r.Fail, Permanent: r.Permanent}
		case r.Result != nil:
			data, err := json.Marshal(r.Result)
			if err != nil {
				t.Fatalf("opkittest: stub of %s/%s, result %d: the Result does not encode as JSON: %v", operator, handler, i, err)
			}
			parsed, err := executor.ParseResult(data)
			if err != nil {
				t.Fatalf("opkittest: stub of %s/%s, result %d: not a handler result (docs/handlers.md): %v", operator, handler, i, err)
			}
			canned[i].Result = parsed
		}
	}
	e.stubs.Set(operator, handler, executor.NewCanned(canned...))
}

// Unstub gives the operator's handler its own action back, for the runs
// that start after it returns.
func (e *Engine) Unstub(t testing.TB, operator, handler string) {
	t.Helper()
	e.handler(t, operator, handler)
	e.stubs.Delete(operator, handler)
}

// operator returns the definition of the engine's operator named name,
// or fails the test naming those it runs.
func (e *Engine) operator(t testing.TB, name string) *definition.Definition {
	t.Helper()
	names := make([]string, 0, len(e.defs))
	for _, d := range e.defs {
		if d.Operator.Name == name {
			return d
		}
		names = append(names, d.Operator.Name)
	}
	t.Fatalf("opkittest: the engine runs no operator %q; it runs: %s", name, strings.Join(names, ", "))
	return nil
}

// handler checks that the operator has the handler, or fails the test
// naming its handlers.
func (e *Engine) handler(t testing.TB, operator, name string) {
	t.Helper()
	d := e.operator(t, operator)
	names := make([]string, 0, len(d.Handlers))
	for _, h := range d.Handlers {
		if h.Name == name {
			return
		}
		names = append(names, h.Name)
	}
	t.Fatalf("opkittest: operator %s has no handler %q; its handlers: %s", operator, name, strings.Join(names, ", "))
}
