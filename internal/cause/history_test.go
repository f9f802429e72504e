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
			d := apply(Input{Handlers: hs, Object: obj, State: st, Now: clock, Started: started})
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
// (issue 33: resume, stalled, handled).
func TestHistories(t *testing.T) {
	a0b0 := map[string]any{"a": "0", "b": "0"}
	a1b0 := map[string]any{"a": "1", "b": "0"}
	a1b1 := map[string]any{"a": "1", "b": "1"}
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
		{
			name: "an update not about a handler's fields runs nothing of it while another has given up",
			handlers: []*definition.Handler{withFields(handler("f", v1alpha1.OnUpdate), "spec.b"),
				attempts(handler("g", v1alpha1.OnCreate), 1)},
			fails:  map[string]int{"g create": 9},
			events: []event{create(a0b0), change(a1b0), change(a1b1)},
			want: []string{"g create 1/1 GaveUp",
				"g create 2/1 GaveUp",
				"f update 3/1 Succeeded", "g create 3/1 GaveUp"},
		},
		{
			name: "an update is about the change since the handler last succeeded, not since every handler did",
			handlers: []*definition.Handler{withFields(handler("f", v1alpha1.OnCreate, v1alpha1.OnUpdate), "spec.b"),
				attempts(handler("g", v1alpha1.OnCreate), 1)},
			fails:  map[string]int{"g create": 9},
			events: []event{create(a0b0), change(a1b1), change(map[string]any{"a": "2", "b": "1"})},
			want: []string{"f create 1/1 Succeeded", "g create 1/1 GaveUp",
				"f update 2/1 Succeeded", "g create 2/1 GaveUp",
				"g create 3/1 GaveUp"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := history(t, tc.handlers, tc.fails, tc.events...); !slices.Equal(got, tc.want) {
				t.Errorf("runs:\n  %v\nwant\n  %v", got, tc.want)
			}
		})
	}
}

// TestASpecIsKeptOnlyWhileAnUpdateHandlerIsAheadOfTheHandledOne: the
// spec a handler with fields passed is kept while another handler is
// behind, and goes once status.opkit.handled catches up.
func TestASpecIsKeptOnlyWhileAnUpdateHandlerIsAheadOfTheHandledOne(t *testing.T) {
	f, g := withFields(handler("f", v1alpha1.OnUpdate), "spec.b"), handler("g", v1alpha1.OnCreate)
	hs := []*definition.Handler{f, g}
	spec := map[string]any{"a": "0", "b": "0"}
	st := state(0, nil, nil)
	d := apply(Input{Handlers: hs, Object: object(1, spec), State: st, Now: now, Started: started})
	if d.Cause == nil || d.Cause.Handler != g {
		t.Fatalf("decided %+v; want g's create", d.Cause)
	}
	if st.Of("f").Generation != 1 || st.Specs[1]["a"] != "0" {
		t.Fatalf("f passed generation 1: generation %d, specs %v; want 1 and generation 1's spec", st.Of("f").Generation, st.Specs)
	}
	st.Succeeded(hs, d.Cause, spec, 0, now)
	if st.Handled == nil || st.Handled.Generation != 1 || st.Specs != nil {
		t.Errorf("after g's create: handled %+v, specs %v; want generation 1 handled and no specs", st.Handled, st.Specs)
	}
}
