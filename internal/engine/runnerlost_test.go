package engine_test

import (
	"context"
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
	mu    sync.Mutex
	calls []executor.Dispatch
}

func (l *loseFirst) Dispatch(_ context.Context, d executor.Dispatch) (*executor.RunnerOutcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, d)
	if len(l.calls) == 1 {
		return nil, &executor.Interrupted{Message: "runner parcels-runner-1 was lost mid-run (the connection dropped)"}
	}
	return &executor.RunnerOutcome{Result: []byte(`{"status":{"shipped":true}}`)}, nil
}

func TestARunWhoseRunnerIsLostIsCancelledAndRunsAgainWithItsKey(t *testing.T) {
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
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.calls) != 2 || pool.calls[0].Image != "python:3.12-slim" || pool.calls[0].Work.Command[0] != "./ship.py" {
		t.Errorf("dispatches %+v; want two, of the image, with the command as written", pool.calls)
	}
}
