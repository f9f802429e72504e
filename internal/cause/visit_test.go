package cause

import (
	"fmt"
	"slices"
	"testing"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// TestDecideVisits: handlers on exit and enter run once per transition,
// exits of the state left first, each keyed by the visit.
func TestDecideVisits(t *testing.T) {
	spec := map[string]any{"version": "1.0"}
	leave := handler("leave", v1alpha1.OnExit)
	announce := handler("announce", v1alpha1.OnEnter)
	both := handler("both", v1alpha1.OnEnter, v1alpha1.OnExit)
	create := handler("create", v1alpha1.OnCreate)
	ready := &definition.State{Name: "Ready", Exit: []*definition.Handler{leave, both}, Enter: []*definition.Handler{announce}}
	upgrading := &definition.State{Name: "Upgrading", Enter: []*definition.Handler{announce, both}}
	handlers := []*definition.Handler{create, announce, both, leave}
	done := func(g int64) *HandlerState { return &HandlerState{Generation: g} }
	for _, tc := range []struct {
		name  string
		visit *Visit
		st    *State
		want  string // "handler trigger attempt key", or "" for no run
		done  bool   // Visit.Awaited is empty
	}{
		{
			name:  "the initial state's enter handlers run after create handlers",
			visit: &Visit{Seq: 1, State: ready},
			st:    state(0, nil, nil),
			want:  "create create 1 u-1/1/create",
		},
		{
			name:  "the initial state's enter handler, once create is done",
			visit: &Visit{Seq: 1, State: ready},
			st:    state(1, spec, map[string]*HandlerState{"create": done(1)}),
			want:  "announce enter 1 u-1/state/1/announce",
		},
		{
			name:  "entered: nothing more for the visit",
			visit: &Visit{Seq: 1, State: ready},
			st:    state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}}),
			done:  true,
		},
		{
			name:  "a transition: the state left's exit handlers first, in declared order",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st:    state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}}),
			want:  "both exit 1 u-1/state/2/both/exit",
		},
		{
			name:  "then the other exit handler",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st:    state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}, "both": {Exited: 2}}),
			want:  "leave exit 1 u-1/state/2/leave/exit",
		},
		{
			name:  "no enter run while an exit handler waits for its retry",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st: state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}, "both": {Exited: 2},
				"leave": {Attempt: 1, Target: 1, TargetSeq: 2, NextRetryAt: at(now.Add(30e9))}}),
		},
		{
			name:  "the exit handler's retry counts its attempts for the visit",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st: state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}, "both": {Exited: 2},
				"leave": {Attempt: 1, Target: 1, TargetSeq: 2, NextRetryAt: at(now.Add(-1))}}),
			want: "leave exit 2 u-1/state/2/leave/exit",
		},
		{
			name:  "exits done: the enter handlers of the state entered",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st:    state(1, spec, map[string]*HandlerState{"create": done(1), "announce": {Entered: 1}, "both": {Exited: 2}, "leave": {Exited: 2}}),
			want:  "announce enter 1 u-1/state/2/announce",
		},
		{
			name:  "a handler that gave up on an earlier visit runs on this one, afresh",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st: state(1, spec, map[string]*HandlerState{"create": done(1), "both": {Exited: 2}, "leave": {Exited: 2},
				"announce": {Entered: 1, Attempt: 3, Target: 1, TargetSeq: 1, Stalled: true}}),
			want: "announce enter 1 u-1/state/2/announce",
		},
		{
			name:  "every exit and enter run of the visit done (one gave up: it is done with)",
			visit: &Visit{Seq: 2, State: upgrading, Left: ready},
			st: state(1, spec, map[string]*HandlerState{"create": done(1), "both": {Exited: 2, Entered: 2}, "leave": {Exited: 2},
				"announce": {Entered: 2, Attempt: 3, Target: 1, TargetSeq: 2, Stalled: true}}),
			done: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := apply(Input{Handlers: handlers, Object: object(1, spec), State: tc.st, Now: now, Started: started, Visit: tc.visit})
			got := ""
			if c := d.Cause; c != nil {
				got = fmt.Sprintf("%s %s %d %s", c.Handler.Name, c.Trigger, c.Attempt, c.Key)
				if visit := c.Trigger == v1alpha1.OnEnter || c.Trigger == v1alpha1.OnExit; visit && c.Seq != tc.visit.Seq {
					t.Errorf("cause for visit %d, want %d", c.Seq, tc.visit.Seq)
				}
			}
			if got != tc.want {
				t.Errorf("Decide: %q, want %q", got, tc.want)
			}
			if awaited := tc.visit.Awaited(tc.st, 1); (len(awaited) == 0) != tc.done {
				t.Errorf("Awaited: %q, want done %v", awaited, tc.done)
			}
		})
	}
}

