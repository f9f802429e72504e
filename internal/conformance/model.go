package conformance

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Outcome is how one attempt of a run ended.
type Outcome string

// The outcomes of an attempt, as the archive records them.
const (
	Succeeded Outcome = "Succeeded"
	Failed    Outcome = "Failed"
	GaveUp    Outcome = "GaveUp"
)

// Run is a run the docs promise: one idempotency key of one handler, and
// the outcome of each of its attempts, in order (a retried key keeps
// them all: Failed, GaveUp, then after opkit retry, Succeeded).
type Run struct {
	// Life is the object's life: 1 for the first object of the name, 2
	// for the one created after it was deleted, and so on.
	Life    int
	Handler string
	Trigger Trigger
	// Gen is the generation the run is for: the custom resource's
	// metadata.generation, or a watched object's count of projection
	// changes; 0 for a delete run, whose generation the docs leave open.
	Gen int64
	// Start is, for a resume run, the engine start it is for: 1 for the
	// first start of the history.
	Start int
	// Seq is, for an enter run, the visit (status.state.seq) it is for.
	Seq int64
	// Delivery is, for an event run, the delivery it is for (its number:
	// DeliveryID); its Life is 0, as it is for the operator. Redelivery
	// is, for a run of a redelivery, the redelivery's number.
	Delivery   int
	Redelivery int
	// Outcomes are the attempts' outcomes. A run interrupted by a
	// SIGKILL is not among them: it runs again with its key, and that
	// attempt is.
	Outcomes []Outcome
	// Spec is what a create or update run must see of the object's spec
	// (a watched ConfigMap's data): the spec of SpecGen, which is Gen
	// but for a re-run without --same-input, which sees the object as it
	// is when it runs.
	Spec    map[string]string
	SpecGen int64
	// Rerun is, for a re-run, the how-manieth re-run of the key it
	// repeats (that of the create or update run of Gen) it is: 1 for the
	// first. SameInput: it was asked with --same-input, and sees the
	// binding context the run it repeats got.
	Rerun     int
	SameInput bool
	// Of is, for a re-run, the run it repeats.
	Of *Run
	// SawCount is the status.count the run's last attempt saw (custom
	// resources): what a re-run of it with --same-input sees, and writes
	// one more than.
	SawCount int
}

// Ended is the last outcome.
func (r *Run) Ended() Outcome { return r.Outcomes[len(r.Outcomes)-1] }

// ID names the run as the checker matches it: life, handler, trigger and
// what the trigger is about.
func (r *Run) ID() RunID {
	return RunID{Life: r.Life, Handler: r.Handler, Trigger: r.Trigger, Gen: r.Gen, Start: r.Start, Seq: r.Seq, Delivery: r.Delivery, Redelivery: r.Redelivery, Rerun: r.Rerun}
}

// RunID identifies a run across the model and the observations.
type RunID struct {
	Life    int
	Handler string
	Trigger Trigger
	Gen     int64
	Start   int
	Seq     int64
	// Delivery is an event run's delivery; Redelivery, for a run of a
	// redelivery of it, that redelivery's number (Delivery.Redelivery).
	Delivery   int
	Redelivery int
	// Rerun is a re-run's number among the re-runs of its key.
	Rerun int
}

func (id RunID) String() string {
	if id.Trigger == Event && id.Redelivery > 0 {
		return fmt.Sprintf("delivery %s redelivery %d %s event", DeliveryID(id.Delivery), id.Redelivery, id.Handler)
	}
	if id.Trigger == Event {
		return fmt.Sprintf("delivery %s %s event", DeliveryID(id.Delivery), id.Handler)
	}
	s := fmt.Sprintf("object #%d %s %s gen %d", id.Life, id.Handler, id.Trigger, id.Gen)
	if id.Trigger == Resume {
		s += " start " + strconv.Itoa(id.Start)
	}
	if id.Trigger == Enter {
		s += fmt.Sprintf(" visit %d", id.Seq)
	}
	if id.Trigger == Rerun {
		s = fmt.Sprintf("object #%d %s re-run %d of its gen %d run", id.Life, id.Handler, id.Rerun, id.Gen)
	}
	return s
}

// End is what an object life must look like once the history is over
// and the engine is quiet.
type End struct {
	Life int
	// Exists: the object is still there (a custom resource whose delete
	// handler gave up keeps opkit's finalizer).
	Exists bool
	// Count is status.count: how many writing runs succeeded for the
	// life (custom resources only).
	Count int
	// State is status.state.name, for an operator with states.
	State string
	// OrRefused: the last decision may also have been refused at once
	// (a DecisionRefused Event), the object then staying in Ask.
	OrRefused bool
	// Decision and Refused are what the checker saw: a decision still in
	// the object's annotation, and a DecisionRefused Event about it.
	Decision string
	Refused  bool
	// Spec is the object's spec (a ConfigMap's data): opkit never
	// writes it. Gen is its generation (a watched object's count of
	// changes an engine saw).
	Spec map[string]string
	Gen  int64
	// Pauses and Resumes are how many times the archive recorded the
	// object's handlers paused and resumed (handler opkit.pause).
	Pauses, Resumes int
	// Written says what the checker found opkit wrote to a watched
	// object (a label, an annotation, an owner reference, a finalizer, a
	// status); "" for nothing.
	Written string
}

