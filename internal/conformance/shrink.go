package conformance

import "slices"

// Valid reports whether c's history can be played: an object is created
// only when there is none, changed or deleted only when there is one not
// being deleted, decided on only in Ask, the engine stopped only when it
// runs and started only when it does not, a crash only when it runs after
// a step that was not a stop, and the engine runs at the end. A
// delivery is posted to a webhook while the engine runs, each id once,
// and again only after it was; published to a NATS stream at any time
// (but while the engine runs when the source applies the object), in
// the order of its number (delivery n is the stream's n-th message),
// never again, and no crash is drawn in the first run of a start with
// such deliveries to handle; none creates or changes the object while
// it is being deleted, nor is followed by a crash when the source
// applies the object (which of the object's and the delivery's runs is
// first is not the docs' to say).
func Valid(c Case) bool {
	if !validHandlers(&c.Def) || !validSource(&c.Def) {
		return false
	}
	delivered := map[int]bool{}
	m := newModel(&c.Def)
	rerunDue := false // the last step's (model.rerunDue): no SIGKILL after it
	for i, s := range c.History {
		l := m.current()
		if l != nil && l.refusable {
			return false // nothing is modelled after such a decision
		}
		exists := l != nil && l.exists
		switch s.Op {
		case OpCreate:
			if exists {
				return false
			}
		case OpChange, OpTouch, OpDelete:
			if !exists || l.deleting {
				return false
			}
		case OpRetry:
			if !exists {
				return false
			}
		case OpDecide:
			if !m.up || !exists || l.deleting || l.paused || m.opPaused || l.state != StateAsk {
				return false // a decision on a paused object is not drawn
			}
		case OpPause:
			if !exists || l.deleting || l.paused {
				return false
			}
		case OpResume:
			if !exists || !l.paused {
				return false
			}
		case OpPauseOperator:
			if !c.Def.Cluster || m.opPaused {
				return false
			}
		case OpResumeOperator:
			if !c.Def.Cluster || !m.opPaused {
				return false
			}
		case OpRerun:
			if !exists || l.deleting || l.rerun != nil || m.lastRun(l, s.Handler) == nil {
				return false
			}
		case OpStop:
			if !m.up {
				return false
			}
		case OpStart:
			if m.up {
				return false
			}
		case OpCrash:
			if !m.up || i == 0 || c.History[i-1].Op == OpCrash || c.History[i-1].Op == OpStop || rerunDue {
				return false
			}
			if delivers(c.History[i-1].Op) && c.Def.Source.Object || startsWithDeliveries(c.History[:i]) {
				return false
			}
			if s.Handler != "" && (!delivers(c.History[i-1].Op) || !slices.ContainsFunc(c.Def.EventHandlers(), func(h Handler) bool { return h.Name == s.Handler })) {
				return false
			}
		case OpDeliver:
			if c.Def.Source == nil || s.Delivery < 1 || delivered[s.Delivery] || (c.Def.Source.Object && exists && l.deleting) {
				return false
			}
			if !m.up && (!c.Def.Source.Consumed() || c.Def.Source.Object) {
				return false
			}
			if c.Def.Source.Consumed() && s.Delivery != len(delivered)+1 {
				return false // delivery n is the stream's n-th message
			}
			delivered[s.Delivery] = true
		case OpDeliverAgain:
			if !m.up || !delivered[s.Delivery] || c.Def.Source.Consumed() {
				return false
			}
		case OpRedeliver:
			if !m.canRedeliver(s.Delivery) {
				return false
			}
		}
		rerunDue = m.rerunDue(s)
		m.apply(s, false)
	}
	return m.up
}

// validSource reports whether d's source and handlers on event go
// together: handlers on event (on nothing else, and writing no status,
// which a run for the operator cannot) only with a source, and a source
// that runs a handler or applies the object (a custom resource's).
func validSource(d *Def) bool {
	for _, h := range d.Handlers {
		if h.Fires(Event) && (len(h.On) != 1 || h.Behaviour.Write || d.Source == nil) {
			return false
		}
	}
	if d.Source == nil {
		return true
	}
	if d.Source.Object && d.Kind != CustomResource {
		return false
	}
	return d.Source.Object || len(d.EventHandlers()) > 0
}

