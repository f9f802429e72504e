package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/executor"
)

const parcelsV1 = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: parcels}
spec:
  resource:
    group: parcels.example.com
    kind: Parcel
    versions:
    - name: v1
      schema:
        type: object
        properties:
          to: {type: string}
  handlers:
  - name: ship
    on: [create]
    exec: {command: [./ship.py], image: "python:3.12-slim"}
`

// loseFirst stands in for the runner pool (package runners, tested with
// real agents): it loses the first run's runner, and answers the next.
type loseFirst struct {
	// result is the later runs' result; defaults to a status patch.
	result string
	mu     sync.Mutex
	calls  []executor.Dispatch
}

func (l *loseFirst) Dispatch(_ context.Context, d executor.Dispatch) (*executor.Reply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, d)
	if d.Claimed != nil {
		d.Claimed(fmt.Sprintf("parcels-runner-%d", len(l.calls)))
	}
	if len(l.calls) == 1 {
		return nil, &executor.Interrupted{Message: "runner parcels-runner-1 was lost mid-run (the connection dropped)"}
	}
	if l.result != "" {
		return &executor.Reply{Result: []byte(l.result)}, nil
	}
	return &executor.Reply{Result: []byte(`{"status":{"shipped":true}}`)}, nil
}

func TestARunWhoseRunnerIsLostIsCancelledAndRunsAgainWithItsKey(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	pool := &loseFirst{}
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, Runners: pool})
	if err := e.Apply(t.Context(), compileYAML(t, parcelsV1)); err != nil {
		t.Fatal(err)
	}
	create(t, env, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "parcels.example.com/v1", "kind": "Parcel",
		"metadata": map[string]any{"name": "p1", "namespace": env.Namespace},
		"spec":     map[string]any{"to": "home"},
	}})
	var runs []archive.Run
	eventually(t, 60*time.Second, "the run is cancelled, then succeeds", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Operator: "parcels"})
		if err != nil {
			return false, err
		}
		runs = page.Runs
		return slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Outcome == archive.Succeeded }), nil
	})
	slices.Reverse(runs) // oldest first
	if len(runs) != 2 || runs[0].Outcome != archive.Cancelled || runs[1].Outcome != archive.Succeeded {
		t.Fatalf("runs %+v; want one Cancelled, then one Succeeded", runs)
	}
	if runs[0].Key != runs[1].Key || runs[0].Attempt != runs[1].Attempt {
		t.Errorf("keys %s (attempt %d), %s (attempt %d): want the run again with its key, no attempt counted", runs[0].Key, runs[0].Attempt, runs[1].Key, runs[1].Attempt)
	}
	if runs[0].Error == "" || runs[0].Error != "runner parcels-runner-1 was lost mid-run (the connection dropped)" {
		t.Errorf("the cancelled run's error %q; want the lost runner named", runs[0].Error)
	}
	if runs[0].Runner != "parcels-runner-1" || runs[1].Runner != "parcels-runner-2" {
		t.Errorf("the runs' runners %q, %q; want each named by the runner that claimed it", runs[0].Runner, runs[1].Runner)
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.calls) != 2 || pool.calls[0].Image != "python:3.12-slim" || pool.calls[0].Work.Command[0] != "./ship.py" {
		t.Errorf("dispatches %+v; want two, of the image, with the command as written", pool.calls)
	}
}

const chimeInImage = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: chime}
spec:
  handlers:
  - name: ring
    on: [schedule]
    schedule: {every: 2s}
    exec: {command: [./ring.py], image: "python:3.12-slim"}
`

func TestAnOperatorWideRunWhoseRunnerIsLostIsCancelledAndRunsAgainWithItsKey(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	pool := &loseFirst{result: "{}"} // a run for the operator has no status to write
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, Runners: pool})
	if err := e.Apply(t.Context(), compileYAML(t, chimeInImage)); err != nil {
		t.Fatal(err)
	}
	var runs []archive.Run
	eventually(t, 60*time.Second, "the first slot runs again", func(ctx context.Context) (bool, error) {
		all, err := archive.ListAll(ctx, store, archive.Query{Operator: "chime"})
		if err != nil {
			return false, err
		}
		slices.Reverse(all) // oldest first
		runs = all
		return len(runs) >= 2 && slices.ContainsFunc(runs[1:], func(r archive.Run) bool { return r.Key == runs[0].Key && r.Outcome != archive.Running }), nil
	})
	first := runs[0]
	if first.Outcome != archive.Cancelled || first.Error != "runner parcels-runner-1 was lost mid-run (the connection dropped)" || first.Runner != "parcels-runner-1" {
		t.Fatalf("the first run %s %q on runner %q; want Cancelled, naming the lost runner, parcels-runner-1", first.Outcome, first.Error, first.Runner)
	}
	for _, r := range runs[1:] {
		if r.Key != first.Key {
			continue
		}
		if r.Outcome != archive.Succeeded || r.Attempt != first.Attempt || r.Runner != "parcels-runner-2" {
			t.Errorf("the slot's next run: %s, attempt %d (%s), on runner %q; want it run again with its key on parcels-runner-2, Succeeded, no attempt counted (attempt %d)", r.Outcome, r.Attempt, r.Error, r.Runner, first.Attempt)
		}
		break
	}
}