// Expectation is what the docs promise of a Case.
type Expectation struct {
	// Runs are the runs that must happen, each exactly as many attempts
	// as its outcomes; no other run may happen.
	Runs []*Run
	// Ends are the lives of the object, in order.
	Ends []End
	// Starts is how many times the engine started.
	Starts int
	// Interrupted are the runs the history's crashes interrupt: each the
	// first run of the step before its crash.
	Interrupted []RunID
	// Deliveries are the source's deliveries, in the order sent, each
	// accepted once.
	Deliveries []*Delivery
	// Answers are the HTTP statuses of the history's posts to a webhook
	// source, in order: 202 accepted, 409 a replay. A NATS source has
	// none: its messages are acked to JetStream, not answered.
	Answers []int
}

// Delivery is what the docs promise of one delivery id (docs/events.md):
// recorded once, accepted, with its payload, handled once by each handler
// on event in declared order, and recorded Handled, or Failed when one
// gave up; each post of it again is recorded Refused, as a replay, and
// runs nothing.
type Delivery struct {
	N int
	// Redelivery is, for a redelivery (opkit events redeliver) of the
	// sender's delivery N, its number among the history's redeliveries,
	// from 1; 0 for a delivery the sender sent. A redelivery keeps the
	// sender's id and payload, is never a replay, and runs its handlers
	// under keys of their own.
	Redelivery int
	Payload    map[string]string
	// Outcome is the record's last: "Handled" or "Failed".
	Outcome string
	// Replays is how many times it was posted again while an engine ran.
	Replays int
}

// The outcomes of an accepted delivery.
const (
	DeliveryHandled = "Handled"
	DeliveryFailed  = "Failed"
)

// Expect returns what the docs promise for c: the runs that must happen,
// their attempts, and how each life of the object ends. It plays the
// history as the docs describe the engine, one step at a time, the engine
// doing everything due after each step before the next is made (the
// checker waits for that), or, while the engine is stopped, after it
// starts.
func Expect(c Case) *Expectation {
	m := newModel(&c.Def)
	for i, s := range c.History {
		m.apply(s, i+1 < len(c.History) && c.History[i+1].Op == OpCrash)
	}
	return m.expectation()
}

// model plays a history. It is exported to the generator through
// Model, which draws the next step from what the model holds.
type model struct {
	def    *Def
	up     bool
	starts int
	lives  []*life
	runs   []*Run
	byID   map[RunID]*Run
	// nextRev numbers the values OpChange writes.
	nextRev int
	// dry: execute makes no run; step only reports that one is due
	// (dueRun).
	dry    bool
	dueRun RunID
	// interrupted are the runs a crash interrupted.
	interrupted []RunID
	// deliveries are those accepted, in order; pending those not handled
	// yet; answers the statuses of the posts.
	deliveries []*Delivery
	pending    []*Delivery
	answers    []int
	// eventExecs counts each event run's executions, for its Behaviour.
	eventExecs map[RunID]int
	// redeliveries counts the redeliveries asked for.
	redeliveries int
	// opPaused: the Operator's pause annotation is set (a Cluster
	// definition's, paused whole).
	opPaused bool
}

// life is one object of the name "obj", from its creation to its end.
type life struct {
	n int
	// exists: the object is in the API server (a custom resource being
	// deleted included). deleting: it was deleted.
	exists, deleting bool
	// seen: an engine has seen it (it then gets a delete run when it
	// goes; a watched object never seen gets none).
	seen bool
	gen  int64
	// seenGen is the last generation an engine saw.
	seenGen int64
	// specs[g] is the spec of generation g (specs[0] is nil).
	specs []map[string]string
	count int
	// handled: every create and update handler was done with a
	// generation (status.opkit.handled is recorded): resume runs come
	// at each start after it.
	handled bool
	hs      map[string]*handlerState
	// resumeDue are the starts whose resume runs are due.
	resumeDue []int
	// The state machine: the current state and visit.
	state string
	seq   int64
	// refusable: a decision was made while the visit's enter handlers
	// were held back by a handler that gave up; the docs let the engine
	// take it or refuse it at once (docs/handlers.md, What opkit guarantees), so the state after it
	// is one of two, and nothing is modelled after it.
	refusable bool
	// paused: the object's pause annotation is set. pauseSeen is the
	// pause an engine recorded last, and not its resume since: the
	// object's own (pausedOwn), its operator's (pausedOperator) or none;
	// pauses and resumes count the records.
	paused          bool
	pauseSeen       string
	pauses, resumes int
	// rerun is the re-run asked for and not taken yet (a paused object,
	// or no engine running); reruns counts each key's re-runs.
	rerun  *rerunRequest
	reruns map[RunID]int
}

