package executor_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/opkit-dev/opkit/internal/executor"
)

func TestCannedAnswersInOrderThenRepeatsTheLast(t *testing.T) {
	ok, err := executor.ParseResult([]byte(`{"status": {"phase": "done"}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := executor.NewCanned(
		executor.CannedResult{Failure: &executor.Failure{Message: "boom"}, Log: "first"},
		executor.CannedResult{Failure: &executor.Failure{Message: "gone", Permanent: true}},
		executor.CannedResult{Result: ok, Log: "done\n"},
	)
	type answer struct {
		failure   string
		permanent bool
		phase     any
		log       string
	}
	want := []answer{{failure: "boom", log: "first\n"}, {failure: "gone", permanent: true}, {phase: "done", log: "done\n"}, {phase: "done", log: "done\n"}}
	for i, w := range want {
		var log bytes.Buffer
		res, err := c.Run(t.Context(), executor.Request{Log: &log})
		var got answer
		got.log = log.String()
		if f, isFailure := errors.AsType[*executor.Failure](err); isFailure {
			got.failure, got.permanent = f.Message, f.Permanent
		} else if err != nil {
			t.Fatalf("run %d: %v", i, err)
		} else {
			got.phase = res.Status["phase"]
			res.Status["phase"] = "changed by the engine" // the next run's is its own
		}
		if got != w {
			t.Errorf("run %d: %+v, want %+v", i, got, w)
		}
	}
	if n := c.Runs(); n != len(want) {
		t.Errorf("Runs() = %d, want %d", n, len(want))
	}
}

func TestCannedWithoutResultsSucceeds(t *testing.T) {
	res, err := executor.NewCanned().Run(t.Context(), executor.Request{})
	if err != nil || res == nil || res.Error != nil || len(res.Status) > 0 {
		t.Errorf("got %+v, %v; want an empty result", res, err)
	}
}
