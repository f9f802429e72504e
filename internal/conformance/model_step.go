package conformance

import "slices"

// How the model steps an object: the next run of its handlers, as the engine would take it.

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
	if m.stepWhenResume(l, hs, limit) {
		return true
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

// stepWhenResume takes the next when or resume run of l, if any, among
// the handlers before limit (those after wait for one that gave up or
// waits), in declared order, a handler's when first; a when seen false is
// recorded, so that its next turn to true is a transition.
func (m *model) stepWhenResume(l *life, hs []Handler, limit int) bool {
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
	return false
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
	// The object's next run continues the trace of a delivery's write of
	// it, once.
	caused := l.caused
	l.caused = nil
	r := m.byID[id]
	if r == nil {
		r = &Run{RunID: RunID{Life: id.Life, Handler: id.Handler, Trigger: id.Trigger, Gen: id.Gen, Start: id.Start, Seq: id.Seq}}
		if id.Trigger == Create || id.Trigger == Update {
			r.Spec, r.SpecGen = l.specs[id.Gen], id.Gen
			if caused != nil && caused.gen == id.Gen {
				r.CausedBy = caused.d
			}
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
	l.caused = nil // the next run, which continues a delivery's write, is this one
	if l.reruns == nil {
		l.reruns = map[RunID]int{}
	}
	l.reruns[q.of.ID()] = id.Rerun
	r := &Run{RunID: RunID{Life: l.n, Handler: id.Handler, Trigger: Rerun, Gen: id.Gen, Rerun: id.Rerun}, SameInput: q.sameInput, Of: q.of,
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