// rerunRequest is a re-run asked for: of the run of, with the binding
// context it got (sameInput) or the object as it is when it runs.
type rerunRequest struct {
	of        *Run
	sameInput bool
}

// handlerState is what a handler has done for a life.
type handlerState struct {
	// gen is the last generation a create or update run succeeded for,
	// or that a change not about the handler's fields passed it.
	gen     int64
	deleted bool
	// stalled is the run that gave up, while nothing changed since.
	stalled *Run
	// waiting is the run that failed and waits for its retry.
	waiting *Run
	// attempts counts the attempts of the run in progress since the
	// last success, a new generation or opkit retry.
	attempts int
	// execs counts each key's executions, for its Behaviour.
	execs map[RunID]int
	// resumed are the starts whose resume run finished.
	resumed map[int]bool
	// entered is the last visit whose enter run finished.
	entered int64
	// whenTrue is the when condition as last recorded: true once a run
	// for its turn to true succeeded, false once it is seen false.
	whenTrue bool
}

// WhenHolds is every when handler's condition over the spec (a
// ConfigMap's data), as Operator renders it: int(a) is odd.
func WhenHolds(spec map[string]string) bool {
	n, err := strconv.Atoi(spec["a"])
	return err == nil && n%2 == 1
}

func newModel(def *Def) *model {
	return &model{def: def, up: true, starts: 1, byID: map[RunID]*Run{}, eventExecs: map[RunID]int{}}
}

// current is the newest life, or nil.
func (m *model) current() *life {
	if len(m.lives) == 0 {
		return nil
	}
	return m.lives[len(m.lives)-1]
}

// apply plays one step. held: the step after is OpCrash, which kills
// the engine in the first run this step causes: the step is not settled
// here.
func (m *model) apply(s Step, held bool) {
	l := m.current()
	switch s.Op {
	case OpCreate:
		m.create(map[string]string{"a": "0", "b": "0"})
	case OpChange:
		m.nextRev++
		m.change(l, s.Field, strconv.Itoa(m.nextRev))
	case OpDeliver:
		consumed := m.def.Source.Consumed()
		if !m.up && !consumed {
			// No engine listens: the sender gets no answer, and nothing
			// is recorded (the generator draws none).
			return
		}
		// A NATS message published while no engine runs waits in the
		// stream: the next start records and handles it (its object, not
		// drawn then, is applied only while the engine runs).
		a := ""
		if m.def.Source.Object && m.up {
			// The source's object is applied as the delivery is handled,
			// at once: created, or its spec.a changed (server-side apply).
			m.nextRev++
			a = strconv.Itoa(m.nextRev)
			m.applyObject(l, a)
		}
		d := &Delivery{N: s.Delivery, Payload: DeliveryPayload(s.Delivery, a), Outcome: DeliveryHandled}
		m.deliveries = append(m.deliveries, d)
		m.pending = append(m.pending, d)
		if !consumed {
			m.answers = append(m.answers, 202)
		}
	case OpDeliverAgain:
		if !m.up || m.def.Source.Consumed() {
			return // not drawn: a NATS message published again is a new one
		}
		// A replay: recorded Refused, answered 409, nothing runs.
		if d := m.delivery(s.Delivery); d != nil {
			d.Replays++
		}
		m.answers = append(m.answers, 409)
	case OpRedeliver:
		if !m.canRedeliver(s.Delivery) {
			return // not drawn
		}
		orig := m.delivery(s.Delivery)
		// docs/events.md, "Redelivering on purpose": a new delivery
		// record, the sender's id and payload kept, its handlers on event
		// run under keys of their own; the source's object applied again
		// (only while the engine runs: at a start, its runs and those of
		// the changes made meanwhile would be in no order).
		if a := orig.Payload["a"]; m.def.Source.Object && m.up && a != "" {
			m.applyObject(l, a)
		}
		m.redeliveries++
		d := &Delivery{N: orig.N, Redelivery: m.redeliveries, Payload: orig.Payload, Outcome: DeliveryHandled}
		m.deliveries = append(m.deliveries, d)
		m.pending = append(m.pending, d)
	case OpTouch:
		// An annotation: neither the generation nor a projection moves.
	case OpDelete:
		l.deleting = true
		if m.def.Kind == Watch || !m.hasDelete() || !l.seen {
			// A watched object goes at once; a custom resource without
			// opkit's finalizer (no delete handler, or never reconciled
			// by an engine) too.
			l.exists = false
		}
	case OpRetry:
		// opkit retry: a stalled handler's failed attempts are cleared
		// and it runs again.
		for _, hs := range l.hs {
			if hs.stalled != nil {
				hs.stalled, hs.attempts = nil, 0
			}
		}
	case OpDecide:
		// A person's decision is taken, once the visit's enter handlers
		// are done (a handler that gave up holds none back); were they
		// not, it is taken or refused at once, never left waiting.
		if m.up {
			m.settle()
		}
		if m.held(l) {
			l.refusable = true
		}
		m.move(l, s.Choice)
	case OpPause:
		l.paused = true
	case OpResume:
		l.paused = false
	case OpPauseOperator:
		m.opPaused = true
	case OpResumeOperator:
		m.opPaused = false
	case OpRerun:
		// Taken when an engine next steps the object (docs/handlers.md,
		// "opkit rerun": once it has no run in flight; a paused object
		// waits for resume), before what is due; a request on an object
		// deleted first is never taken.
		if of := m.lastRun(l, s.Handler); of != nil {
			l.rerun = &rerunRequest{of: of, sameInput: s.SameInput}
		}
	case OpStop:
		m.up = false
		return
	case OpStart:
		m.start()
	case OpCrash:
		// The engine was killed in the first run the step before caused:
		// that run is interrupted and runs again after the start, with
		// its key, so the step's runs all come after the start. A step
		// that caused no run was done with before the kill. A delivery's
		// first run is its first handler's on event; the delivery stays
		// Pending, and the next start handles it.
		// In another handler than the first (s.Handler), those before it
		// run first; should one give up, the delivery ends Failed and the
		// engine is killed once quiet.
		if ev := m.def.EventHandlers(); len(m.pending) > 0 && len(ev) > 0 {
			held := cmp.Or(s.Handler, ev[0].Name)
			d := m.pending[0]
			if m.handle(d, held) {
				m.interrupted = append(m.interrupted, d.run(held))
			} else {
				m.pending = m.pending[1:]
			}
		} else if m.due() {
			m.interrupted = append(m.interrupted, m.dueRun)
		} else {
			m.settle()
		}
		m.start()
	}
	if m.up && !held {
		m.settle()
	}
}

