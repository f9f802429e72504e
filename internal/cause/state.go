package cause

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// State is what an object's status.opkit records of its handlers: the
// memory that makes triggers restart-safe. The engine reads it from the
// object (or from what it last wrote, when the cache lags), Decide reads
// it, the run's outcome updates it, and the engine writes it back.
type State struct {
	Handlers map[string]*HandlerState `json:"handlers,omitempty"`
	Handled  *Handled                 `json:"handled,omitempty"`
	// Specs holds, by generation, the spec (a watched object's
	// projection) of each generation newer than Handled's that an update
	// handler is done with while another create or update handler is
	// not: what the handler's next update is decided from. Empty while
	// they are all done with the same generation.
	Specs   map[int64]map[string]any `json:"specs,omitempty"`
	LastRun *LastRun                 `json:"lastRun,omitempty"`
	// Observed is a watched object's count of changes; nil for a custom
	// resource, whose generation the API server counts.
	Observed *Observed `json:"observed,omitempty"`
	// EnterRun is the last enter run that finished (succeeded or gave up),
	// with the state visit it was for: what guards read as run.
	EnterRun *EnterRun `json:"enterRun,omitempty"`
	// RetrySeen is the value of a watched object's retry annotation last
	// acted on: opkit does not remove it from an object it does not own,
	// so each new value is one retry. A custom resource's is the value of
	// the request taken whose annotation is still to be removed.
	RetrySeen string `json:"retrySeen,omitempty"`
	// RerunSeen is the value of a watched object's re-run annotation
	// (v1alpha1.RerunAnnotation) last answered, for the same reason.
	RerunSeen string `json:"rerunSeen,omitempty"`
	// Paused is the pause last recorded in the archive: "v:" and the
	// value of the object's pause annotation while it is paused, "" once
	// its resume is recorded. A pause whose value changes is recorded
	// again.
	Paused string `json:"paused,omitempty"`
	// PauseRecords counts the pauses and resumes recorded: the next
	// one's record has the key <life>/pause/<PauseRecords+1>, which an
	// engine killed before it wrote this state has recorded already
	// (the next one then records it no second time).
	PauseRecords int64 `json:"pauseRecords,omitempty"`
	// Trace is what the object's next reconcile continues of the traces
	// of its runs (package tracing): nil when nothing.
	Trace *Trace `json:"trace,omitempty"`
}

// Trace is an object's trace context between its reconciles, W3C
// traceparents.
type Trace struct {
	// Seen is the object's trace annotation a run's reconcile last
	// continued: the same annotation is not continued twice.
	Seen string `json:"seen,omitempty"`
}

// Life is the uid the keys of the object's runs name: a watched object's
// qualified by its life (Observed.Since), as it may stop matching and
// match again with the same uid.
func (st *State) Life(uid types.UID) types.UID {
	if st.Observed != nil && st.Observed.Since != "" {
		return uid + types.UID("."+st.Observed.Since)
	}
	return uid
}