// TestVisitRecords: a finished enter or exit run records its visit
// (restart-safe: the record is in status.opkit), and the last enter run is
// what guards read as run.
func TestVisitRecords(t *testing.T) {
	announce := handler("announce", v1alpha1.OnEnter)
	leave := handler("leave", v1alpha1.OnExit)
	st := state(1, nil, nil)
	v := &Visit{Seq: 4, State: &definition.State{Name: "Ready", Enter: []*definition.Handler{announce}}, Left: &definition.State{Name: "Upgrading", Exit: []*definition.Handler{leave}}}
	if r := v.Run(st); r != (definition.Run{}) {
		t.Errorf("run before any enter run: %+v, want the zero Run", r)
	}
	st.Succeeded(nil, &Cause{Handler: leave, Trigger: v1alpha1.OnExit, Generation: 1, Seq: 4}, nil, 0, now)
	if st.Of("leave").Exited != 4 || st.EnterRun != nil {
		t.Errorf("after the exit run: %+v, enter run %+v; want exited 4 and no enter run", st.Of("leave"), st.EnterRun)
	}
	// An enter run fails, then gives up: done with, its error for guards.
	c := &Cause{Handler: announce, Trigger: v1alpha1.OnEnter, Generation: 1, Seq: 4, Attempt: 1}
	if gaveUp, _ := st.Failed(c, "exit status 1", false, now); gaveUp || st.Of("announce").Entered != 0 {
		t.Fatalf("first failure: gave up %v, record %+v; want a retry, not entered", gaveUp, st.Of("announce"))
	}
	c.Attempt = 3
	if gaveUp, _ := st.Failed(c, "exit status 1", false, now); !gaveUp || st.Of("announce").Entered != 4 {
		t.Fatalf("last failure: gave up %v, record %+v; want given up, entered 4", gaveUp, st.Of("announce"))
	}
	if r := v.Run(st); r != (definition.Run{Handler: "announce", Outcome: "GaveUp", Error: "exit status 1"}) {
		t.Errorf("run after it gave up: %+v", r)
	}
	if awaited := v.Awaited(st, 1); len(awaited) > 0 {
		t.Errorf("the visit awaits %q after the exit succeeded and the enter gave up", awaited)
	}
	// Written to status.opkit and read back, as after a restart.
	own := map[string]any{}
	st.WriteTo(own)
	obj := object(1, nil)
	obj.Object["status"] = map[string]any{"opkit": own}
	back := Read(obj)
	if len(v.Awaited(back, 1)) > 0 || v.Run(back).Outcome != "GaveUp" {
		t.Errorf("read back from status: %+v (enter run %+v): the visit's records are lost", back.Handlers, back.EnterRun)
	}
	// The next visit reads no run until one finishes for it.
	if r := (&Visit{Seq: 5}).Run(back); r != (definition.Run{}) {
		t.Errorf("run on the next visit: %+v, want the zero Run", r)
	}
}

