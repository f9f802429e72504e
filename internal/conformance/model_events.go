package conformance

import "slices"

// How the model handles deliveries, settles runs and sees pauses.

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
			r = &Run{RunID: RunID{Handler: h.Name, Trigger: Event, Delivery: d.N, Redelivery: d.Redelivery}}
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
			if m.waits(i) {
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
	for _, l := range m.lives {
		m.recordHandled(l)
	}
}

// recordHandled records l handled (status.opkit.handled) once every create
// and update handler is done with its generation: when nothing else is
// due, or with the status write of a transition, which comes before the
// enter runs of the state it makes (a SIGKILL in one leaves it recorded).
// A paused object (on its own or with its operator) is not: the engine's
// step ends at the pause, before it records anything handled.
func (m *model) recordHandled(l *life) {
	if l.exists && !l.deleting && !l.paused && !m.opPaused && !slices.ContainsFunc(m.def.Handlers, func(h Handler) bool {
		return (h.Fires(Create) || h.Fires(Update)) && l.hs[h.Name].gen < l.gen
	}) {
		l.handled = true
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
	for i, l := range m.lives {
		if m.waits(i) {
			// Unseen until the delete runs of the one before are done
			// (docs/handlers.md, the watch's delete trigger): so is its
			// pause, which is recorded if it still holds then.
			break
		}
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

// deletePending reports whether l still has delete runs to make that a
// new object of its name waits for. One of its delete handlers that gave
// up ends the wait, also for the delete runs it holds back: the old
// object's record is dropped and they run no more (docs/handlers.md,
// the watched object's delete).
// waits reports whether the i-th life is a watched object created again
// under its name that waits, unseen, until the delete runs of the one
// before are done ("which waits until the old one's delete handlers are
// done, or have given up").
func (m *model) waits(i int) bool {
	return m.def.Kind == Watch && i > 0 && m.deletePending(m.lives[i-1])
}

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