// HandlerState is one handler's record in status.opkit.handlers.
type HandlerState struct {
	// Generation is the last generation a create or update run succeeded
	// for, or that its fields filter let pass.
	Generation int64 `json:"generation,omitempty"`
	// Deleted: the delete run succeeded.
	Deleted bool `json:"deleted,omitempty"`
	// Attempt counts failed runs for Target since the last success.
	Attempt int `json:"attempt,omitempty"`
	// Trace is the trace (a W3C traceparent) of the failed attempt that
	// the next one continues: every attempt after a failure is in its
	// trace. Cleared when a run of the handler does not fail.
	Trace       string `json:"trace,omitempty"`
	Target      int64  `json:"target,omitempty"`
	NextRetryAt string `json:"nextRetryAt,omitempty"`
	Stalled     bool   `json:"stalled,omitempty"`
	LastError   string `json:"lastError,omitempty"`
	// LastScheduled is the slot of the last scheduled run that succeeded.
	LastScheduled string `json:"lastScheduled,omitempty"`
	// RequeueAt is when the handler runs again (trigger requeue), as its
	// last successful run asked with requeueAfter.
	RequeueAt string `json:"requeueAt,omitempty"`
	// Inputs is a hash of the related objects' fields the handler names,
	// as of its last success (or as first seen): a change of them is an
	// update for it.
	Inputs string `json:"inputs,omitempty"`
	// WhenTrue is the handler's when condition as last recorded: set by
	// the run for a transition to true, cleared when it is seen false.
	// WhenCount counts the transitions run: the key of the next.
	WhenTrue  bool  `json:"whenTrue,omitempty"`
	WhenCount int64 `json:"whenCount,omitempty"`
	// Entered and Exited are the last state visits (status.state.seq)
	// whose enter and exit runs finished, succeeded or gave up.
	Entered int64 `json:"entered,omitempty"`
	Exited  int64 `json:"exited,omitempty"`
	// TargetSeq is the state visit the failed attempts of an enter or
	// exit run count for; 0 for those of other triggers.
	TargetSeq int64 `json:"targetSeq,omitempty"`
	// Resumed is the engine start (Input.Started, RFC 3339) the handler's
	// resume run last succeeded for, or at which the object was not
	// handled yet: it has no resume run to make until the next start.
	Resumed string `json:"resumed,omitempty"`
}

// EnterRun is status.opkit.enterRun: the last finished enter run.
type EnterRun struct {
	Seq     int64  `json:"seq"`
	Handler string `json:"handler"`
	// Outcome is Succeeded or GaveUp.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Handled is the spec as of the last generation every create and update
// handler was done with: what "old" and the diff are relative to.
type Handled struct {
	Generation int64          `json:"generation"`
	Spec       map[string]any `json:"spec,omitempty"`
}

// LastRun is status.opkit.lastRun, so that kubectl describe tells the story.
type LastRun struct {
	ID          string `json:"id"`
	Handler     string `json:"handler"`
	Trigger     string `json:"trigger"`
	Outcome     string `json:"outcome"`
	Message     string `json:"message,omitempty"`
	Attempt     int    `json:"attempt"`
	NextRetryAt string `json:"nextRetryAt,omitempty"`
}

// Read returns the handler records kept in an object's status.opkit; a missing
// or unreadable record is an empty state.
func Read(obj *unstructured.Unstructured) *State {
	st := &State{}
	if own, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "opkit"); ok {
		data, _ := json.Marshal(own)
		_ = json.Unmarshal(data, st)
	}
	if st.Handlers == nil {
		st.Handlers = map[string]*HandlerState{}
	}
	return st
}

// Of returns a handler's record, created empty if it has none.
func (st *State) Of(name string) *HandlerState {
	if st.Handlers[name] == nil {
		st.Handlers[name] = &HandlerState{}
	}
	return st.Handlers[name]
}

// of returns a handler's record without creating one (a zero record for
// none).
func (st *State) of(name string) *HandlerState {
	if hs := st.Handlers[name]; hs != nil {
		return hs
	}
	return &HandlerState{}
}

// Clone returns a deep copy. It is made field by field (a step clones
// the state twice, and a JSON round trip was a twentieth of the engine's
// CPU in a handlers drain); the spec values keep their types, and are
// those of objects read from the API, which runtime.DeepCopyJSON copies
// as unstructured.DeepCopy does.
func (st *State) Clone() *State {
	out := st.forDecide() // the handler records copied; the rest below
	if st.Handled != nil {
		out.Handled = &Handled{Generation: st.Handled.Generation, Spec: runtime.DeepCopyJSON(st.Handled.Spec)}
	}
	if st.Specs != nil {
		out.Specs = make(map[int64]map[string]any, len(st.Specs))
		for g, spec := range st.Specs {
			out.Specs[g] = runtime.DeepCopyJSON(spec)
		}
	}
	out.LastRun = clonePtr(st.LastRun)
	out.Observed = clonePtr(st.Observed)
	out.EnterRun = clonePtr(st.EnterRun)
	out.Trace = clonePtr(st.Trace)
	return out
}

