package conformance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Seen is one execution of a handler as the checker saw it: what the
// recorder (the handler's program) was given, and how the archive
// recorded the run.
type Seen struct {
	ID RunID
	// Key is the binding context's idempotency key; RunID the archive's
	// run id; Attempt the binding context's attempt.
	Key, RunID string
	Attempt    int
	// Outcome is the archive's: Succeeded, Failed, GaveUp, or Cancelled
	// for an Interrupted one; "" when the archive has no such run.
	Outcome Outcome
	// Interrupted: the checker held the run and SIGKILLed the engine.
	Interrupted bool
	// Count is the binding context's object's status.count (0 when it
	// has none).
	Count int
	// Generation is the binding context's object's metadata.generation
	// (custom resources; 0 for a watched ConfigMap, which has none).
	Generation int64
	// Spec is the binding context's object's spec (a ConfigMap's data),
	// the fields a and b.
	Spec map[string]string
	// State and StateSeq are the binding context's object's
	// status.state.name and seq.
	State    string
	StateSeq int64
	// Payload is, for an event run, the binding context's event payload.
	Payload map[string]string
	// Trace is the W3C traceparent the archive recorded of the run (its
	// span's); Given the binding context's traceparent, and Env the
	// TRACEPARENT of the handler's environment (a process per run: one
	// of mode Serve has its process's).
	Trace, Given, Env string
}

// SeenDelivery is a delivery as the archive recorded it.
type SeenDelivery struct {
	// ID is the archive's id of the record, DeliveryID the sender's.
	ID         string
	DeliveryID string
	// RedeliveryOf is, for a redelivery, the record it redelivers;
	// Redelivery its number among the history's (the checker's count of
	// the Redeliveries it made), 0 for one the checker did not ask for.
	RedeliveryOf string
	Redelivery   int
	// Outcome is Pending, Handled, Failed or Refused; Reason its reason.
	Outcome, Reason string
	// Trace is the W3C traceparent the archive recorded of its receipt.
	Trace string
}

// Observed is everything the checker saw of one case.
type Observed struct {
	// Runs are the executions, in the order they started.
	Runs []Seen
	// Ends are the object's lives at the end, in order.
	Ends []End
	// Orphans are archive runs no execution was recorded for, described.
	Orphans []string
	// Engine says what the engine process said on its way out when it
	// failed (a data race, a panic); "" when it did not.
	Engine string
	// Deliveries are the archive's records of the source's deliveries;
	// Answers the HTTP statuses of the posts, in order.
	Deliveries []SeenDelivery
	Answers    []int
	// Redeliveries are the engine's answers to the history's
	// redeliveries, in order: Accepted, or Refused and why.
	Redeliveries []string
	// Traced: the engine traced (its OTEL_* environment named an OTLP
	// endpoint, as the checker's does), so the promises about traces are
	// checked; TestFast's miniature engine has no tracing.
	Traced bool
	// Untraced are the archive's records of handler runs with no trace,
	// described.
	Untraced []string
}

// Violation is a promise broken: Row names the guarantee (a row of
// docs/handlers.md's table, or another of its guarantees).
type Violation struct {
	Row  string
	Text string
}

func (v Violation) String() string { return v.Row + ": " + v.Text }

// The rows of the guarantees the checker checks.
const (
	RowRunsOnce      = "runs once"
	RowRunsTwice     = "may run twice"
	RowDowntime      = "after downtime"
	RowNeverWritten  = "never written by opkit"
	RowReadYourWrite = "read-your-writes"
	RowFinal         = "final state"
	RowDecision      = "a decision is taken or refused"
	RowEngine        = "engine"
	RowDelivery      = "a delivery is recorded and handled once"
	RowPause         = "a pause holds every run, and is recorded once"
	RowTrace         = "a run is traced: a retry in its failure's trace, a delivery's runs in its"
)

