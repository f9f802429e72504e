package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Space is the part of the definition space the generator draws from.
type Space struct {
	// Kinds are the kinds of operator drawn, each as likely.
	Kinds []Kind
	// Triggers are the triggers a handler's on: is drawn from (Enter
	// only with States).
	Triggers []Trigger
	// States: custom-resource operators may have the Machine.
	States bool
	// MaxHandlers bounds the handlers of a definition (at least 1).
	MaxHandlers int
	// MaxSteps bounds a history's steps before the engine's last start.
	MaxSteps int
	// Ends: after each step the history ends with odds 1 in Ends (8
	// when 0), if MaxSteps has not ended it.
	Ends int
	// Sources: an operator may have a source, a webhook, CloudEvents, a
	// NATS stream or a Kafka topic, with up to two handlers on event, and deliveries
	// (and a webhook's or CloudEvent's replays) in its history.
	Sources bool
	// Pauses: the history may pause and resume the object's handlers
	// (opkit pause and opkit resume), while an engine runs or not.
	Pauses bool
	// Reruns: the history may ask for a handler's last create or update
	// run again (opkit rerun, with or without --same-input), while an
	// engine runs or not.
	Reruns bool
	// Redeliveries: the history may ask for a delivery accepted and
	// handled to be handled again (opkit events redeliver), while an
	// engine runs or, for a source that applies no object, not.
	Redeliveries bool
	// OperatorPauses: the operator may be an Operator of the cluster
	// (Def.Cluster), whose history pauses and resumes it whole (opkit
	// pause --operator OP --all), while an engine runs or not.
	OperatorPauses bool

	// SourceOdds: one case in SourceOdds has a source (with Sources; 3
	// when 0). SourceKinds are the kinds of source drawn, each as likely
	// (all four when empty).
	SourceOdds  int
	SourceKinds []SourceKind
	// ClusterOdds: one case in ClusterOdds is an Operator in the cluster
	// (with OperatorPauses; 4 when 0).
	ClusterOdds int
	// Plot: a history follows these ops in order where it can, each
	// drawn eight times as often as otherwise until it is made, then the
	// next: the meetings a space is for (a delivery, then a stop, then a
	// redelivery while no engine runs) are made in most of its cases.
	Plot []Op
	// Name says what the space stresses, in make soak's report.
	Name string
}

// DefaultSpace is what TestConformance and make soak draw from.
var DefaultSpace = Space{
	Kinds:          []Kind{CustomResource, CustomResource, Watch},
	Triggers:       []Trigger{Create, Update, Delete, Resume, When},
	States:         true,
	MaxHandlers:    3,
	MaxSteps:       8,
	Sources:        true,
	Pauses:         true,
	Reruns:         true,
	Redeliveries:   true,
	OperatorPauses: true,
	Name:           "every feature",
}

// Spaces are the spaces TestConformance and make soak draw from in turn:
// the case of seed s from Spaces[s % len(Spaces)]. The first is
// DefaultSpace; each other, one per kind of source that can be
// redelivered, follows a plot through what DefaultSpace seldom meets,
// so that a soak plays in many cases, not a handful, each feature the
// model draws since its first rows: each source (its messages published
// while no engine runs, its deliveries replayed, redelivered, SIGKILLed
// mid-run), a whole operator's pause across restarts and with the
// object's own, re-runs and redeliveries asked while paused or while no
// engine runs.
var Spaces = []Space{
	DefaultSpace,
	meetings("Kafka", Kafka),
	meetings("NATS", NATS),
	meetings("CloudEvents", CloudEvents),
}