// Shrink returns the smallest case it finds, from c, that still fails:
// it drops handlers, triggers, fields, history steps and parts of
// behaviours, one at a time, keeping each change after which fails
// still reports true, until none is kept. fails is asked at most tries
// times.
func Shrink(c Case, fails func(Case) bool, tries int) Case {
	for {
		shrunk := false
		for _, cand := range smaller(c) {
			if tries <= 0 {
				return c
			}
			if !Valid(cand) {
				continue
			}
			tries--
			if fails(cand) {
				c, shrunk = cand, true
				break
			}
		}
		if !shrunk {
			return c
		}
	}
}

// smaller lists the cases one change smaller than c, the biggest cuts
// first.
func smaller(c Case) []Case {
	var out []Case
	with := func(change func(*Case)) {
		n := clone(c)
		change(&n)
		if n.Def.Source != nil && n.Def.Source.Consumed() {
			// Delivery n is the stream's n-th message: those after one
			// cut take its place.
			k := 0
			for i := range n.History {
				if n.History[i].Op == OpDeliver {
					k++
					n.History[i].Delivery = k
				}
			}
		}
		out = append(out, n)
	}
	for i := range c.History {
		with(func(n *Case) { n.History = slices.Delete(n.History, i, i+1) })
	}
	// Two steps that go together: a stop and its start.
	for i := range len(c.History) - 1 {
		with(func(n *Case) { n.History = slices.Delete(n.History, i, i+2) })
	}
	if len(c.Def.Handlers) > 1 {
		for i := range c.Def.Handlers {
			with(func(n *Case) { n.Def.Handlers = slices.Delete(n.Def.Handlers, i, i+1) })
		}
	}
	if c.Def.States != nil {
		with(func(n *Case) { n.Def.States = nil })
	}
	if c.Def.Source != nil && c.Def.Source.Object {
		with(func(n *Case) { n.Def.Source.Object = false })
	}
	for i, s := range c.History {
		if s.Handler != "" {
			with(func(n *Case) { n.History[i].Handler = "" })
		}
	}
	for i, h := range c.Def.Handlers {
		if len(h.On) > 1 {
			for j := range h.On {
				with(func(n *Case) { n.Def.Handlers[i].On = slices.Delete(n.Def.Handlers[i].On, j, j+1) })
			}
		}
		if len(h.Fields) > 0 {
			with(func(n *Case) { n.Def.Handlers[i].Fields = nil })
		}
		b := h.Behaviour
		if b.Fail > 0 {
			with(func(n *Case) { n.Def.Handlers[i].Behaviour.Fail, n.Def.Handlers[i].Behaviour.Permanent = 0, false })
		}
		if b.Fail > 1 {
			with(func(n *Case) { n.Def.Handlers[i].Behaviour.Fail = 1 })
		}
		if b.Permanent {
			with(func(n *Case) { n.Def.Handlers[i].Behaviour.Permanent = false })
		}
		if b.Write {
			with(func(n *Case) { n.Def.Handlers[i].Behaviour.Write = false })
		}
		if h.MaxAttempts > 1 && b.Fail > 0 {
			with(func(n *Case) { n.Def.Handlers[i].MaxAttempts = 1 })
		}
	}
	return out
}

// clone deep-copies c.
func clone(c Case) Case {
	n := Case{Def: c.Def, History: slices.Clone(c.History)}
	n.Def.Handlers = slices.Clone(c.Def.Handlers)
	if c.Def.Source != nil {
		src := *c.Def.Source
		n.Def.Source = &src
	}
	for i, h := range n.Def.Handlers {
		n.Def.Handlers[i].On = slices.Clone(h.On)
		n.Def.Handlers[i].Fields = slices.Clone(h.Fields)
		n.Def.Handlers[i].States = slices.Clone(h.States)
	}
	return n
}

// validHandlers reports whether d's handlers are some the generator could
// draw.
func validHandlers(d *Def) bool {
	for _, h := range d.Handlers {
		if (h.Fires(Resume) || h.Fires(When)) && (h.Behaviour.Fail > 0 || (h.Behaviour.Write && d.Kind == Watch)) {
			return false // not drawn (Generate says why)
		}
		if d.States == nil && (h.Fires(Enter) || len(h.States) > 0) {
			return false // an operator without states refuses a handler that names one
		}
	}
	return len(d.Handlers) > 0
}