// Compare checks obs against what e promises for def, and returns every
// promise broken, in a stable order.
func Compare(def *Def, e *Expectation, obs *Observed) []Violation {
	var out []Violation
	add := func(row, format string, args ...any) {
		out = append(out, Violation{Row: row, Text: fmt.Sprintf(format, args...)})
	}
	if obs.Engine != "" {
		add(RowEngine, "the engine process failed: %s", obs.Engine)
	}
	// Attempts, by run.
	seen := map[RunID][]Seen{}
	var order []RunID
	for _, s := range obs.Runs {
		if _, ok := seen[s.ID]; !ok {
			order = append(order, s.ID)
		}
		seen[s.ID] = append(seen[s.ID], s)
	}
	expected := map[RunID]*Run{}
	for _, r := range e.Runs {
		expected[r.ID()] = r
		got := seen[r.ID()]
		outcomes := finished(got)
		row := RowRunsOnce
		if r.Trigger == Event {
			row = RowDelivery
		}
		switch {
		case len(got) == 0:
			add(row, "missing run: %s never ran; the docs promise %s", r.ID(), outcomesText(r.Outcomes))
		case !slices.Equal(outcomes, r.Outcomes):
			add(row, "%s ran %s; the docs promise %s", r.ID(), outcomesText(outcomes), outcomesText(r.Outcomes))
		}
		if r.Spec != nil {
			for _, s := range got {
				if !maps.Equal(s.Spec, r.Spec) || (def.Kind == CustomResource && s.Generation != r.SpecGen) {
					add(RowReadYourWrite, "stale object: %s (run %s) saw generation %d spec %v; the docs promise generation %d, spec %v", r.ID(), s.RunID, s.Generation, s.Spec, r.SpecGen, r.Spec)
					break
				}
			}
		}
	}
	for _, id := range order {
		// A resume run interrupted, and replaced by the next start's, is
		// no run of its own.
		replaced := id.Trigger == Resume && len(finished(seen[id])) == 0
		if expected[id] == nil && !replaced {
			add(RowRunsOnce, "extra run: %s ran %s; the docs promise no such run", id, outcomesText(finished(seen[id])))
		}
		keys := map[string]bool{}
		for _, s := range seen[id] {
			keys[s.Key] = true
		}
		if len(keys) > 1 {
			add(RowRunsTwice, "%s changed its idempotency key between attempts: %v", id, slices.Sorted(maps.Keys(keys)))
		}
	}
	// An enter run sees the transition that began its visit.
	for _, s := range obs.Runs {
		if s.ID.Trigger == Enter && s.StateSeq != s.ID.Seq {
			add(RowReadYourWrite, "stale object: %s (run %s) saw status.state %s seq %d, not the visit it runs for", s.ID, s.RunID, s.State, s.StateSeq)
		}
	}
	// An interrupted run runs again with its key.
	for i, s := range obs.Runs {
		if !s.Interrupted {
			continue
		}
		// A resume run is for its start: the next start's replaces it.
		if s.ID.Trigger != Resume && !slices.ContainsFunc(obs.Runs[i+1:], func(n Seen) bool { return n.Key == s.Key && !n.Interrupted }) {
			add(RowRunsTwice, "%s (key %s) was interrupted by a SIGKILL and never ran again with its key", s.ID, s.Key)
		}
		if s.Outcome != "Cancelled" {
			add(RowRunsTwice, "%s (run %s) was interrupted by a SIGKILL; the archive records it %q, not Cancelled", s.ID, s.RunID, s.Outcome)
		}
	}
	for _, s := range obs.Runs {
		if !s.Interrupted && s.Outcome == "" {
			add(RowRunsOnce, "%s (run %s, key %s) ran, and the archive has no finished record of it", s.ID, s.RunID, s.Key)
		}
	}
	for _, o := range obs.Orphans {
		add(RowRunsOnce, "the archive records a run no handler execution was seen for: %s", o)
	}
	// Read-your-writes: each run sees the writes of the runs that
	// succeeded before it started.
	if def.Kind == CustomResource {
		// writes is the count the runs so far left, by life; saw what
		// each run's last attempt saw.
		writes := map[int]int{}
		saw := map[RunID]int{}
		for _, s := range obs.Runs {
			count := writes[s.ID.Life]
			if r := expected[s.ID]; r != nil && r.SameInput {
				// A re-run with --same-input sees the object its run saw.
				count = saw[r.Of.ID()]
			}
			if s.Count != count {
				add(RowReadYourWrite, "stale object: %s (run %s) saw status.count %d, but %d writing runs had succeeded for the object before it started", s.ID, s.RunID, s.Count, count)
			}
			saw[s.ID] = s.Count
			if h := def.Handler(s.ID.Handler); h != nil && h.Behaviour.Write && s.Outcome == Succeeded {
				writes[s.ID.Life] = count + 1
			}
		}
	}
	out = append(out, compareDeliveries(def, e, obs)...)
	if obs.Traced {
		out = append(out, compareTraces(def, e, obs, seen)...)
	}
	// The ends.
	for i, want := range e.Ends {
		if i >= len(obs.Ends) {
			add(RowFinal, "object #%d: the checker saw no such object", want.Life)
			continue
		}
		got := obs.Ends[i]
		switch {
		case got.Exists != want.Exists:
			add(RowFinal, "object #%d exists: %v; the docs promise %v", want.Life, got.Exists, want.Exists)
		case got.Exists && def.Kind == CustomResource && got.Count != want.Count:
			add(RowReadYourWrite, "lost status writes: object #%d has status.count %d; %d writing runs must have succeeded for it, each adding one", want.Life, got.Count, want.Count)
		}
		if got.Exists && !maps.Equal(got.Spec, want.Spec) {
			add(RowNeverWritten, "object #%d's spec is %v; the history wrote %v, and opkit never writes it", want.Life, got.Spec, want.Spec)
		}
		if got.Pauses != want.Pauses || got.Resumes != want.Resumes {
			add(RowPause, "object #%d: its handlers recorded paused %d and resumed %d times; the docs promise %d and %d (each pause and each resume recorded once)", want.Life, got.Pauses, got.Resumes, want.Pauses, want.Resumes)
		}
		if got.Exists && got.Written != "" {
			add(RowNeverWritten, "object #%d: opkit wrote to a watched object: %s", want.Life, got.Written)
		}
		switch {
		case !got.Exists || want.State == "":
		case got.Decision != "":
			add(RowDecision, "object #%d: the decision %s is still waiting in its annotation, in state %s: the docs promise it taken or refused at once", want.Life, got.Decision, got.State)
		case want.OrRefused && got.State == StateAsk && got.Refused:
			// Refused at once, with its reason: allowed.
		case got.State != want.State:
			add(RowFinal, "object #%d is in state %s; the docs promise %s", want.Life, got.State, want.State)
		}
	}
	return out
}