// meetings is a space whose cases have a source of kind and an Operator
// in the cluster, and whose histories follow one plot through the
// meetings DefaultSpace seldom makes: a delivery (and, for CloudEvents, a
// replay), a redelivery SIGKILLed mid-run, the object paused, the engine
// stopped, then, while no engine runs, a message published (NATS,
// Kafka), the whole operator paused, a redelivery and a re-run asked;
// the start, the operator resumed, the object resumed.
func meetings(name string, kind SourceKind) Space {
	sp := DefaultSpace
	sp.Name = name + ", with pauses, re-runs and redeliveries across restarts"
	sp.SourceOdds, sp.SourceKinds, sp.ClusterOdds = 1, []SourceKind{kind}, 1
	sp.MaxSteps, sp.Ends = 14, 32
	sp.Plot = []Op{OpDeliver, OpRedeliver, OpCrash, OpPause, OpRerun, OpStop, OpRedeliver, OpDeliver, OpPauseOperator, OpRerun, OpStart, OpResumeOperator, OpResume}
	if kind == CloudEvents || kind == Webhook {
		sp.Plot = slices.Insert(sp.Plot, 1, OpDeliverAgain)
	}
	return sp
}

// SpaceOf is the space the case of seed s is drawn from.
func SpaceOf(s uint64) Space { return Spaces[s%uint64(len(Spaces))] }