// clonePtr is a copy of what p points to, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// forDecide returns a copy of st that Decide may change, so that it
// never writes into its input: the handler records and Specs are the
// copy's own; what Decide does not change (Handled, LastRun, Observed,
// EnterRun and the specs' contents) is shared. It is cheaper than Clone,
// which Decide would pay at every reconcile.
func (st *State) forDecide() *State {
	out := *st
	out.Handlers = make(map[string]*HandlerState, len(st.Handlers))
	for name, hs := range st.Handlers {
		if hs != nil {
			c := *hs
			out.Handlers[name] = &c
		}
	}
	out.Specs = maps.Clone(st.Specs)
	return &out
}

// stateKeys are the keys of status.opkit that State owns: each field's
// JSON name, so that a field added to State is written with the rest (a
// field left out of WriteTo is forgotten at the next engine start, as the
// recorded pause once was).
var stateKeys = func() []string {
	var keys []string
	t := reflect.TypeFor[State]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}()

// WriteTo stores the state into status.opkit (a map of the status),
// every field State has; the rest of the map (the inventory's children)
// is left as it is. Handlers with nothing to record are left out.
func (st *State) WriteTo(own map[string]any) {
	for name, hs := range st.Handlers {
		if *hs == (HandlerState{}) {
			delete(st.Handlers, name)
		}
	}
	data, _ := json.Marshal(st)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	for _, k := range stateKeys {
		if v, ok := m[k]; ok {
			own[k] = v
		} else {
			delete(own, k)
		}
	}
}

// AdvanceHandled moves the handled record to generation g, whose spec was
// spec, once every create and update handler of hs is done with g.
func (st *State) AdvanceHandled(hs []*definition.Handler, g int64, spec map[string]any) {
	defer st.prune(hs)
	if st.Handled != nil && st.Handled.Generation >= g || st.Pending(hs, g) != nil {
		return
	}
	st.Handled = &Handled{Generation: g, Spec: spec}
}

// Pending returns the first create or update handler of hs not done with
// generation g yet (its run for it has not succeeded, and the change to it
// was not found to be none of its business), or nil when every one is.
func (st *State) Pending(hs []*definition.Handler, g int64) *definition.Handler {
	for _, h := range hs {
		if (h.Fires(v1alpha1.OnCreate) || h.Fires(v1alpha1.OnUpdate)) && st.of(h.Name).Generation < g {
			return h
		}
	}
	return nil
}

// done records that h is done with generation g, whose spec (a watched
// object's projection) was spec: its run succeeded for it, or the change
// to it was not about h. An update handler ahead of status.opkit.handled
// keeps spec in Specs, so that its next update is about the change since.
func (st *State) done(hs []*definition.Handler, h *definition.Handler, g int64, spec map[string]any) {
	rec := st.Of(h.Name)
	rec.Generation = max(rec.Generation, g)
	if h.Fires(v1alpha1.OnUpdate) && rec.Generation == g && (st.Handled == nil || g > st.Handled.Generation) {
		if st.Specs == nil {
			st.Specs = map[int64]map[string]any{}
		}
		st.Specs[g] = spec
	}
	st.prune(hs)
}

// prune drops the specs of Specs that no update handler is at any more,
// or that status.opkit.handled has caught up with.
func (st *State) prune(hs []*definition.Handler) {
	for g := range st.Specs {
		at := slices.ContainsFunc(hs, func(h *definition.Handler) bool {
			return h.Fires(v1alpha1.OnUpdate) && st.of(h.Name).Generation == g
		})
		if !at || st.Handled != nil && g <= st.Handled.Generation {
			delete(st.Specs, g)
		}
	}
	if len(st.Specs) == 0 {
		st.Specs = nil
	}
}