// due reports whether a run is due now, changing nothing but what the
// engine would have recorded without a run (changes that pass handlers,
// a transition no enter run holds back).
func (m *model) due() bool {
	m.dry = true
	defer func() { m.dry = false }()
	for {
		progress := false
		for i, l := range m.lives {
			if m.def.Kind == Watch && i > 0 && m.deletePending(m.lives[i-1]) {
				break
			}
			m.dueRun = RunID{}
			if m.step(l) {
				if m.dueRun != (RunID{}) {
					return true
				}
				progress = true // a transition, made without a run
				break
			}
		}
		if !progress {
			return false
		}
	}
}

// start is an engine start: each object handled before it gets its
// resume runs (docs/handlers.md: "once per start").
func (m *model) start() {
	m.up = true
	m.starts++
	for _, l := range m.lives {
		// The resume runs of an earlier start that have not run (held
		// back, or interrupted by this start's SIGKILL) are replaced by
		// this start's: a resume run's key names its start.
		l.resumeDue = nil
		if l.exists && !l.deleting && l.handled {
			l.resumeDue = []int{m.starts}
		}
	}
}

func (m *model) hasDelete() bool {
	return slices.ContainsFunc(m.def.Handlers, func(h Handler) bool { return h.Fires(Delete) })
}

// create is a new life of the object, with spec.
func (m *model) create(spec map[string]string) {
	l := &life{n: len(m.lives) + 1, exists: true, gen: 1, specs: []map[string]string{nil, spec}, hs: map[string]*handlerState{}}
	for _, h := range m.def.Handlers {
		l.hs[h.Name] = &handlerState{execs: map[RunID]int{}, resumed: map[int]bool{}}
	}
	m.lives = append(m.lives, l)
	if m.def.States != nil {
		// A new object enters its initial state first.
		l.state, l.seq = StateStart, 1
	}
}

// change sets l's spec field to value.
func (m *model) change(l *life, field, value string) {
	spec := maps.Clone(l.specs[l.gen])
	spec[field] = value
	if m.def.Kind == Watch && l.gen > l.seenGen {
		// A watched object's generation counts the changes an engine
		// saw: those made while none ran are one.
		l.specs[l.gen] = spec
		return
	}
	l.gen++
	l.specs = append(l.specs, spec)
	// A new generation starts afresh, from attempt 1, the handlers
	// that gave up included.
	for _, hs := range l.hs {
		hs.stalled, hs.attempts = nil, 0
	}
}

