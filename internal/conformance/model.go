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
	RunID
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
	// SameInput: a re-run asked with --same-input, which sees the
	// binding context the run it repeats got.
	SameInput bool
	// Of is, for a re-run, the run it repeats.
	Of *Run
	// SawCount is the status.count the run's last attempt saw (custom
	// resources): what a re-run of it with --same-input sees, and writes
	// one more than.
	SawCount int
	// CausedBy is, for the run a delivery's object caused, that delivery:
	// the create or update run of the generation the delivery's apply
	// made, when it is the first run of the object after that apply. Its
	// first attempt is in the delivery's trace (docs/observability.md:
	// the reconcile that decides the next run continues the object's
	// trace annotation, once). Nil for any other run.
	CausedBy *Delivery
}

// Ended is the last outcome.
func (r *Run) Ended() Outcome { return r.Outcomes[len(r.Outcomes)-1] }

// Continues reports whether attempt i (an index of Outcomes) continues
// the trace of attempt i-1 (docs/observability.md: "every attempt of a
// key after a failure is one trace"): it follows an attempt that Failed.
// An attempt a SIGKILL interrupted, which is not among the Outcomes, is
// in that trace too when it follows one that Failed; one that follows
// no failure, and the attempt that runs again after it, need not be.
func (r *Run) Continues(i int) bool { return i > 0 && r.Outcomes[i-1] == Failed }

// ID names the run as the checker matches it: life, handler, trigger and
// what the trigger is about.
func (r *Run) ID() RunID { return r.RunID }

// RunID identifies a run across the model and the observations.
type RunID struct {
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
	// is, for a run of a redelivery of it, that redelivery's number
	// (Delivery.Redelivery).
	Delivery   int
	Redelivery int
	// Rerun is, for a re-run, the how-manieth re-run of the key it
	// repeats (that of the create or update run of Gen) it is: 1 for the
	// first.
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
	// Waits: a watched object created again under its name, unseen until
	// the delete runs of the one before are done.
	Waits bool
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
	// Trace is the trace id the record's trace must have
	// (docs/observability.md): its sender's, SenderTraceID, which the
	// receipt continues; "" for a redelivery, a trace of its own, another
	// than the delivery's it redelivers. Every run on event of it is in
	// its record's trace.
	Trace string
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
	// caused is the write of a delivery's object that the object's next
	// run continues the trace of, until that run is made.
	caused *causedBy
}

// causedBy is a delivery's write of the object that no run continued
// yet: its trace annotation, which the next run's reconcile continues
// (docs/observability.md, "Through the objects"). gen is the generation
// the delivery's apply made: only the create or update run of that
// generation, if it is that next run, is promised the delivery's trace
// (Run.CausedBy).
type causedBy struct {
	d   *Delivery
	gen int64
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
		d := &Delivery{N: s.Delivery, Outcome: DeliveryHandled, Trace: SenderTraceID(s.Delivery)}
		a := ""
		if m.def.Source.Object && m.up {
			// The source's object is applied as the delivery is handled,
			// at once: created, or its spec.a changed (server-side apply).
			m.nextRev++
			a = strconv.Itoa(m.nextRev)
			m.applyObject(l, a, d)
		}
		d.Payload = DeliveryPayload(s.Delivery, a)
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
		m.redeliveries++
		d := &Delivery{N: orig.N, Redelivery: m.redeliveries, Payload: orig.Payload, Outcome: DeliveryHandled}
		if a := orig.Payload["a"]; m.def.Source.Object && m.up && a != "" {
			m.applyObject(l, a, d)
		}
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
// a transition no enter run holds back, and with a transition the object
// handled, when every create and update handler is done).
func (m *model) due() bool {
	m.dry = true
	defer func() { m.dry = false }()
	for {
		progress := false
		for i, l := range m.lives {
			if m.waits(i) {
				break
			}
			m.dueRun = RunID{}
			if m.step(l) {
				if m.dueRun != (RunID{}) {
					return true
				}
				// A transition, made without a run: its status write
				// records the object handled too, if it is.
				m.recordHandled(l)
				progress = true
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

// applyObject is the source's object template applied by delivery d,
// server-side, with spec.a set to a: the object created when there is
// none, its spec.a changed when it holds another value (an apply that
// changes nothing makes no generation).
//
// The write carries d's trace (the annotation opkit.dev/traceparent),
// which the object's next run continues: the create or update run of the
// generation it made, if that is the next run (Run.CausedBy). An apply
// that changes nothing writes the annotation all the same: the next run,
// if it is still to come for the generation an earlier delivery made, is
// in d's trace, not that one's.
func (m *model) applyObject(l *life, a string, d *Delivery) {
	switch {
	case l == nil || !l.exists:
		m.create(map[string]string{"a": a})
		l = m.current()
	case l.specs[l.gen]["a"] != a:
		m.change(l, "a", a)
	default:
		if l.caused != nil {
			l.caused.d = d
		}
		return
	}
	l.caused = &causedBy{d: d, gen: l.gen}
}

// The pauses an engine records of an object (life.pauseSeen).
const (
	pausedOwn      = "own"
	pausedOperator = "operator"
)

func (m *model) expectation() *Expectation {
	e := &Expectation{Runs: m.runs, Starts: m.starts, Interrupted: m.interrupted, Deliveries: m.deliveries, Answers: m.answers}
	for i, l := range m.lives {
		e.Ends = append(e.Ends, End{Life: l.n, Exists: l.exists, Count: l.count, State: l.state, OrRefused: l.refusable, Spec: l.specs[l.gen], Gen: l.gen,
			Pauses: l.pauses, Resumes: l.resumes, Waits: m.waits(i)})
	}
	return e
}
