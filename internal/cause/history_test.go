package cause

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// event is one step of a history played through the deciding layer: the
// object created or its spec changed (spec), deleted, or the engine
// started again.
type event struct {
	spec   map[string]any
	delete bool
	start  bool
}

func create(spec map[string]any) event { return event{spec: spec} }
func change(spec map[string]any) event { return event{spec: spec} }

var (
	deletion = event{delete: true}
	restart  = event{start: true}
)

// history plays events through Decide and State as the engine does: after
// each, it decides until nothing is due, the clock jumping to each retry,
// each run failing as many times per key as fails says for its "handler
// trigger" and then succeeding; the state goes through JSON between
// decisions, as it does through status.opkit. It returns the runs as
// "handler trigger generation/attempt outcome", and "start" for each
// start.
func history(t *testing.T, hs []*definition.Handler, fails map[string]int, events ...event) []string {
	t.Helper()
	clock := now
	started := clock
	var obj *unstructured.Unstructured
	st := state(0, nil, nil)
	execs := map[string]int{}
	var out []string
	for _, e := range events {
		clock = clock.Add(time.Minute)
		switch {
		case e.start:
			started = clock
			out = append(out, "start")
		case e.delete:
			ts := metav1.NewTime(clock)
			obj.SetDeletionTimestamp(&ts)
			obj.SetGeneration(obj.GetGeneration() + 1) // as the API server does for a custom resource
		case obj == nil:
			obj = object(1, maps.Clone(e.spec))
		default:
			obj.Object["spec"] = maps.Clone(e.spec)
			obj.SetGeneration(obj.GetGeneration() + 1)
		}
		for i := 0; ; i++ {
			if i == 50 {
				t.Fatalf("still deciding runs after %v", out)
			}
			data, _ := json.Marshal(st)
			st = &State{}
			if err := json.Unmarshal(data, st); err != nil {
				t.Fatal(err)
			}
			if st.Handlers == nil {
				st.Handlers = map[string]*HandlerState{}
			}
			d := Decide(Input{Handlers: hs, Object: obj, State: st, Now: clock, Started: started})
			if d.Cause == nil && d.Wait > 0 {
				clock = clock.Add(d.Wait)
				continue
			}
			if d.Cause == nil {
				if obj.GetDeletionTimestamp() == nil {
					st.AdvanceHandled(hs, obj.GetGeneration(), Spec(obj))
				}
				break
			}
			c := d.Cause
			execs[c.Key]++
			outcome := "Succeeded"
			if execs[c.Key] <= fails[c.Handler.Name+" "+c.Trigger] {
				outcome = "Failed"
				if gaveUp, _ := st.Failed(c, "boom", false, clock); gaveUp {
					outcome = "GaveUp"
				}
			} else {
				st.Succeeded(hs, c, Spec(obj), 0, clock)
			}
			out = append(out, fmt.Sprintf("%s %s %d/%d %s", c.Handler.Name, c.Trigger, c.Generation, c.Attempt, outcome))
		}
	}
	return out
}

func attempts(h *definition.Handler, n int) *definition.Handler {
	h.Retry.MaxAttempts = n
	return h
}

// TestHistories plays histories through the deciding layer and lists the
// runs they make: those of the defects the conformance model found
// (issue 33: resume, stalled).
func TestHistories(t *testing.T) {
	a0b0 := map[string]any{"a": "0", "b": "0"}
	a1b0 := map[string]any{"a": "1", "b": "0"}
	for _, tc := range []struct {
		name     string
		handlers []*definition.Handler
		fails    map[string]int
		events   []event
		want     []string
	}{
		{
			name:     "every resume handler runs once at each start",
			handlers: []*definition.Handler{handler("c", v1alpha1.OnCreate), handler("r1", v1alpha1.OnResume), handler("r2", v1alpha1.OnResume)},
			events:   []event{create(a0b0), restart, restart},
			want: []string{"c create 1/1 Succeeded",
				"start", "r1 resume 1/1 Succeeded", "r2 resume 1/1 Succeeded",
				"start", "r1 resume 1/1 Succeeded", "r2 resume 1/1 Succeeded"},
		},
		{
			name:     "an object created since the start gets no resume run until the next",
			handlers: []*definition.Handler{handler("r1", v1alpha1.OnResume), handler("r2", v1alpha1.OnResume)},
			events:   []event{create(a0b0), change(a1b0), restart},
			want:     []string{"start", "r1 resume 2/1 Succeeded", "r2 resume 2/1 Succeeded"},
		},
		{
			name:     "a handler that gave up, then fails on a new generation, is retried",
			handlers: []*definition.Handler{attempts(handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate), 2)},
			fails:    map[string]int{"h create": 2},
			events:   []event{create(a0b0), change(a1b0)},
			want: []string{"h create 1/1 Failed", "h create 1/2 GaveUp",
				"h create 2/1 Failed", "h create 2/2 GaveUp"},
		},
		{
			name:     "a handler that gave up, then fails on its delete run, is retried",
			handlers: []*definition.Handler{attempts(handler("h", v1alpha1.OnCreate, v1alpha1.OnDelete), 2)},
			fails:    map[string]int{"h create": 2, "h delete": 1},
			events:   []event{create(a0b0), deletion},
			want: []string{"h create 1/1 Failed", "h create 1/2 GaveUp",
				"h delete 2/1 Failed", "h delete 2/2 Succeeded"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := history(t, tc.handlers, tc.fails, tc.events...); !slices.Equal(got, tc.want) {
				t.Errorf("runs:\n  %v\nwant\n  %v", got, tc.want)
			}
		})
	}
}
