// Package cause decides which handler of an operator has a run to make for
// an object, and why: a pure function of the object, the handler state its
// status records (State), when the engine started, and the time. It reads
// no clock and performs no I/O, so every trigger is table-tested without a
// cluster; the engine does the rest (the archive's "already succeeded"
// check, the run, the writes).
//
// Triggers come from state, never from watch events: a handler runs on
// create when it never succeeded for the object, on update when it
// succeeded for an older generation whose change touches its fields, on
// delete once, on resume once per engine start for an object handled
// before it (each resume handler's record says which start it ran for), on
// schedule when a slot is due, on when each time its condition becomes
// true (recorded, so a transition made while the engine was down runs once
// after it starts), and again when its last success asked for it
// (requeueAfter). A handler that failed waits for its retry time; one
// that gave up (Stalled) waits for a new generation or opkit retry.
//
// A watched object (an operator's spec.watch) has no status of opkit's:
// its State lives in the run archive, its generation is the count of the
// changes of its Projection and of its deletion (Observe), what create and
// update are about is that projection (Input.Subject), and its keys name
// the life in which it was seen (Observed.Since). Decide is the same
// function for both.
//
// A run's idempotency key is the object's uid, the generation and the
// handler, plus the slot for periodic runs, a hash of the related fields
// for an update caused by them (related.<id>... in fields), and the
// transition's number for a when run: the same change, retried or
// interrupted, keeps its key.
//
// For an Operator that declares states, Input.Visit is the object's visit
// of its current state (status.state): the exit handlers of the state left
// run once for it, then the enter handlers of the state entered, each in
// declared order; their records (HandlerState.Exited, Entered) hold the
// visit's seq once the run succeeded or gave up, so a restart runs none
// twice, and a failure is retried for the visit it happened in. A handler
// that failed or gave up for another trigger does not hold them back: the
// state machine has moved on, and a person's decision waits for the
// visit's runs (Visit.Awaited), never for a handler that gave up. Their key
// is <uid>/state/<seq>/<handler> (and /exit for an exit run, so a handler
// on both keeps two).
package cause

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Input is what Decide decides from.
type Input struct {
	// Handlers are the operator's, in declaration order.
	Handlers []*definition.Handler
	// Object is the object as the engine reads it now.
	Object *unstructured.Unstructured
	// State is the object's recorded handler state. Decide only reads it:
	// the records it updates come back in Decision.State.
	State *State
	// Paused: handlers are paused for the object; none runs.
	Paused bool
	// Related are the object's related objects (definition.Vars.Related):
	// a change of the fields a handler names is an update for it. Nil when
	// they could not be read: no run is then decided from them (a read
	// error is not a change).
	Related map[string]any
	// When holds each when-handler's condition now, by handler name;
	// a handler whose condition cannot be known (it reads what does not
	// exist yet) is absent, and nothing changes for it.
	When map[string]bool
	// Subject is what create and update are about: nil for the object's
	// spec; for a watched object, its Projection (whose paths start at the
	// object's root), and Object's generation is then its Observe count.
	Subject map[string]any
	// Now is the time of the decision.
	Now time.Time
	// Started is when the engine started: a resume run's key names it,
	// one resume per start and handler.
	Started time.Time
	// Visit is the object's visit of its current state; nil for an
	// Operator without states.
	Visit *Visit
}

// Visit is a stay of an object in one state: status.state.
type Visit struct {
	// Seq is status.state.seq: the transition that began the visit.
	Seq int64
	// State is the state the object is in; Left is the state it left to
	// enter it, nil for the initial state's visit.
	State, Left *definition.State
}

// VisitOf is the Visit of the status.state cur under machine m;
// nil without states or a state.
func VisitOf(m *definition.StateMachine, cur *v1alpha1.ObjectState) *Visit {
	if m == nil || cur == nil {
		return nil
	}
	v := &Visit{Seq: cur.Seq, State: m.State(cur.Name)}
	if cur.Seq > 1 && cur.From != "" {
		v.Left = m.State(cur.From)
	}
	return v
}

