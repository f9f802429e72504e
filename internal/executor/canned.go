package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// CannedResult is one run's made-up outcome: a failure, or a result.
type CannedResult struct {
	// Failure, when set, fails the run, as a handler's crash or non-zero
	// exit would: retried by the handler's policy unless Permanent.
	Failure *Failure
	// Result is the run's result when Failure is nil: a status patch,
	// events, requeueAfter, an error of the handler's own... (ParseResult
	// reads one from JSON). Nil is an empty result: the run succeeded.
	Result *Result
	// Log, when not "", is written to the run's log, as a handler's
	// stderr would be.
	Log string
}

// Canned is an Executor that answers each run with the next of its
// results, the last one repeating, without running anything: a test
// double for a handler (engine.Stubs). It is safe for concurrent use.
type Canned struct {
	mu      sync.Mutex
	results []CannedResult
	runs    int
}

var _ Executor = (*Canned)(nil)

// NewCanned returns a Canned answering with results, in order; with none,
// every run succeeds with an empty result.
func NewCanned(results ...CannedResult) *Canned {
	return &Canned{results: results}
}

// Run answers with the next result. The result is a copy: what the
// engine does with one run's result does not change the next's.
func (c *Canned) Run(_ context.Context, req Request) (*Result, error) {
	c.mu.Lock()
	var r CannedResult
	if n := len(c.results); n > 0 {
		r = c.results[min(c.runs, n-1)]
	}
	c.runs++
	c.mu.Unlock()
	if r.Log != "" && req.Log != nil {
		line := r.Log
		if line[len(line)-1] != '\n' {
			line += "\n"
		}
		_, _ = io.WriteString(req.Log, line)
	}
	if r.Failure != nil {
		f := *r.Failure
		return nil, &f
	}
	if r.Result == nil {
		return &Result{}, nil
	}
	data, err := json.Marshal(r.Result)
	if err != nil {
		return nil, &Failure{Message: fmt.Sprintf("the canned result does not encode: %v", err), Permanent: true}
	}
	out := &Result{}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, &Failure{Message: fmt.Sprintf("the canned result does not decode: %v", err), Permanent: true}
	}
	return out, nil
}

// Runs returns how many runs the Canned has answered.
func (c *Canned) Runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}