// finished are the outcomes of the attempts that were not interrupted.
func finished(ss []Seen) []Outcome {
	var out []Outcome
	for _, s := range ss {
		if !s.Interrupted {
			out = append(out, s.Outcome)
		}
	}
	return out
}

func outcomesText(os []Outcome) string {
	if len(os) == 0 {
		return "nothing"
	}
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = string(o)
	}
	return strings.Join(parts, ", ")
}

// compareDeliveries checks the source's deliveries (docs/events.md): the
// answers to the posts (a webhook's; a NATS source has none), one accepted record per delivery id with the
// outcome its handling must end with and a Refused one per replay, each
// redelivery accepted and recorded once, linked to the one it redelivers, and
// each event run's key and payload.
func compareDeliveries(def *Def, e *Expectation, obs *Observed) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		out = append(out, Violation{Row: RowDelivery, Text: fmt.Sprintf(format, args...)})
	}
	if !slices.Equal(e.Answers, obs.Answers) {
		add("the posts to the source were answered %v; the docs promise %v (202 accepted, 409 a replay)", obs.Answers, e.Answers)
	}
	want := map[string]*Delivery{}
	redelivery := map[int]SeenDelivery{} // the record of each redelivery, by number
	for _, s := range obs.Deliveries {
		if s.Redelivery > 0 {
			redelivery[s.Redelivery] = s
		}
	}
	asked := 0
	for _, d := range e.Deliveries {
		id := def.SourceDeliveryID(d.N)
		if d.Redelivery > 0 {
			// docs/events.md, "Redelivering on purpose": accepted, a
			// record of its own linked to the one it redelivers, handled
			// as a delivery is.
			asked++
			if d.Redelivery > len(obs.Redeliveries) || obs.Redeliveries[d.Redelivery-1] != "Accepted" {
				add("redelivery %d of %s: answered %q; the docs accept a delivery that was handled", d.Redelivery, id, answerOf(obs.Redeliveries, d.Redelivery))
				continue
			}
			s, ok := redelivery[d.Redelivery]
			switch {
			case !ok:
				add("redelivery %d of %s: accepted, and the archive has no record of it", d.Redelivery, id)
			case s.DeliveryID != id:
				add("redelivery %d of %s: recorded with the sender's id %s", d.Redelivery, id, s.DeliveryID)
			case s.Outcome != d.Outcome:
				add("redelivery %d of %s: recorded %s (%s); the docs promise %s", d.Redelivery, id, s.Outcome, s.Reason, d.Outcome)
			}
			continue
		}
		want[id] = d
		var accepted []SeenDelivery
		refused := 0
		for _, s := range obs.Deliveries {
			switch {
			case s.DeliveryID != id || s.RedeliveryOf != "":
			case s.Outcome == "Refused":
				refused++
			default:
				accepted = append(accepted, s)
			}
		}
		switch {
		case len(accepted) != 1:
			add("delivery %s: the archive has %d accepted records of it %v; the docs promise one", id, len(accepted), accepted)
		case accepted[0].Outcome != d.Outcome:
			add("delivery %s: recorded %s (%s); the docs promise %s", id, accepted[0].Outcome, accepted[0].Reason, d.Outcome)
		}
		if refused != d.Replays {
			add("delivery %s: the archive has %d Refused records of it; it was posted again %d times, each a replay", id, refused, d.Replays)
		}
	}
	if len(obs.Redeliveries) != asked {
		add("%d redeliveries were answered; the history asked for %d", len(obs.Redeliveries), asked)
	}
	for _, s := range obs.Deliveries {
		switch {
		case s.RedeliveryOf != "" && s.Redelivery == 0:
			add("the archive records a redelivery %s of %s (%s) that was never asked for", s.ID, s.DeliveryID, s.Outcome)
		case want[s.DeliveryID] == nil:
			add("the archive records a delivery %s (%s) that was never posted", s.DeliveryID, s.Outcome)
		}
	}
	for _, s := range obs.Runs {
		if s.ID.Trigger != Event {
			continue
		}
		id := def.SourceDeliveryID(s.ID.Delivery)
		key := def.OperatorName() + "/event/" + SourceName + "/" + id + "/"
		if s.ID.Redelivery > 0 {
			key += "redelivery/" + redelivery[s.ID.Redelivery].ID + "/"
		}
		key += s.ID.Handler
		if s.Key != key {
			add("%s (run %s) has the key %s; the docs promise %s", s.ID, s.RunID, s.Key, key)
		}
		if d := want[id]; d != nil && !maps.Equal(s.Payload, d.Payload) {
			add("%s (run %s) saw the payload %v; the delivery's was %v", s.ID, s.RunID, s.Payload, d.Payload)
		}
	}
	return out
}

// answerOf is the k-th answer, "none" when there is none.
func answerOf(answers []string, k int) string {
	if k > len(answers) || answers[k-1] == "" {
		return "none"
	}
	return answers[k-1]
}
