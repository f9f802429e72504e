package cause

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

var (
	created = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	now     = created.Add(time.Hour)
	started = now.Add(-5 * time.Minute) // the engine's start
)

func handler(name string, on ...string) *definition.Handler {
	return &definition.Handler{Name: name, On: on, Retry: definition.RetryPolicy{MaxAttempts: 3, Initial: time.Second, Max: time.Minute, Factor: 2}}
}

// apply decides as the engine does: the records the decision updated
// take the input state's place.
func apply(in Input) Decision {
	d := Decide(in)
	*in.State = *d.State
	return d
}

func withFields(h *definition.Handler, fields ...string) *definition.Handler {
	h.Fields = fields
	return h
}

func every(h *definition.Handler, d time.Duration) *definition.Handler {
	h.Every = d
	return h
}

// object is a Note at generation g with spec.
func object(g int64, spec map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "notes.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "n", "namespace": "default", "uid": "u-1"},
		"spec":     spec,
	}}
	o.SetGeneration(g)
	o.SetCreationTimestamp(metav1.NewTime(created))
	return o
}

func deleting(o *unstructured.Unstructured) *unstructured.Unstructured {
	t := metav1.NewTime(now)
	o.SetDeletionTimestamp(&t)
	return o
}

// state builds a recorded state: handled at generation g with spec, and
// the handlers' records.
func state(g int64, spec map[string]any, records map[string]*HandlerState) *State {
	st := &State{Handlers: map[string]*HandlerState{}}
	if g > 0 {
		st.Handled = &Handled{Generation: g, Spec: spec}
	}
	for name, r := range records {
		st.Handlers[name] = r
	}
	return st
}

func at(t time.Time) string { return t.Format(time.RFC3339Nano) }