// odds is n, or def when n is 0.
func odds(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// Generate draws a case: a definition, then a history that goes with it
// (each step one that can be made at that point: an object is created
// when there is none, deleted when there is one, the engine started when
// it is stopped...). The same r state gives the same case.
func Generate(r *rand.Rand, sp Space) Case {
	def := genDef(r, sp)
	return Case{Def: def, History: genHistory(r, &def, sp)}
}

func genDef(r *rand.Rand, sp Space) Def {
	d := Def{Kind: sp.Kinds[r.IntN(len(sp.Kinds))]}
	if sp.States && d.Kind == CustomResource && r.IntN(4) == 0 {
		d.States = &Machine{}
	}
	n := 1 + r.IntN(sp.MaxHandlers)
	for i := range n {
		h := Handler{Name: fmt.Sprintf("h%d", i+1), MaxAttempts: 2 + r.IntN(2)}
		for len(h.On) == 0 {
			for _, t := range sp.Triggers {
				if r.IntN(2) == 0 {
					h.On = append(h.On, t)
				}
			}
		}
		if d.States != nil && r.IntN(3) == 0 {
			// An enter handler: of the state that needs a person, or of
			// the first one.
			h.On = []Trigger{Enter}
			h.States = []string{[]string{StateAsk, StateStart}[r.IntN(2)]}
		}
		if h.Fires(Update) {
			switch r.IntN(4) {
			case 0:
				h.Fields = []string{"a"}
			case 1:
				h.Fields = []string{"b"}
			}
		}
		switch {
		case d.Kind == CustomResource && r.IntN(5) < 3:
			h.Behaviour.Write = true
		case d.Kind == Watch && r.IntN(10) == 0:
			h.Behaviour.Write = true // refused: a watched object is never written
		}
		if r.IntN(5) < 2 {
			h.Behaviour.Fail = 1 + r.IntN(3)
			h.Behaviour.Permanent = r.IntN(5) == 0
		}
		if h.Fires(Resume) || h.Fires(When) {
			// A resume or when handler does not fail: the docs do not say
			// how its retries interleave with the create and update runs
			// of the handlers declared after it (the engine lets the more
			// urgent run go first once both are due), nor what a later
			// start does with a resume run that gave up.
			h.Behaviour = Behaviour{Write: h.Behaviour.Write && d.Kind == CustomResource}
		}
		d.Handlers = append(d.Handlers, h)
	}
	if sp.Sources && r.IntN(odds(sp.SourceOdds, 3)) == 0 {
		// A source (a webhook, CloudEvents, a NATS stream, a Kafka topic): it applies the object,
		// or runs handlers on event, or both. A handler on event fails or gives up as any
		// other; it writes no status (its run is for the operator).
		kinds := sp.SourceKinds
		if len(kinds) == 0 {
			kinds = []SourceKind{Webhook, NATS, CloudEvents, Kafka}
		}
		d.Source = &Source{Kind: kinds[r.IntN(len(kinds))], Object: d.Kind == CustomResource && r.IntN(2) == 0}
		n := r.IntN(3)
		if !d.Source.Object {
			n = max(n, 1)
		}
		for i := range n {
			h := Handler{Name: fmt.Sprintf("e%d", i+1), On: []Trigger{Event}, MaxAttempts: 2 + r.IntN(2)}
			if r.IntN(5) < 2 {
				h.Behaviour.Fail = 1 + r.IntN(3)
				h.Behaviour.Permanent = r.IntN(5) == 0
			}
			d.Handlers = append(d.Handlers, h)
		}
	}
	// Drawn last, so that the rest of a seed's definition is what it was
	// before the model drew it.
	for i := range d.Handlers {
		d.Handlers[i].Serve = r.IntN(2) == 0
	}
	d.Cluster = sp.OperatorPauses && r.IntN(odds(sp.ClusterOdds, 4)) == 0
	return d
}

func genHistory(r *rand.Rand, d *Def, sp Space) []Step {
	m := newModel(d)
	var steps []Step
	rerunDue := false // the last step's (model.rerunDue): no SIGKILL after it
	plot := 0         // the next step of sp.Plot
	add := func(s Step) {
		rerunDue = m.rerunDue(s)
		steps = append(steps, s)
		m.apply(s, false)
	}
	if r.IntN(5) == 0 {
		// The object is created while no engine runs.
		add(Step{Op: OpStop, Kill: r.IntN(2) == 0})
	}
	delivered := 0
	if d.Source != nil && d.Source.Object && m.up && r.IntN(3) == 0 {
		// The first delivery creates the object.
		delivered++
		add(Step{Op: OpDeliver, Delivery: delivered})
	} else {
		add(Step{Op: OpCreate})
	}
	for len(steps) < sp.MaxSteps && r.IntN(odds(sp.Ends, 8)) != 0 {
		l := m.current()
		if l != nil && l.refusable {
			break // what follows a decision the engine may refuse is not modelled
		}
		var opts []option
		switch {
		case !l.exists:
			opts = append(opts, option{3, Step{Op: OpCreate}})
		case !l.deleting:
			opts = append(opts,
				option{3, Step{Op: OpChange, Field: "a"}},
				option{2, Step{Op: OpChange, Field: "b"}},
				option{1, Step{Op: OpTouch}},
				option{2, Step{Op: OpDelete}},
			)
		}
		if l.exists && m.stalled(l) {
			opts = append(opts, option{3, Step{Op: OpRetry}})
		}
		if sp.Pauses && l.exists && !l.deleting && !l.paused {
			opts = append(opts, option{2, Step{Op: OpPause}})
		}
		if l.exists && l.paused {
			// Resumed, also while it is being deleted: a paused custom
			// resource keeps opkit's finalizer until then.
			opts = append(opts, option{4, Step{Op: OpResume}})
		}
		if sp.Reruns && l.exists && !l.deleting && l.rerun == nil {
			// One request at a time: opkit rerun refuses a second while
			// one is on the object, not answered yet.
			var ran []string
			for _, h := range d.Handlers {
				if m.lastRun(l, h.Name) != nil {
					ran = append(ran, h.Name)
				}
			}
			if len(ran) > 0 {
				opts = append(opts, option{2, Step{Op: OpRerun, Handler: ran[r.IntN(len(ran))], SameInput: r.IntN(2) == 0}})
			}
		}
		if d.Cluster {
			if m.opPaused {
				opts = append(opts, option{4, Step{Op: OpResumeOperator}})
			} else {
				opts = append(opts, option{2, Step{Op: OpPauseOperator}})
			}
		}
		if m.up && l.exists && !l.deleting && !l.paused && !m.opPaused && l.state == StateAsk {
			opts = append(opts, option{4, Step{Op: OpDecide, Choice: []string{StateDone, StateStart}[r.IntN(2)]}})
		}
		if d.Source != nil && (m.up || d.Source.Consumed() && !d.Source.Object) {
			// Posted to a webhook while the engine runs: one posted while
			// none does gets no answer, and nothing is recorded. Published
			// to a NATS stream at any time: the next start handles what
			// came meanwhile; but the object is applied only while the
			// engine runs (applied at a start, its runs and those of the
			// changes made meanwhile are not ordered).
			if !d.Source.Object || !l.exists || !l.deleting {
				opts = append(opts, option{5, Step{Op: OpDeliver, Delivery: delivered + 1}})
			}
			if delivered > 0 && !d.Source.Consumed() {
				opts = append(opts, option{3, Step{Op: OpDeliverAgain, Delivery: 1 + r.IntN(delivered)}})
			}
		}
		if sp.Redeliveries && delivered > 0 {
			if n := 1 + r.IntN(delivered); m.canRedeliver(n) {
				opts = append(opts, option{3, Step{Op: OpRedeliver, Delivery: n}})
			}
		}
		if m.up {
			opts = append(opts, option{1, Step{Op: OpStop, Kill: r.IntN(2) == 0}})
			last := steps[len(steps)-1].Op
			if last != OpCrash && last != OpStop && (!delivers(last) || !d.Source.Object) && !startsWithDeliveries(steps) && !rerunDue {
				crash := Step{Op: OpCrash}
				if ev := d.EventHandlers(); delivers(last) && len(ev) > 1 {
					// In the first run of one of the delivery's handlers.
					if i := r.IntN(len(ev)); i > 0 {
						crash.Handler = ev[i].Name
					}
				}
				weight := 2
				if delivers(last) {
					weight = 4 // a SIGKILL while a delivery is handled
				}
				opts = append(opts, option{weight, crash})
			}
		} else {
			opts = append(opts, option{3, Step{Op: OpStart}})
		}
		var s Step
		s, plot = draw(r, sp, opts, plot)
		if s.Op == OpDeliver {
			delivered++
		}
		add(s)
	}
	if !m.up {
		add(Step{Op: OpStart})
	}
	if l := m.current(); d.Source != nil && delivered == 0 && (!d.Source.Object || !l.exists || !l.deleting) {
		// A source's case posts at least one delivery.
		add(Step{Op: OpDeliver, Delivery: 1})
	}
	return steps
}

// option is a step a history can take next, and how likely it is drawn.
type option struct {
	weight int
	step   Step
}

// draw picks one of opts by weight, the first step of sp.Plot from plot
// on that is among them sixteen times more; it returns the step and
// where the plot goes on.
func draw(r *rand.Rand, sp Space, opts []option, plot int) (Step, int) {
	next := len(sp.Plot)
	for j := plot; j < len(sp.Plot) && next == len(sp.Plot); j++ {
		if slices.ContainsFunc(opts, func(o option) bool { return o.step.Op == sp.Plot[j] }) {
			next = j
		}
	}
	total := 0
	for i, o := range opts {
		if next < len(sp.Plot) && o.step.Op == sp.Plot[next] {
			opts[i].weight *= 16
		}
		total += opts[i].weight
	}
	pick := r.IntN(total)
	for _, o := range opts {
		if pick < o.weight {
			if next < len(sp.Plot) && o.step.Op == sp.Plot[next] {
				plot = next + 1
			}
			return o.step, plot
		}
		pick -= o.weight
	}
	panic("unreachable: pick < total")
}

// stalled reports whether a handler gave up on l and waits for opkit
// retry or a change.
func (m *model) stalled(l *life) bool {
	for _, hs := range l.hs {
		if hs.stalled != nil {
			return true
		}
	}
	return false
}

// startsWithDeliveries reports whether the history's last step is a start
// with deliveries to handle, published to a NATS stream while the engine
// was stopped: no crash is drawn in its first run, as that is one of a
// delivery's handlers or one of the object's, in no order the docs say.
func startsWithDeliveries(steps []Step) bool {
	if len(steps) == 0 || steps[len(steps)-1].Op != OpStart {
		return false
	}
	for i := len(steps) - 2; i >= 0 && steps[i].Op != OpStop; i-- {
		if delivers(steps[i].Op) {
			return true
		}
	}
	return false
}

// delivers reports whether a step of op makes a delivery to handle: the
// sender's, or a redelivery.
func delivers(op Op) bool { return op == OpDeliver || op == OpRedeliver }