// applyObject is the source's object template applied, server-side, with
// spec.a set to a: the object created when there is none, its spec.a
// changed when it holds another value (an apply that changes nothing
// makes no generation).
func (m *model) applyObject(l *life, a string) {
	switch {
	case l == nil || !l.exists:
		m.create(map[string]string{"a": a})
	case l.specs[l.gen]["a"] != a:
		m.change(l, "a", a)
	}
}

// delivery is the sender's delivery n, or nil.
func (m *model) delivery(n int) *Delivery {
	for _, d := range m.deliveries {
		if d.N == n && d.Redelivery == 0 {
			return d
		}
	}
	return nil
}

// canRedeliver reports whether the sender's delivery n may be redelivered
// in a history (opkit events redeliver): accepted and handled (neither it
// nor a redelivery of it Pending, which the engine refuses), and the
// source's object, when it applies one, applied only while the engine
// runs and never while the object is being deleted.
func (m *model) canRedeliver(n int) bool {
	orig := m.delivery(n)
	if orig == nil || m.def.Source == nil {
		return false
	}
	for _, d := range m.pending {
		if d.N == n {
			return false
		}
	}
	if m.def.Source.Object {
		l := m.current()
		return m.up && (l == nil || !l.exists || !l.deleting)
	}
	return true
}

// run is the run of d's handler on event.
func (d *Delivery) run(handler string) RunID {
	return RunID{Handler: handler, Trigger: Event, Delivery: d.N, Redelivery: d.Redelivery}
}

// handleDeliveries handles the pending deliveries (docs/events.md, "What
// happens to a delivery"): each handler on event, in declared order, one
// after the other, its run retried with its key by its retry policy; one
// that gave up ends the delivery's handling, Failed. Deliveries are apart
// from the object's runs: nothing orders the two.
func (m *model) handleDeliveries() {
	for _, d := range m.pending {
		m.handle(d, "")
	}
	m.pending = nil
}

// handle runs d's handlers on event, up to (not including) the handler
// until, "" for all, and reports whether it got there: no handler gave
// up. A handler that succeeded for d before (an engine ago) does not run
// again: its key.
func (m *model) handle(d *Delivery, until string) bool {
	for _, h := range m.def.EventHandlers() {
		if h.Name == until {
			return true
		}
		id := d.run(h.Name)
		r := m.byID[id]
		if r == nil {
			r = &Run{Handler: h.Name, Trigger: Event, Delivery: d.N, Redelivery: d.Redelivery}
			m.byID[id] = r
			m.runs = append(m.runs, r)
		}
		if len(r.Outcomes) > 0 && r.Ended() == Succeeded {
			continue
		}
		// Attempts count from 1 in each engine: one a SIGKILL
		// interrupted is no attempt, and is not among the outcomes.
		for attempt := 1; ; attempt++ {
			m.eventExecs[id]++
			b := h.Behaviour
			switch {
			case m.eventExecs[id] <= b.Fail && (b.Permanent || attempt >= h.MaxAttempts):
				r.Outcomes = append(r.Outcomes, GaveUp)
				d.Outcome = DeliveryFailed
				return false
			case m.eventExecs[id] <= b.Fail:
				r.Outcomes = append(r.Outcomes, Failed)
				continue
			}
			r.Outcomes = append(r.Outcomes, Succeeded)
			break
		}
	}
	return true
}

// settle runs everything due, one run at a time, until nothing is.
func (m *model) settle() {
	m.handleDeliveries()
	m.seePauses()
	for {
		progress := false
		for i, l := range m.lives {
			// A watched object created again under its name waits until
			// the delete runs of the one before are done.
			if m.def.Kind == Watch && i > 0 && m.deletePending(m.lives[i-1]) {
				break
			}
			if m.step(l) {
				progress = true
				break
			}
		}
		if !progress {
			break
		}
	}
	// Quiet: an object every create and update handler is done with is
	// handled (status.opkit.handled is recorded when nothing is due).
	for _, l := range m.lives {
		if l.exists && !l.deleting && !slices.ContainsFunc(m.def.Handlers, func(h Handler) bool {
			return (h.Fires(Create) || h.Fires(Update)) && l.hs[h.Name].gen < l.gen
		}) {
			l.handled = true
		}
	}
}