// exits reports whether h runs on leaving the state left for v.
func (v *Visit) exits(h *definition.Handler) bool {
	return v.Left != nil && h.Fires(v1alpha1.OnExit) && slices.Contains(v.Left.Exit, h)
}

// enters reports whether h runs on entering v's state.
func (v *Visit) enters(h *definition.Handler) bool {
	return v.State != nil && h.Fires(v1alpha1.OnEnter) && slices.Contains(v.State.Enter, h)
}

// Awaited names the visit's exit and enter handlers that have not
// finished for it (succeeded or given up), in the order they run, with
// what each waits for: what the state machine waits for before its
// guards, its timeout and a person's decision. g is the object's
// generation: a handler that has given up on it by another trigger (a
// create or update run) is not awaited, and does not run for the visit:
// it runs again after a new generation or opkit retry, and nothing waits
// for it meanwhile.
func (v *Visit) Awaited(st *State, g int64) []string {
	var out []string
	if v.Left != nil {
		for _, h := range v.Left.Exit {
			if hs := st.of(h.Name); h.Fires(v1alpha1.OnExit) && hs.Exited < v.Seq && !givenUp(hs, g) {
				out = append(out, v.awaiting(h.Name, "leaving "+v.Left.Name, hs))
			}
		}
	}
	if v.State != nil {
		for _, h := range v.State.Enter {
			if hs := st.of(h.Name); h.Fires(v1alpha1.OnEnter) && hs.Entered < v.Seq && !givenUp(hs, g) {
				out = append(out, v.awaiting(h.Name, "entering "+v.State.Name, hs))
			}
		}
	}
	return out
}