func TestDecide(t *testing.T) {
	v1 := map[string]any{"text": "a", "size": int64(1)}
	v2text := map[string]any{"text": "b", "size": int64(1)}
	v2size := map[string]any{"text": "a", "size": int64(2)}
	for _, tc := range []struct {
		name     string
		handlers []*definition.Handler
		obj      *unstructured.Unstructured
		st       *State
		paused   bool
		// want: "handler trigger attempt", or "" for no run
		want     string
		key      string
		wait     time.Duration
		stalled  string // a substring; "" for none
		diffPath string // a path the cause's diff holds
	}{
		{
			name:     "create: a new object",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(0, nil, nil),
			want: "h create 1", key: "u-1/1/h", diffPath: "spec.text",
		},
		{
			name:     "create: already done for the generation",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1}}),
		},
		{
			name:     "update: a change the handler names",
			handlers: []*definition.Handler{withFields(handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate), "spec.text")},
			obj:      object(2, v2text), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1}}),
			want: "h update 1", key: "u-1/2/h", diffPath: "spec.text",
		},
		{
			name:     "update: a change the handler does not name passes it",
			handlers: []*definition.Handler{withFields(handler("h", v1alpha1.OnUpdate), "spec.text")},
			obj:      object(2, v2size), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1}}),
		},
		{
			name:     "update: not a trigger of a create-only handler",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate)},
			obj:      object(2, v2text), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1}}),
		},
		{
			name:     "delete: once",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate, v1alpha1.OnDelete)},
			obj:      deleting(object(1, v1)), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1}}),
			want: "h delete 1", key: "u-1/1/h",
		},
		{
			name:     "delete: done",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnDelete)},
			obj:      deleting(object(1, v1)), st: state(1, v1, map[string]*HandlerState{"h": {Deleted: true}}),
		},
		{
			name:     "delete: before a pending update",
			handlers: []*definition.Handler{handler("u", v1alpha1.OnUpdate), handler("d", v1alpha1.OnDelete)},
			obj:      deleting(object(2, v2text)), st: state(1, v1, map[string]*HandlerState{"u": {Generation: 1}}),
			want: "d delete 1",
		},
		{
			name:     "resume: an object the engine finds at start",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnResume)},
			obj:      object(1, v1), st: state(1, v1, nil),
			want: "h resume 1", key: "u-1/1/h/resume/" + itoa(started.Unix()),
		},
		{
			name:     "resume: not for a new object",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnResume)},
			obj:      object(1, v1), st: state(0, nil, nil),
		},
		{
			name:     "resume: only once per start",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnResume)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {Resumed: at(started)}}),
		},
		{
			name:     "schedule: the slot is due",
			handlers: []*definition.Handler{every(handler("h", v1alpha1.OnSchedule), time.Minute)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {LastScheduled: at(now.Add(-time.Minute))}}),
			want: "h schedule 1", key: "u-1/1/h/" + itoa(now.Unix()),
		},
		{
			name:     "schedule: the latest slot due, after downtime, keyed by the slot",
			handlers: []*definition.Handler{every(handler("h", v1alpha1.OnSchedule), time.Minute)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {LastScheduled: at(now.Add(-150 * time.Second))}}),
			want: "h schedule 1", key: "u-1/1/h/" + itoa(now.Add(-30*time.Second).Unix()),
		},
		{
			name:     "schedule: waits for the next slot",
			handlers: []*definition.Handler{every(handler("h", v1alpha1.OnSchedule), time.Minute)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {LastScheduled: at(now.Add(-20 * time.Second))}}),
			wait: 40 * time.Second,
		},
		{
			name:     "schedule: counts from the creation at first",
			handlers: []*definition.Handler{every(handler("h", v1alpha1.OnSchedule), 2*time.Hour)},
			obj:      object(1, v1), st: state(1, v1, nil),
			wait: time.Hour,
		},
		{
			name:     "schedule: never starves a create",
			handlers: []*definition.Handler{every(handler("s", v1alpha1.OnSchedule), time.Second), handler("c", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(0, nil, map[string]*HandlerState{"s": {LastScheduled: at(now.Add(-time.Minute))}}),
			want: "c create 1",
		},
		{
			name:     "requeue: due",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1, RequeueAt: at(now.Add(-time.Second))}}),
			want: "h requeue 1", key: "u-1/1/h/requeue/" + itoa(now.Add(-time.Second).Unix()),
		},
		{
			name:     "requeue: not yet",
			handlers: []*definition.Handler{handler("h", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(1, v1, map[string]*HandlerState{"h": {Generation: 1, RequeueAt: at(now.Add(30 * time.Second))}}),
			wait: 30 * time.Second,
		},
		{
			name:     "retry: waits for its time, and holds back later handlers",
			handlers: []*definition.Handler{handler("a", v1alpha1.OnCreate), handler("b", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(0, nil, map[string]*HandlerState{"a": {Attempt: 1, Target: 1, NextRetryAt: at(now.Add(5 * time.Second))}}),
			wait: 5 * time.Second,
		},
		{
			name:     "retry: due, the next attempt with the same key",
			handlers: []*definition.Handler{handler("a", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(0, nil, map[string]*HandlerState{"a": {Attempt: 2, Target: 1, NextRetryAt: at(now.Add(-time.Second))}}),
			want: "a create 3", key: "u-1/1/a",
		},
		{
			name:     "retry: a new generation starts afresh",
			handlers: []*definition.Handler{handler("a", v1alpha1.OnCreate, v1alpha1.OnUpdate)},
			obj:      object(2, v2text), st: state(1, v1, map[string]*HandlerState{"a": {Generation: 1, Attempt: 2, Target: 1, NextRetryAt: at(now.Add(time.Hour))}}),
			want: "a update 1", key: "u-1/2/a",
		},
		{
			name:     "stalled: gave up on the generation",
			handlers: []*definition.Handler{handler("a", v1alpha1.OnCreate)},
			obj:      object(1, v1), st: state(0, nil, map[string]*HandlerState{"a": {Attempt: 3, Target: 1, Stalled: true, LastError: "boom"}}),
			stalled: "handler a gave up after 3 attempts: boom",
		},
		{
			name:     "paused: nothing runs, the stall is still told",
			handlers: []*definition.Handler{handler("a", v1alpha1.OnCreate, v1alpha1.OnUpdate), handler("b", v1alpha1.OnCreate)},
			obj:      object(2, v2text), st: state(1, v1, map[string]*HandlerState{"a": {Generation: 1}, "b": {Attempt: 3, Target: 2, Stalled: true, LastError: "boom"}}), paused: true,
			stalled: "handler b gave up",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := apply(Input{Handlers: tc.handlers, Object: tc.obj, State: tc.st, Paused: tc.paused, Now: now, Started: started})
			got := ""
			if d.Cause != nil {
				got = d.Cause.Handler.Name + " " + d.Cause.Trigger + " " + itoa(int64(d.Cause.Attempt))
			}
			if got != tc.want {
				t.Fatalf("Decide = %q; want %q (decision %+v)", got, tc.want, d)
			}
			if tc.key != "" && d.Cause.Key != tc.key {
				t.Errorf("key = %q; want %q", d.Cause.Key, tc.key)
			}
			if d.Cause == nil && d.Wait != tc.wait {
				t.Errorf("wait = %s; want %s", d.Wait, tc.wait)
			}
			if (tc.stalled == "") != (d.Stalled == "") || !strings.Contains(d.Stalled, tc.stalled) {
				t.Errorf("stalled = %q; want %q", d.Stalled, tc.stalled)
			}
			if tc.diffPath != "" && !slices.Contains(Paths(d.Cause.Diff), tc.diffPath) {
				t.Errorf("diff %v lacks %s", Paths(d.Cause.Diff), tc.diffPath)
			}
		})
	}
}

func TestAChangeAHandlerDoesNotNameIsPassedWithoutARun(t *testing.T) {
	h := withFields(handler("h", v1alpha1.OnUpdate), "spec.text")
	st := state(1, map[string]any{"text": "a", "size": int64(1)}, map[string]*HandlerState{"h": {Generation: 1}})
	d := apply(Input{Handlers: []*definition.Handler{h}, Object: object(2, map[string]any{"text": "a", "size": int64(2)}), State: st, Now: now})
	if d.Cause != nil {
		t.Fatalf("a run of %s", d.Cause.Handler.Name)
	}
	if st.Of("h").Generation != 2 {
		t.Errorf("the handler's generation is %d; want 2, passed", st.Of("h").Generation)
	}
	st.AdvanceHandled([]*definition.Handler{h}, 2, map[string]any{"text": "a", "size": int64(2)})
	if st.Handled.Generation != 2 {
		t.Errorf("handled at %d; want 2", st.Handled.Generation)
	}
}

func TestOutcomesUpdateTheRecord(t *testing.T) {
	h := handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate)
	hs := []*definition.Handler{h}
	c := &Cause{Handler: h, Trigger: v1alpha1.OnCreate, Generation: 1, Attempt: 1, Due: now}
	st := state(0, nil, nil)
	spec := map[string]any{"text": "a"}

	gaveUp, retryAt := st.Failed(c, "boom", false, now)
	if gaveUp || !retryAt.Equal(now.Add(time.Second)) {
		t.Fatalf("Failed = %v, %s; want a retry at %s", gaveUp, retryAt, now.Add(time.Second))
	}
	if r := st.Of("h"); r.Attempt != 1 || r.Target != 1 || r.LastError != "boom" {
		t.Errorf("after a failure: %+v", r)
	}
	c.Attempt = 3
	if gaveUp, _ := st.Failed(c, "boom", false, now); !gaveUp || !st.Of("h").Stalled {
		t.Errorf("the last attempt failed: gave up %v, stalled %v; want both", gaveUp, st.Of("h").Stalled)
	}
	c.Attempt = 1
	if gaveUp, _ := st.Failed(c, "bad input", true, now); !gaveUp {
		t.Error("a permanent failure did not give up")
	}

	st.Succeeded(hs, c, spec, 10*time.Second, now)
	r := st.Of("h")
	if r.Attempt != 0 || r.Stalled || r.LastError != "" || r.Generation != 1 {
		t.Errorf("after a success: %+v", r)
	}
	if r.RequeueAt != at(now.Add(10*time.Second)) {
		t.Errorf("requeueAt = %q; want %q", r.RequeueAt, at(now.Add(10*time.Second)))
	}
	if st.Handled == nil || st.Handled.Generation != 1 || st.Handled.Spec["text"] != "a" {
		t.Errorf("handled = %+v; want generation 1 with the run's spec", st.Handled)
	}

	del := &Cause{Handler: h, Trigger: v1alpha1.OnDelete, Generation: 1, Attempt: 1, Due: now}
	st.Succeeded(hs, del, spec, 10*time.Second, now)
	if r := st.Of("h"); !r.Deleted || r.RequeueAt != "" {
		t.Errorf("after a delete run: %+v; want deleted, no requeue", r)
	}

	sched := &Cause{Handler: h, Trigger: v1alpha1.OnSchedule, Generation: 1, Attempt: 1, Due: now}
	st.Succeeded(hs, sched, spec, 0, now.Add(time.Minute))
	if r := st.Of("h"); r.LastScheduled != at(now) {
		t.Errorf("lastScheduled = %q; want the slot's due time %q", r.LastScheduled, at(now))
	}
}

// TestEveryFieldOfStateRoundTripsThroughStatus sets every field of
// State and writes it to status.opkit: each comes back from Read. A field
// that WriteTo left out was forgotten at every engine start (the pause
// recorded, which made each start record the pause again).
func TestEveryFieldOfStateRoundTripsThroughStatus(t *testing.T) {
	st := &State{
		Handlers:     map[string]*HandlerState{"h": {Generation: 2}},
		Handled:      &Handled{Generation: 2, Spec: map[string]any{"text": "a"}},
		Specs:        map[int64]map[string]any{3: {"text": "b"}},
		LastRun:      &LastRun{ID: "r1", Handler: "h", Trigger: "update", Outcome: "Succeeded", Attempt: 1},
		Observed:     &Observed{Generation: 1, Hash: "h1"},
		EnterRun:     &EnterRun{Seq: 1, Handler: "h", Outcome: "Succeeded"},
		RetrySeen:    "retry-1",
		RerunSeen:    "rerun-1",
		Paused:       "v:paused-by-jane",
		PauseRecords: 3,
		Trace:        &Trace{Seen: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	v := reflect.ValueOf(st).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test sets no %s: set every field of State", v.Type().Field(i).Name)
		}
	}
	own := map[string]any{}
	st.WriteTo(own)
	obj := object(2, nil)
	obj.Object["status"] = map[string]any{"opkit": own}
	back := Read(obj)
	want, _ := json.Marshal(st)
	got, _ := json.Marshal(back)
	if string(got) != string(want) {
		t.Errorf("read back from status.opkit\n%s\nwant what was written\n%s", got, want)
	}
}

func TestStateRoundTripsThroughStatus(t *testing.T) {
	st := state(2, map[string]any{"text": "a"}, map[string]*HandlerState{"h": {Generation: 2}, "empty": {}})
	st.LastRun = &LastRun{ID: "r1", Handler: "h", Trigger: "update", Outcome: "Succeeded", Attempt: 1}
	st.Specs = map[int64]map[string]any{3: {"text": "b"}}
	own := map[string]any{"children": []any{}}
	st.WriteTo(own)
	if _, ok := own["children"]; !ok {
		t.Error("WriteTo dropped a key it does not own")
	}
	obj := object(2, nil)
	obj.Object["status"] = map[string]any{"opkit": own}
	back := Read(obj)
	if back.Handled.Generation != 2 || back.Of("h").Generation != 2 || back.LastRun.ID != "r1" {
		t.Errorf("read back %+v", back)
	}
	if back.Specs[3]["text"] != "b" {
		t.Errorf("specs read back %v; want generation 3's", back.Specs)
	}
	if _, ok := back.Handlers["empty"]; ok {
		t.Error("an empty handler record was written")
	}
	clone := back.Clone()
	clone.Of("h").Generation = 9
	if back.Of("h").Generation != 2 {
		t.Error("Clone shares records")
	}
}

// Clone copies every part a step may change, and nothing else differs.
func TestCloneIsDeepAndWhole(t *testing.T) {
	st := &State{
		Handlers:  map[string]*HandlerState{"h": {Generation: 2, Attempt: 1, LastError: "boom"}},
		Handled:   &Handled{Generation: 2, Spec: map[string]any{"list": []any{map[string]any{"a": int64(1)}}, "n": int64(1) << 60}},
		Specs:     map[int64]map[string]any{3: {"text": "b"}},
		LastRun:   &LastRun{ID: "r1", Handler: "h", Trigger: "update", Outcome: "Failed", Attempt: 1},
		Observed:  &Observed{Generation: 4, Hash: "x"},
		EnterRun:  &EnterRun{Seq: 2, Handler: "h", Outcome: "Succeeded"},
		RetrySeen: "1", RerunSeen: "2", Paused: "v:yes",
	}
	want, _ := json.Marshal(st)
	c := st.Clone()
	if got, _ := json.Marshal(c); string(got) != string(want) {
		t.Fatalf("Clone is\n%s\nwant\n%s", got, want)
	}
	if c.Handled.Spec["n"] != int64(1)<<60 {
		t.Errorf("Clone changed a spec value's type or value: %#v", c.Handled.Spec["n"])
	}
	c.Handlers["h"].Attempt = 5
	c.Handled.Spec["list"].([]any)[0].(map[string]any)["a"] = int64(2)
	c.Specs[3]["text"] = "c"
	c.LastRun.Outcome, c.Observed.Generation, c.EnterRun.Seq = "Succeeded", 5, 3
	if got, _ := json.Marshal(st); string(got) != string(want) {
		t.Errorf("changing the clone changed the state:\n%s\nwas\n%s", got, want)
	}
	if empty := (&State{}).Clone(); empty.Handlers == nil {
		t.Error("the clone of an empty state has no handler map")
	}
}

func TestDiff(t *testing.T) {
	before := map[string]any{"a": int64(1), "m": map[string]any{"x": "1", "y": "2"}, "gone": true}
	after := map[string]any{"a": float64(1), "m": map[string]any{"x": "1", "y": "3"}, "new": "v"}
	got := Paths(Diff(before, after))
	want := []string{"spec.gone", "spec.m.y", "spec.new"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Diff paths = %v; want %v (a number is compared by value)", got, want)
	}
	if d := Diff(nil, nil); len(d) != 0 {
		t.Errorf("Diff(nil, nil) = %v", d)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestAChangeOfARelatedFieldTheHandlerNamesIsAnUpdate(t *testing.T) {
	h := handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate)
	h.RelatedFields = []definition.RelatedField{{Source: "related.app.spec.image", ID: "app", Path: []any{"spec", "image"}}}
	hs := []*definition.Handler{h}
	spec := map[string]any{"text": "a"}
	app := func(image string, replicas int64) map[string]any {
		return map[string]any{"app": map[string]any{"spec": map[string]any{"image": image, "replicas": replicas}}}
	}
	decide := func(st *State, related map[string]any) Decision {
		return apply(Input{Handlers: hs, Object: object(1, spec), State: st, Now: now, Related: related})
	}

	// Created: the run records the inputs it saw.
	st := state(0, nil, nil)
	d := decide(st, app("nginx:1", 1))
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnCreate || d.Cause.Key != "u-1/1/h" {
		t.Fatalf("create: %+v", d.Cause)
	}
	st.Succeeded(hs, d.Cause, spec, 0, now)

	// Scaled: a field the handler does not name. Nothing runs.
	if d := decide(st, app("nginx:1", 3)); d.Cause != nil {
		t.Fatalf("scaling ran %s %s", d.Cause.Handler.Name, d.Cause.Trigger)
	}
	// The image changed: an update, with a key of its own.
	d = decide(st, app("nginx:2", 3))
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnUpdate || !strings.HasPrefix(d.Cause.Key, "u-1/1/h/inputs/") {
		t.Fatalf("image change: %+v", d.Cause)
	}
	key := d.Cause.Key
	// It fails: the retry keeps the key and counts the attempt.
	st.Failed(d.Cause, "boom", false, now.Add(-time.Hour))
	d = decide(st, app("nginx:2", 3))
	if d.Cause == nil || d.Cause.Key != key || d.Cause.Attempt != 2 {
		t.Fatalf("retry: %+v; want key %s attempt 2", d.Cause, key)
	}
	st.Succeeded(hs, d.Cause, spec, 0, now)
	// Done: once.
	if d := decide(st, app("nginx:2", 3)); d.Cause != nil {
		t.Errorf("ran again for the same image: %+v", d.Cause)
	}
	// The related objects could not be read: not a change.
	if d := decide(st, nil); d.Cause != nil || st.Of("h").Inputs == "" {
		t.Errorf("a read error ran %+v (inputs %q); want nothing, the inputs kept", d.Cause, st.Of("h").Inputs)
	}
	// A handler that names no related field has no inputs; one whose record
	// predates them takes the current ones as its start, without a run.
	if Inputs(handler("plain", v1alpha1.OnUpdate), app("x", 1)) != "" {
		t.Error("a handler naming no related field has inputs")
	}
	old := state(1, spec, map[string]*HandlerState{"h": {Generation: 1}})
	if d := decide(old, app("nginx:9", 1)); d.Cause != nil || old.Of("h").Inputs == "" {
		t.Errorf("first sight of the inputs: cause %+v, inputs %q; want none and recorded", d.Cause, old.Of("h").Inputs)
	}
}

func TestWhenFiresOncePerTransitionToTrue(t *testing.T) {
	h := handler("ready", v1alpha1.OnWhen)
	hs := []*definition.Handler{h}
	spec := map[string]any{"text": "a"}
	st := state(1, spec, nil)
	decide := func(when map[string]bool) Decision {
		return apply(Input{Handlers: hs, Object: object(1, spec), State: st, Now: now, When: when})
	}
	if d := decide(map[string]bool{"ready": false}); d.Cause != nil {
		t.Fatalf("false ran %+v", d.Cause)
	}
	// Unknown (what it reads does not exist yet): nothing.
	if d := decide(nil); d.Cause != nil {
		t.Fatalf("unknown ran %+v", d.Cause)
	}
	// Became true: one run, key /when/1. Until it succeeds, the same key
	// (also after a restart: the record is in status).
	d := decide(map[string]bool{"ready": true})
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnWhen || d.Cause.Key != "u-1/1/ready/when/1" {
		t.Fatalf("became true: %+v", d.Cause)
	}
	if again := decide(map[string]bool{"ready": true}); again.Cause == nil || again.Cause.Key != d.Cause.Key {
		t.Fatalf("before its success: %+v; want the same key", again.Cause)
	}
	st.Succeeded(hs, d.Cause, spec, 0, now)
	// Still true: done.
	if d := decide(map[string]bool{"ready": true}); d.Cause != nil {
		t.Fatalf("still true ran %+v", d.Cause)
	}
	// False, then true again: the second transition, key /when/2.
	if d := decide(map[string]bool{"ready": false}); d.Cause != nil || st.Of("ready").WhenTrue {
		t.Fatalf("false: %+v, recorded %v", d.Cause, st.Of("ready").WhenTrue)
	}
	d = decide(map[string]bool{"ready": true})
	if d.Cause == nil || d.Cause.Key != "u-1/1/ready/when/2" {
		t.Fatalf("second transition: %+v", d.Cause)
	}
}

// TestWhenSeenFalseWhileAnotherTriggerRunsFiresWhenItTurnsTrue: a handler
// on update and when, whose update fires while its condition is false (a
// new image, its rollout not done) and whose condition turns true during
// that run: the turn is a transition, though no decision saw it happen.
func TestWhenSeenFalseWhileAnotherTriggerRunsFiresWhenItTurnsTrue(t *testing.T) {
	h := handler("notify", v1alpha1.OnUpdate, v1alpha1.OnWhen)
	hs := []*definition.Handler{h}
	spec := map[string]any{"image": "a"}
	// The last rollout was told: its condition is recorded true.
	st := state(1, spec, map[string]*HandlerState{"notify": {Generation: 1, WhenTrue: true, WhenCount: 1}})
	next := map[string]any{"image": "b"}
	d := apply(Input{Handlers: hs, Object: object(2, next), State: st, Now: now, When: map[string]bool{"notify": false}})
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnUpdate {
		t.Fatalf("the new generation: %+v, want an update", d.Cause)
	}
	if st.Of("notify").WhenTrue {
		t.Fatal("the condition, false while the update was decided, is still recorded true")
	}
	st.Succeeded(hs, d.Cause, next, 0, now)
	d = apply(Input{Handlers: hs, Object: object(2, next), State: st, Now: now, When: map[string]bool{"notify": true}})
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnWhen || d.Cause.Key != "u-1/2/notify/when/2" {
		t.Fatalf("turned true during the update's run: %+v, want the when run of the second transition", d.Cause)
	}
}

// Decide returns the records it updates and leaves its input as it was:
// a decision is a value, which its caller keeps or drops.
func TestDecideLeavesItsInputStateAsItWas(t *testing.T) {
	h := withFields(handler("h", v1alpha1.OnUpdate), "spec.text")
	r := handler("r", v1alpha1.OnResume)
	w := handler("w", v1alpha1.OnWhen)
	hs := []*definition.Handler{h, r, w}
	for _, tc := range []struct {
		name string
		st   *State
		when map[string]bool
		want func(*State) bool
	}{
		{"a change the handler does not name is passed", state(1, map[string]any{"text": "a", "size": int64(1)}, map[string]*HandlerState{"h": {Generation: 1}}), nil,
			func(st *State) bool { return st.Of("h").Generation == 2 }},
		{"a resume handler of an object not handled yet is marked", state(0, nil, nil), nil,
			func(st *State) bool { return st.Of("r").Resumed != "" }},
		{"a when condition seen false is recorded", state(1, map[string]any{"text": "a", "size": int64(1)}, map[string]*HandlerState{"h": {Generation: 2}, "w": {WhenTrue: true}}), map[string]bool{"w": false},
			func(st *State) bool { return !st.Of("w").WhenTrue }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := json.Marshal(tc.st)
			d := Decide(Input{Handlers: hs, Object: object(2, map[string]any{"text": "a", "size": int64(2)}), State: tc.st, Now: now, Started: started, When: tc.when})
			if after, _ := json.Marshal(tc.st); string(after) != string(before) {
				t.Fatalf("Decide changed its input state:\n%s\nwas\n%s", after, before)
			}
			if !tc.want(d.State) {
				data, _ := json.Marshal(d.State)
				t.Fatalf("the decision's state lacks the update: %s", data)
			}
		})
	}
}