// seePauses records each object's pause and resume as an engine sees
// them (docs/handlers.md: "records each pause and each resume once"): a
// pause and its resume both made while no engine ran are never seen. A
// watched object that is gone takes its pause with it: its resume is
// recorded, by opkit, when its delete handlers are to run; a custom
// resource that is gone leaves nothing to record.
//
// The pause recorded is the object's own while both its own and its
// operator's hold ("its own pause is the one its condition and records
// name while both hold"): an object paused on its own and then under its
// operator's records nothing more; its own pause ended under the
// operator's records its resume and the operator's pause; the operator's
// pause ended under its own records nothing, its own pause set under the
// operator's records that pause; a resume is recorded when neither holds
// ("every object ... is recorded resumed once, by who resumed the
// operator"). A watched object that is gone and whose delete handlers are
// held by its operator's pause only is recorded resumed from its own
// (opkit.EndPause: "Its operator's pause still holds them until the
// operator is resumed").
func (m *model) seePauses() {
	for _, l := range m.lives {
		gone := !l.exists && m.def.Kind == Watch && m.deletePending(l)
		if !l.exists && !gone {
			continue
		}
		if gone && l.pauseSeen == "" && !m.opPaused {
			continue
		}
		now := ""
		switch {
		case l.paused && !gone:
			now = pausedOwn
		case m.opPaused:
			now = pausedOperator
		}
		if gone {
			l.paused = false
		}
		if now == l.pauseSeen {
			continue
		}
		if l.pauseSeen != "" && (now == "" || l.pauseSeen == pausedOwn && now == pausedOperator) {
			l.resumes++
		}
		if now != "" {
			l.pauses++
		}
		l.pauseSeen = now
	}
}

// The pauses an engine records of an object (life.pauseSeen).
const (
	pausedOwn      = "own"
	pausedOperator = "operator"
)

// deletePending reports whether l still has delete runs to make that a
// new object of its name waits for. One of its delete handlers that gave
// up ends the wait, also for the delete runs it holds back: the old
// object's record is dropped and they run no more (docs/handlers.md,
// the watched object's delete).
func (m *model) deletePending(l *life) bool {
	if !l.deleting || !l.seen {
		return false
	}
	pending := false
	for _, h := range m.def.Handlers {
		hs := l.hs[h.Name]
		if !h.Fires(Delete) || hs.deleted {
			continue
		}
		if stalledOn(hs, Delete) {
			return false
		}
		pending = true
	}
	return pending
}

// step makes the next run due for l, if any, and reports whether it did.
// Handlers run one at a time, in declared order, the most urgent run
// first: create and update runs, then the state's enter runs and its
// transition, then resume runs. A handler that failed and waits for its
// retry, or that gave up, holds back its other runs and those of the
// handlers declared after it (docs/handlers.md: "so that provision can
// come before announce"); the handlers declared before it go on
// meanwhile. One that gave up holds them back until the spec changes or
// opkit retry.
func (m *model) step(l *life) bool {
	if l.paused && l.exists || m.opPaused && (l.exists || l.deleting) {
		// Nothing runs for a paused object ("none starts — create,
		// update, delete, resume or schedule"), nor for any object of an
		// operator paused whole ("no handler of any of its objects
		// starts, objects created meanwhile included"), a watched object
		// gone included; it is still seen. One being deleted keeps
		// opkit's finalizer until it is resumed.
		if l.exists && !l.deleting {
			l.seen, l.seenGen = true, l.gen
		}
		return false
	}
	if l.deleting {
		l.rerun = nil // a request on an object being deleted is not taken
		return m.stepDelete(l)
	}
	if !l.exists {
		return false
	}
	l.seen, l.seenGen = true, l.gen
	if l.rerun != nil {
		// "A person's request to run a handler again comes before what is
		// due."
		m.rerun(l)
		return true
	}
	hs := m.def.Handlers
	limit := slices.IndexFunc(hs, func(h Handler) bool {
		st := l.hs[h.Name]
		return st.stalled != nil || st.waiting != nil
	})
	if limit < 0 {
		limit = len(hs)
	}
	for i := range hs {
		h := &hs[i]
		st := l.hs[h.Name]
		if creates := h.Fires(Create) || h.Fires(Update); st.gen >= l.gen || !creates {
			st.gen = max(st.gen, l.gen)
			continue
		}
		var t Trigger
		switch {
		case st.gen == 0 && h.Fires(Create):
			t = Create
		case st.gen > 0 && h.Fires(Update) && touches(h, l.specs[st.gen], l.specs[l.gen]):
			t = Update
		default:
			st.gen = l.gen // nothing of this change is about it
			continue
		}
		if i >= limit {
			continue
		}
		m.execute(l, h, RunID{Life: l.n, Handler: h.Name, Trigger: t, Gen: l.gen})
		return true
	}
	if l.state != "" {
		// The visit's enter runs are held back by nothing declared before
		// them (docs/states.md, "A handler that gave up").
		if m.stepState(l, hs) {
			return true
		}
		if l.state == StateStart && m.entered(l) {
			m.move(l, StateAsk) // the unconditional transition
			return true
		}
	}
	// when and resume runs, in declared order (a handler's when first).
	cond := WhenHolds(l.specs[l.gen])
	for i := range hs {
		if st := l.hs[hs[i].Name]; hs[i].Fires(When) && !cond {
			st.whenTrue = false // seen false: its next turn to true is a transition
		}
	}
	for i := range hs[:limit] {
		h := &hs[i]
		st := l.hs[h.Name]
		if h.Fires(When) && cond && !st.whenTrue {
			m.execute(l, h, RunID{Life: l.n, Handler: h.Name, Trigger: When, Gen: l.gen})
			return true
		}
		for _, start := range l.resumeDue {
			if h.Fires(Resume) && !st.resumed[start] {
				m.execute(l, h, RunID{Life: l.n, Handler: h.Name, Trigger: Resume, Gen: l.gen, Start: start})
				return true
			}
		}
	}
	if limit == len(hs) {
		l.resumeDue = nil
		return false
	}
	// Nothing else can go: a waiting handler's retry comes, the first not
	// held back's, or an enter run's, which nothing holds back.
	for i := range hs {
		if w := l.hs[hs[i].Name].waiting; w != nil && (i == limit || w.Trigger == Enter) {
			m.execute(l, &hs[i], w.ID())
			return true
		}
	}
	return false // held back by a handler that gave up
}