// awaiting says what a handler of the visit that has not finished waits
// for: its run, or the retry of a failed one.
func (v *Visit) awaiting(name, on string, hs *HandlerState) string {
	if hs.Attempt > 0 && hs.NextRetryAt != "" {
		next := hs.NextRetryAt
		if t, err := time.Parse(time.RFC3339Nano, next); err == nil {
			next = t.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s (on %s; attempt %d failed: %s; tried again at %s)", name, on, hs.Attempt, hs.LastError, next)
	}
	return fmt.Sprintf("%s (on %s)", name, on)
}

// exitsDone reports whether the exit handlers of the state left are done
// (or given up on the generation g).
func (v *Visit) exitsDone(st *State, g int64) bool {
	return v.Left == nil || !slices.ContainsFunc(v.Left.Exit, func(h *definition.Handler) bool {
		hs := st.of(h.Name)
		return h.Fires(v1alpha1.OnExit) && hs.Exited < v.Seq && !givenUp(hs, g)
	})
}

// trigger is the run h has to make for the visit: exit, enter (once the
// state left is done with), or "". A handler that has given up on the
// generation g has none.
func (v *Visit) trigger(h *definition.Handler, st *State, g int64) string {
	hs := st.of(h.Name)
	switch {
	case givenUp(hs, g):
		return ""
	case v.exits(h) && hs.Exited < v.Seq:
		return v1alpha1.OnExit
	case v.enters(h) && hs.Entered < v.Seq && v.exitsDone(st, g):
		return v1alpha1.OnEnter
	}
	return ""
}

// givenUp reports whether hs records a handler that gave up on the
// generation g by another trigger than a visit's: it waits for a new
// generation or opkit retry, and holds back no visit.
func givenUp(hs *HandlerState, g int64) bool {
	return hs.Stalled && hs.TargetSeq == 0 && hs.Target == g
}

// Run is what guards read as run: the visit's last finished enter run;
// the zero Run before any.
func (v *Visit) Run(st *State) definition.Run {
	if r := st.EnterRun; r != nil && r.Seq == v.Seq {
		return definition.Run{Handler: r.Handler, Outcome: r.Outcome, Error: r.Error}
	}
	return definition.Run{}
}

// Cause is a run to make: the handler, why, and its identity.
type Cause struct {
	Handler *definition.Handler
	// Trigger is one of v1alpha1's On* values or TriggerRequeue.
	Trigger string
	// Generation is the object's generation the run is for.
	Generation int64
	// Key is the idempotency key; Attempt counts from 1 for the
	// generation.
	Key     string
	Attempt int
	// Due is when the run came due: Input.Now.
	Due time.Time
	// Slot is a scheduled run's slot: the latest time of its schedule
	// that has come due. Its key names it, so a run retried or
	// interrupted keeps its key, and its success records it.
	Slot time.Time
	// Old is the spec the handlers last finished with (nil for a new
	// object); Diff the changes from it to the current spec.
	Old  map[string]any
	Diff []archive.Change
	// Inputs is the hash of the related fields the handler names, now;
	// "" for a handler that names none.
	Inputs string
	// Seq is the state visit an enter or exit run is for; 0 for others.
	Seq int64
	// Started is, for a resume run, the engine start it is for
	// (Input.Started); its success records it.
	Started time.Time
}

// Decision is what Decide found.
type Decision struct {
	// Cause is the run to make now, or nil.
	Cause *Cause
	// Wait is how long until a retry, a schedule or a requeue comes due,
	// when Cause is nil; 0 for nothing to wait for.
	Wait time.Duration
	// Stalled says why the object's handlers are stuck; "" when they are
	// not.
	Stalled string
	// State is Input.State as the decision leaves it, for the caller to
	// keep in its place: the records of create and update handlers that a
	// change does not concern (they pass it without a run), those of
	// resume handlers of an object not handled yet (new to this start, not
	// resumed), a related object's inputs first seen and a when condition
	// seen false are updated; nothing else. Input.State is not changed.
	State *State
}

// Decide finds the first handler, in declaration order, of the most
// urgent trigger that has a run to make (delete, then create and update,
// then resume, then schedule and requeue): a frequent schedule never
// starves the others. A handler that waits for a retry, or has given up,
// holds back the handlers declared after it, but for the exit and enter
// runs of the object's visit of its state: the state machine has moved
// on, and a visit's runs wait only for each other (in declared order, the
// exits of the state left first). A handler that has given up on the
// generation makes no visit's runs until a new generation or opkit retry
// (Visit.Awaited does not wait for it).
func Decide(in Input) Decision {
	obj, st, now := in.Object, in.State.forDecide(), in.Now
	start := startMark(in.Started)
	if st.Handled == nil {
		// Not handled yet: the object is new to this start, and its resume
		// handlers run from the next one on.
		for _, h := range in.Handlers {
			if h.Fires(v1alpha1.OnResume) {
				st.Of(h.Name).Resumed = start
			}
		}
	}
	if in.Paused {
		return Decision{Stalled: Stalled(in.Handlers, obj, st), State: st}
	}
	g := obj.GetGeneration()
	deleting := obj.GetDeletionTimestamp() != nil
	d := Decision{State: st}
	soonest := func(w time.Duration) {
		if w > 0 && (d.Wait == 0 || w < d.Wait) {
			d.Wait = w
		}
	}
	var best *definition.Handler
	var bestTrigger, bestInputs string
	var bestRelated bool
	var bestSlot time.Time
	// held: a handler declared before waits for a retry or has given up;
	// only the visit's runs are still decided.
	held := false
	for _, h := range in.Handlers {
		hs := st.Of(h.Name)
		trigger, inputs, relatedChange := in.changeTrigger(st, h, hs, held, deleting)
		if v := in.Visit; trigger == "" && !deleting && v != nil {
			trigger = v.trigger(h, st, g)
		}
		if trigger == "" && !held && !deleting && h.Fires(v1alpha1.OnResume) && st.Handled != nil && hs.Resumed != start {
			trigger = v1alpha1.OnResume
		}
		var slot time.Time
		if trigger == "" && !held && !deleting && h.Fires(v1alpha1.OnSchedule) {
			var due bool
			var wait time.Duration
			var stalled string
			if slot, due, wait, stalled = scheduleSlot(h, hs, obj, now); due {
				trigger = v1alpha1.OnSchedule
			}
			soonest(wait)
			if d.Stalled == "" {
				d.Stalled = stalled
			}
		}
		if trigger == "" && !held && !deleting && hs.RequeueAt != "" {
			if at, err := time.Parse(time.RFC3339Nano, hs.RequeueAt); err == nil && now.Before(at) {
				soonest(at.Sub(now))
			} else {
				trigger = v1alpha1.TriggerRequeue
			}
		}
		if trigger == "" {
			continue
		}
		// Failed attempts and Stalled count for one target generation; a
		// newer spec starts afresh. A handler that waits holds back those
		// declared after it: all of them when it waits for a visit's run
		// (they run in order), else all but the visit's runs.
		target := in.sameTarget(hs, trigger, g)
		if target && hs.Stalled {
			if d.Stalled == "" {
				d.Stalled = stalledText(h.Name, hs)
			}
			held = true
			continue
		}
		if target && hs.NextRetryAt != "" {
			if at, err := time.Parse(time.RFC3339Nano, hs.NextRetryAt); err == nil && now.Before(at) {
				soonest(at.Sub(now))
				if visitTrigger(trigger) {
					break
				}
				held = true
				continue
			}
		}
		if best == nil || triggerRank[trigger] < triggerRank[bestTrigger] {
			best, bestTrigger, bestInputs, bestRelated, bestSlot = h, trigger, inputs, relatedChange, slot
		}
	}
	if best == nil {
		return d
	}
	c := in.cause(st, best, bestTrigger, bestInputs, bestRelated, bestSlot)
	return Decision{Cause: c, Stalled: d.Stalled, State: st}
}

// cause is the run of handler best that Decide chose, for trigger, with
// the related objects' inputs (a change of them: related), at slot: its
// attempt, its sequence in a visit, its idempotency key.
func (in Input) cause(st *State, best *definition.Handler, trigger, inputs string, related bool, slot time.Time) *Cause {
	obj, now, g := in.Object, in.Now, in.Object.GetGeneration()
	c := &Cause{Handler: best, Trigger: trigger, Generation: g, Attempt: 1, Due: now, Slot: slot, Old: st.old(), Inputs: inputs}
	c.Diff = in.diff(c.Old, obj)
	if hs := st.Of(best.Name); in.sameTarget(hs, trigger, g) {
		c.Attempt = hs.Attempt + 1
	}
	if visitTrigger(trigger) {
		c.Seq = in.Visit.Seq
	}
	uid := st.Life(obj.GetUID())
	at := slot
	if trigger == v1alpha1.OnResume {
		at, c.Started = in.Started, in.Started
	}
	c.Key = Key(uid, g, best.Name, trigger, st.Of(best.Name), at)
	if visitTrigger(trigger) {
		c.Key = VisitKey(uid, c.Seq, best.Name, trigger)
	}
	if related {
		// The same generation, new inputs: a key of their own.
		c.Key += "/inputs/" + inputs
	}
	return c
}

// sameTarget reports whether hs's failed attempts are those of a run of
// trigger now: for the same generation, and for an enter or exit run the
// same visit (a handler that gave up on one visit runs on the next).
func (in Input) sameTarget(hs *HandlerState, trigger string, g int64) bool {
	if hs.Target != g {
		return false
	}
	if visitTrigger(trigger) {
		return hs.TargetSeq == in.Visit.Seq
	}
	return hs.TargetSeq == 0
}

// startMark is how HandlerState.Resumed records the engine start
// started.
func startMark(started time.Time) string {
	return started.UTC().Format(time.RFC3339Nano)
}

// visitTrigger reports whether a trigger is of a state visit.
func visitTrigger(trigger string) bool {
	return trigger == v1alpha1.OnEnter || trigger == v1alpha1.OnExit
}

// VisitKey is the idempotency key of an enter or exit run of handler for
// the state visit seq: <uid>/state/<seq>/<handler>, and /exit for an exit
// run.
func VisitKey(uid types.UID, seq int64, handler, trigger string) string {
	key := fmt.Sprintf("%s/state/%d/%s", uid, seq, handler)
	if trigger == v1alpha1.OnExit {
		key += "/exit"
	}
	return key
}

// touches reports whether the changed paths concern h. A watched object's
// projection holds the metadata and status fields some handler names: for
// a handler that names none, only a change of the rest (spec, data,
// labels...) is one.
func (in Input) touches(h *definition.Handler, changed []string) bool {
	if in.Subject == nil || len(h.Fields) > 0 || len(h.RelatedFields) > 0 {
		return h.Touches(changed)
	}
	for _, p := range changed {
		root, _, _ := strings.Cut(p, ".")
		if root != "status" && (root != "metadata" || p == "metadata.labels" || strings.HasPrefix(p, "metadata.labels.")) {
			return true
		}
	}
	return false
}

// diff is the change from old to the object's subject now.
func (in Input) diff(old map[string]any, obj *unstructured.Unstructured) []archive.Change {
	if in.Subject != nil {
		return DiffObject(old, in.Subject)
	}
	return Diff(old, Spec(obj))
}

// subject is what create and update are about now: the object's spec, or
// a watched object's projection.
func (in Input) subject(obj *unstructured.Unstructured) map[string]any {
	if in.Subject != nil {
		return in.Subject
	}
	return Spec(obj)
}

// Inputs hashes the values of the related fields h names in related, or
// returns "" when it names none.
func Inputs(h *definition.Handler, related map[string]any) string {
	if len(h.RelatedFields) == 0 {
		return ""
	}
	values := make([]any, len(h.RelatedFields))
	for i, f := range h.RelatedFields {
		values[i] = normalize(f.Value(related))
	}
	data, _ := json.Marshal(values)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// Key is the idempotency key of a run of handler for the object's
// generation g: uid/g/handler, plus, so that a run interrupted by a crash
// or retried keeps its key and no other run shares it: the slot's Unix
// time (at) for a scheduled run, the time it came due for a requeued one,
// the transition's number for a when run, and the engine's start (at)
// for a resume run.
func Key(uid types.UID, g int64, handler, trigger string, hs *HandlerState, at time.Time) string {
	key := fmt.Sprintf("%s/%d/%s", uid, g, handler)
	switch trigger {
	case v1alpha1.OnSchedule:
		key += fmt.Sprintf("/%d", at.Unix())
	case v1alpha1.TriggerRequeue:
		due, _ := time.Parse(time.RFC3339Nano, hs.RequeueAt)
		key += fmt.Sprintf("/requeue/%d", due.Unix())
	case v1alpha1.OnWhen:
		key += fmt.Sprintf("/when/%d", hs.WhenCount+1)
	case v1alpha1.OnResume:
		key += fmt.Sprintf("/resume/%d", at.Unix())
	}
	return key
}

// Stalled says which handler has given up on the object's generation, or
// "".
func Stalled(hs []*definition.Handler, obj *unstructured.Unstructured, st *State) string {
	for _, h := range hs {
		if rec := st.Handlers[h.Name]; rec != nil && rec.Stalled && rec.Target == obj.GetGeneration() {
			return stalledText(h.Name, rec)
		}
	}
	return ""
}

func stalledText(name string, hs *HandlerState) string {
	return fmt.Sprintf("handler %s gave up after %d attempts: %s; fix the cause, then change the spec or run opkit retry", name, hs.Attempt, hs.LastError)
}

// triggerRank orders triggers by urgency.
// A state's exit runs come before the next state's enter runs, both
// before the triggers that come back by themselves.
var triggerRank = map[string]int{v1alpha1.OnDelete: 0, v1alpha1.OnCreate: 1, v1alpha1.OnUpdate: 1, v1alpha1.OnExit: 2, v1alpha1.OnEnter: 3,
	v1alpha1.OnWhen: 4, v1alpha1.OnResume: 4, v1alpha1.OnSchedule: 5, v1alpha1.TriggerRequeue: 5}

// scheduleBase is the time a handler's next slot counts from: its last
// scheduled run, else the object's creation.
func scheduleBase(obj *unstructured.Unstructured, hs *HandlerState) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, hs.LastScheduled); err == nil {
		return t
	}
	return obj.GetCreationTimestamp().Time
}

// Spec is the object's spec.
func Spec(obj *unstructured.Unstructured) map[string]any {
	s, _, _ := unstructured.NestedMap(obj.Object, "spec")
	return s
}

// old is the spec the handlers last finished with, or nil.
func (st *State) old() map[string]any {
	if st.Handled == nil {
		return nil
	}
	return st.Handled.Spec
}