// doneWith is the spec the handler of record hs is done with, which an
// update for it is about the change from: that of its generation, or, not
// known (a record written before Specs), the handled one.
func (st *State) doneWith(hs *HandlerState) map[string]any {
	if spec, ok := st.Specs[hs.Generation]; ok && (st.Handled == nil || hs.Generation > st.Handled.Generation) {
		return spec
	}
	return st.old()
}

// Succeeded records a successful run of c's handler: the generation or
// deletion it was for, or its schedule slot; its failures are cleared, and
// requeueAfter > 0 asks for the handler to run again that long after now.
// spec is the spec the run saw.
func (st *State) Succeeded(hs []*definition.Handler, c *Cause, spec map[string]any, requeueAfter time.Duration, now time.Time) {
	rec := st.Of(c.Handler.Name)
	rec.Attempt, rec.Target, rec.TargetSeq, rec.NextRetryAt, rec.Stalled, rec.LastError = 0, 0, 0, "", false, ""
	switch c.Trigger {
	case v1alpha1.OnCreate, v1alpha1.OnUpdate:
		if c.Inputs != "" {
			rec.Inputs = c.Inputs
		}
		// Changes made during the run come as one update, from the spec
		// this run saw.
		st.done(hs, c.Handler, c.Generation, spec)
		st.AdvanceHandled(hs, c.Generation, spec)
	case v1alpha1.OnDelete:
		rec.Deleted = true
	case v1alpha1.OnSchedule:
		slot := c.Slot
		if slot.IsZero() {
			slot = c.Due
		}
		rec.LastScheduled = slot.UTC().Format(time.RFC3339Nano)
	case v1alpha1.OnWhen:
		rec.WhenTrue, rec.WhenCount = true, rec.WhenCount+1
	case v1alpha1.OnResume:
		rec.Resumed = startMark(c.Started)
	case v1alpha1.OnEnter, v1alpha1.OnExit:
		st.visited(c, "Succeeded", "")
	}
	// The last success decides whether the handler runs again; after a
	// delete run the object is gone.
	rec.RequeueAt = ""
	if requeueAfter > 0 && c.Trigger != v1alpha1.OnDelete {
		rec.RequeueAt = now.Add(requeueAfter).Format(time.RFC3339Nano)
	}
}

// Failed records a failed run of c's handler, with message. It returns
// true when the handler gives up (the failure is permanent or the attempts
// are spent), else when to try again.
func (st *State) Failed(c *Cause, message string, permanent bool, now time.Time) (gaveUp bool, retryAt time.Time) {
	rec := st.Of(c.Handler.Name)
	rec.Attempt, rec.Target, rec.TargetSeq, rec.LastError = c.Attempt, c.Generation, c.Seq, Truncate(message)
	retryAt, gaveUp = c.Handler.Retry.Next(c.Attempt, permanent, now)
	if gaveUp {
		rec.Stalled, rec.NextRetryAt = true, ""
		if c.Trigger == v1alpha1.OnEnter || c.Trigger == v1alpha1.OnExit {
			st.visited(c, "GaveUp", rec.LastError) // done with: the state machine goes on
		}
		return true, time.Time{}
	}
	// A run that gave up on an earlier target (an older generation, or the
	// create or update run before a delete run) no longer holds this one:
	// its attempts are this target's, retried.
	rec.Stalled, rec.NextRetryAt = false, retryAt.Format(time.RFC3339Nano)
	return false, retryAt
}

// visited records that an enter or exit run of c's handler finished for
// its visit with outcome.
func (st *State) visited(c *Cause, outcome, message string) {
	rec := st.Of(c.Handler.Name)
	if c.Trigger == v1alpha1.OnExit {
		rec.Exited = max(rec.Exited, c.Seq)
		return
	}
	rec.Entered = max(rec.Entered, c.Seq)
	st.EnterRun = &EnterRun{Seq: c.Seq, Handler: c.Handler.Name, Outcome: outcome, Error: message}
}

// Truncate cuts a message to what a handler record in status, a
// condition or an Event holds.
func Truncate(s string) string {
	if len(s) > 1024 {
		return s[:1021] + "..."
	}
	return s
}