// stepState makes the next enter run of the visit, if any, among hs. A
// handler that gave up on another trigger makes none (the visit does not
// wait for it), and one that waits for a retry makes its retry first.
func (m *model) stepState(l *life, hs []Handler) bool {
	for i := range hs {
		h := &hs[i]
		if !h.Fires(Enter) || !slices.Contains(h.States, l.state) || l.hs[h.Name].entered >= l.seq || gaveUpElsewhere(l.hs[h.Name]) || l.hs[h.Name].waiting != nil {
			continue
		}
		m.execute(l, h, RunID{Life: l.n, Handler: h.Name, Trigger: Enter, Seq: l.seq})
		return true
	}
	return false
}

// entered reports whether every enter handler of l's state finished for
// the visit (succeeded or gave up), or makes no run of it: one that gave
// up on another trigger.
func (m *model) entered(l *life) bool {
	for _, h := range m.def.Handlers {
		if h.Fires(Enter) && slices.Contains(h.States, l.state) && l.hs[h.Name].entered < l.seq && !gaveUpElsewhere(l.hs[h.Name]) {
			return false
		}
	}
	return true
}

// gaveUpElsewhere reports whether hs gave up on a run other than an enter
// run: until a new generation or opkit retry, it makes no enter run.
func gaveUpElsewhere(hs *handlerState) bool {
	return hs.stalled != nil && hs.stalled.Trigger != Enter
}

// held reports whether the enter runs of l's visit are not done.
func (m *model) held(l *life) bool {
	return !m.entered(l)
}

// move takes a transition to state: a new visit.
func (m *model) move(l *life, state string) {
	l.state, l.seq = state, l.seq+1
}

// stepDelete makes the next delete run of a deleted object, and lets a
// custom resource go once they are done.
func (m *model) stepDelete(l *life) bool {
	if !l.seen {
		return false // created and deleted while no engine ran
	}
	for i := range m.def.Handlers {
		h := &m.def.Handlers[i]
		hs := l.hs[h.Name]
		if !h.Fires(Delete) || hs.deleted {
			continue
		}
		if stalledOn(hs, Delete) {
			return false // the finalizer stays until opkit retry
		}
		// A delete run's key names a generation the docs do not fix (the
		// API server moves a custom resource's when it is deleted).
		m.execute(l, h, RunID{Life: l.n, Handler: h.Name, Trigger: Delete})
		return true
	}
	l.exists = false
	return false
}

// stalledOn reports whether hs gave up on a run of trigger t.
func stalledOn(hs *handlerState, t Trigger) bool {
	return hs.stalled != nil && hs.stalled.Trigger == t
}