// TestDecideGivenUpHoldsBackNoVisit: a handler that gave up, or waits for
// a retry, holds back the handlers declared after it, but not the exit
// and enter runs of the object's visit of its state: the state machine
// moved on, and what the visit's runs wait for is each other. A handler
// that gave up on the generation by another trigger makes no visit run
// and is not awaited (a person's decision is not held by it); one that
// waits for a retry of another trigger is awaited, and says so.
func TestDecideGivenUpHoldsBackNoVisit(t *testing.T) {
	spec := map[string]any{"version": "1.0"}
	work := handler("work", v1alpha1.OnEnter)
	prepare := handler("prepare", v1alpha1.OnCreate)
	later := handler("later", v1alpha1.OnCreate)
	page := handler("page", v1alpha1.OnEnter)
	both := handler("both", v1alpha1.OnCreate, v1alpha1.OnEnter)
	working := &definition.State{Name: "Working", Enter: []*definition.Handler{work}}
	stuck := &definition.State{Name: "Stuck", NeedsPerson: true, Enter: []*definition.Handler{both, page}}
	handlers := []*definition.Handler{work, prepare, later, both, page}
	gaveUp := &HandlerState{Attempt: 1, Target: 1, Stalled: true, LastError: "exit status 1"}
	retrying := &HandlerState{Attempt: 1, Target: 1, NextRetryAt: at(now.Add(30e9)), LastError: "exit status 1"}
	workGaveUp := &HandlerState{Entered: 1, Attempt: 1, Target: 1, TargetSeq: 1, Stalled: true}
	visit := &Visit{Seq: 2, State: stuck, Left: working}
	for _, tc := range []struct {
		name    string
		st      *State
		want    string   // "handler trigger", or "" for no run
		awaited []string // Visit.Awaited
		stalled bool     // Decision.Stalled is said
	}{
		{
			name:    "a create handler that gave up holds back the later create handler, not the enter runs of the state entered",
			st:      state(0, nil, map[string]*HandlerState{"work": workGaveUp, "prepare": gaveUp, "both": {Generation: 1, Entered: 2}}),
			want:    "page enter",
			awaited: []string{"page (on entering Stuck)"},
			stalled: true,
		},
		{
			name:    "nor does one that waits for its retry",
			st:      state(0, nil, map[string]*HandlerState{"work": workGaveUp, "prepare": retrying, "both": {Generation: 1, Entered: 2}}),
			want:    "page enter",
			awaited: []string{"page (on entering Stuck)"},
		},
		{
			name:    "a handler that gave up on create makes no enter run, and the visit does not wait for it",
			st:      state(0, nil, map[string]*HandlerState{"work": workGaveUp, "prepare": {Generation: 1}, "later": {Generation: 1}, "both": gaveUp}),
			want:    "page enter",
			awaited: []string{"page (on entering Stuck)"},
			stalled: true,
		},
		{
			name: "a handler that waits for its create retry enters after it, and the visit waits for it, saying why",
			st:   state(0, nil, map[string]*HandlerState{"work": workGaveUp, "prepare": {Generation: 1}, "later": {Generation: 1}, "both": retrying}),
			want: "page enter",
			awaited: []string{"both (on entering Stuck; attempt 1 failed: exit status 1; tried again at 2026-11-23T11:00:30Z)",
				"page (on entering Stuck)"},
		},
		{
			name:    "the state entered's handlers done, one that gave up on create left given up: nothing to wait for",
			st:      state(0, nil, map[string]*HandlerState{"work": workGaveUp, "prepare": gaveUp, "both": gaveUp, "page": {Entered: 2}}),
			stalled: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := apply(Input{Handlers: handlers, Object: object(1, spec), State: tc.st, Now: now, Started: started, Visit: visit})
			got := ""
			if c := d.Cause; c != nil {
				got = c.Handler.Name + " " + c.Trigger
			}
			if got != tc.want {
				t.Errorf("Decide: %q, want %q", got, tc.want)
			}
			if (d.Stalled != "") != tc.stalled {
				t.Errorf("Stalled: %q, want said %v", d.Stalled, tc.stalled)
			}
			if awaited := visit.Awaited(tc.st, 1); !slices.Equal(awaited, tc.awaited) {
				t.Errorf("Awaited: %q, want %q", awaited, tc.awaited)
			}
		})
	}
}