// execute runs one attempt of id's run for h, as its Behaviour says.
func (m *model) execute(l *life, h *Handler, id RunID) {
	if m.dry {
		m.dueRun = id
		return
	}
	hs := l.hs[h.Name]
	r := m.byID[id]
	if r == nil {
		r = &Run{Life: id.Life, Handler: id.Handler, Trigger: id.Trigger, Gen: id.Gen, Start: id.Start, Seq: id.Seq}
		if id.Trigger == Create || id.Trigger == Update {
			r.Spec, r.SpecGen = l.specs[id.Gen], id.Gen
		}
		m.byID[id] = r
		m.runs = append(m.runs, r)
		hs.attempts = 0
	}
	hs.execs[id]++
	hs.attempts++
	hs.waiting = nil
	r.SawCount = l.count
	b := h.Behaviour
	switch {
	case hs.execs[id] <= b.Fail && (b.Permanent || hs.attempts >= h.MaxAttempts):
		r.Outcomes = append(r.Outcomes, GaveUp)
		m.gaveUp(l, h, r)
	case hs.execs[id] <= b.Fail:
		r.Outcomes = append(r.Outcomes, Failed)
		hs.waiting = r // retried after its back-off
	case b.Write && m.def.Kind == Watch:
		// A result with status fails the run permanently: opkit never
		// writes to a watched object.
		r.Outcomes = append(r.Outcomes, GaveUp)
		m.gaveUp(l, h, r)
	default:
		r.Outcomes = append(r.Outcomes, Succeeded)
		if b.Write {
			l.count++
		}
		hs.attempts = 0
		switch id.Trigger {
		case Create, Update:
			hs.gen = id.Gen
		case Delete:
			hs.deleted = true
		case Resume:
			hs.resumed[id.Start] = true
		case When:
			hs.whenTrue = true
		case Enter:
			hs.entered = id.Seq
		}
	}
}

// rerunDue reports whether step s, made next, lets a re-run be taken (or
// asks for one): Generate draws no SIGKILL after it, as the first run it
// causes is the re-run's, which one cuts for good (docs/handlers.md: ask
// again).
func (m *model) rerunDue(s Step) bool {
	l := m.current()
	return s.Op == OpRerun || l != nil && l.rerun != nil
}

// lastRun is the last create or update run of handler for l, nil for
// none: what OpRerun asks for again.
func (m *model) lastRun(l *life, handler string) *Run {
	for _, r := range slices.Backward(m.runs) {
		if r.Life == l.n && r.Handler == handler && (r.Trigger == Create || r.Trigger == Update) {
			return r
		}
	}
	return nil
}

// rerun makes the re-run l's request asks for, and takes the request
// (docs/handlers.md, "opkit rerun"):
// trigger rerun, the key of the run it repeats and /rerun/<n>, one
// attempt ("it is not retried"), which fails as the handler's Behaviour
// says for a key it has not run before; it "changes none of the handler's
// records (the generation it is done with, its failed attempts)". A
// result that writes status is written, as any run's.
func (m *model) rerun(l *life) {
	q := l.rerun
	id := RunID{Life: l.n, Handler: q.of.Handler, Trigger: Rerun, Gen: q.of.Gen, Rerun: l.reruns[q.of.ID()] + 1}
	if m.dry {
		m.dueRun = id
		return
	}
	l.rerun = nil
	if l.reruns == nil {
		l.reruns = map[RunID]int{}
	}
	l.reruns[q.of.ID()] = id.Rerun
	r := &Run{Life: l.n, Handler: id.Handler, Trigger: Rerun, Gen: id.Gen, Rerun: id.Rerun, SameInput: q.sameInput, Of: q.of,
		Spec: l.specs[l.gen], SpecGen: l.gen, SawCount: l.count}
	if q.sameInput {
		r.Spec, r.SpecGen, r.SawCount = q.of.Spec, q.of.SpecGen, q.of.SawCount
	}
	m.byID[id] = r
	m.runs = append(m.runs, r)
	b := m.def.Handler(r.Handler).Behaviour
	switch {
	case b.Fail > 0, b.Write && m.def.Kind == Watch:
		// Its key's first execution, and its only one.
		r.Outcomes = append(r.Outcomes, GaveUp)
	default:
		r.Outcomes = append(r.Outcomes, Succeeded)
		if b.Write {
			// The count its binding context held, and one: with
			// --same-input, the one its run saw (a count back in time).
			l.count = r.SawCount + 1
		}
	}
}

// gaveUp records that r gave up: the handler is stalled, but an enter run
// that gave up is done with for its visit (docs/states.md: the state
// machine goes on).
func (m *model) gaveUp(l *life, h *Handler, r *Run) {
	hs := l.hs[h.Name]
	if r.Trigger == Enter {
		hs.entered = r.Seq
		return
	}
	hs.stalled = r
}

// touches reports whether the change from before to after is about h's
// fields (any change, for a handler that names none).
func touches(h *Handler, before, after map[string]string) bool {
	for k, v := range after {
		if before[k] != v && (len(h.Fields) == 0 || slices.Contains(h.Fields, k)) {
			return true
		}
	}
	return false
}

func (m *model) expectation() *Expectation {
	e := &Expectation{Runs: m.runs, Starts: m.starts, Interrupted: m.interrupted, Deliveries: m.deliveries, Answers: m.answers}
	for _, l := range m.lives {
		e.Ends = append(e.Ends, End{Life: l.n, Exists: l.exists, Count: l.count, State: l.state, OrRefused: l.refusable, Spec: l.specs[l.gen], Gen: l.gen,
			Pauses: l.pauses, Resumes: l.resumes})
	}
	return e
}
