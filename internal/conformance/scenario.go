package conformance

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// caseTraits are what a case's history does that Rows reports.
type caseTraits struct {
	down, crash, retry, decide, deliver, again, crashEvent, downDelivery                        bool
	pause, pauseDown, rerun, rerunSame, rerunWaits                                              bool
	redeliver, redeliverDown, crashRedelivery, opPause, opPauseDown, opPauseBoth, write, resume bool
}

// traitsOf scans c's history and handlers for Rows.
func traitsOf(c Case) caseTraits {
	var t caseTraits
	stopped := false
	for i, s := range c.History {
		switch s.Op {
		case OpDeliver:
			t.deliver = true
			t.downDelivery = t.downDelivery || stopped
			t.crashEvent = t.crashEvent || i+1 < len(c.History) && c.History[i+1].Op == OpCrash
		case OpDeliverAgain:
			t.again = true
		case OpRedeliver:
			t.redeliver = true
			t.redeliverDown = t.redeliverDown || stopped
			t.crashRedelivery = t.crashRedelivery || i+1 < len(c.History) && c.History[i+1].Op == OpCrash
		case OpStop:
			stopped = true
		case OpStart:
			stopped = false
		case OpCrash:
			t.crash = true
		case OpRetry:
			t.retry = true
		case OpDecide:
			t.decide = true
		case OpPause, OpResume:
			t.pause = true
			t.pauseDown = t.pauseDown || stopped
		case OpPauseOperator, OpResumeOperator:
			t.opPause = true
			t.opPauseDown = t.opPauseDown || stopped
			t.opPauseBoth = t.opPauseBoth || pausedAt(c.History[:i])
		case OpRerun:
			t.rerun = true
			t.rerunSame = t.rerunSame || s.SameInput
			t.rerunWaits = t.rerunWaits || stopped || pausedAt(c.History[:i])
		case OpCreate, OpChange, OpDelete:
			t.down = t.down || stopped
		}
	}
	for _, h := range c.Def.Handlers {
		t.write = t.write || h.Behaviour.Write
		t.resume = t.resume || h.Fires(Resume)
	}
	return t
}

// Rows names the guarantees a case exercises: the rows of
// docs/handlers.md's table (by kind of operator) and the other
// guarantees its history reaches, for make soak's report.
func Rows(c Case) []string {
	kind := map[Kind]string{CustomResource: "custom resource", Watch: "watched object"}[c.Def.Kind]
	t := traitsOf(c)
	src := c.Def.Source
	rows := []string{"runs once, " + kind}
	for _, r := range []struct {
		on  bool
		row string
	}{
		{t.crash || (t.resume && has(c.History, OpStop)), "may run twice, " + kind},
		{t.down, "after downtime, " + kind},
		{true, "never written by opkit, " + kind},
		{t.write && c.Def.Kind == CustomResource, "read-your-writes: a run sees every write opkit made before it"},
		{t.retry, "retries and Stalled: opkit retry"},
		{t.decide, "states: a decision is taken or refused at once"},
		{t.deliver, "events: a delivery handled once"},
		{t.deliver && src.Object, "events: the source's object applied"},
		{t.deliver && src.Kind == NATS, "events: NATS messages handled once"},
		{t.deliver && src.Kind == Kafka, "events: Kafka records handled once"},
		{t.deliver && src.Kind == CloudEvents, "events: CloudEvents in either mode handled once"},
		{t.again, "events: a replay runs nothing"},
		{t.downDelivery, "events: published while down, then handled"},
		{t.crashEvent, "events: handled once across a SIGKILL"},
		{t.redeliver, "redeliver: a redelivery handled once, with keys of its own"},
		{t.redeliverDown, "redeliver: asked while no engine ran"},
		{t.crashRedelivery, "redeliver: handled once across a SIGKILL"},
		{t.pause, "pause: nothing runs, each pause and resume recorded once"},
		{t.pauseDown, "pause: paused or resumed while no engine ran"},
		{t.opPause, "pause: the whole operator paused, each object's pause and resume recorded once"},
		{t.opPauseDown, "pause: the whole operator paused or resumed while no engine ran"},
		{t.opPauseBoth, "pause: the whole operator and the object paused at once"},
		{t.rerun, "rerun: a re-run runs once, with a key of its own"},
		{t.rerunSame, "rerun: with --same-input"},
		{t.rerunWaits, "rerun: asked while paused or no engine ran"},
		{true, "traces: every run traced, its attempts after a failure in one trace"},
		{t.deliver, "traces: a delivery's runs in its sender's trace"},
		{t.deliver && src.Object, "traces: the run a delivery's object caused in its trace"},
	} {
		if r.on {
			rows = append(rows, r.row)
		}
	}
	return rows
}

// pausedAt reports whether the object is paused after the steps h.
func pausedAt(h []Step) bool {
	paused := false
	for _, s := range h {
		switch s.Op {
		case OpPause:
			paused = true
		case OpResume, OpCreate:
			paused = false
		}
	}
	return paused
}

// has reports whether h has a step op.
func has(h []Step, op Op) bool {
	for _, s := range h {
		if s.Op == op {
			return true
		}
	}
	return false
}

// Scenario prints c as an opkit test scenario file, with the operator it
// runs (to save beside it as operator.yaml), whose handlers are the
// conformance test binary in recorder mode. Each step is followed by what
// the model expects once the engine is done with it. A step the scenario
// format cannot say (stopping, killing or starting the engine) is written
// as a comment saying so; the Go form of the case follows, for
// TestConformance.
func Scenario(c Case) string {
	var b strings.Builder
	e := Expect(c)
	b.WriteString("# To play it: save this document as operator.yaml and the next as conformance.test.yaml in a\n" +
		"# directory, build the recorder there (go test -c -o DIR/conformance.test ./internal/conformance),\n" +
		"# then: opkit test DIR/conformance.test.yaml\n")
	b.WriteString(Operator(&c.Def, "default", "nats://127.0.0.1:4222", []string{"./conformance.test", "."}, []string{"OPKIT_CONFORMANCE_RECORDER=1"}))
	b.WriteString("---\n# conformance.test.yaml\n")
	fmt.Fprintf(&b, "scenario: conformance case (%s, %d handlers)\noperators: [operator.yaml]\nsteps:\n", c.Def.Kind, len(c.Def.Handlers))
	ref := fmt.Sprintf("{kind: %s, name: %s}", c.Def.ObjectKind(), ObjectName)
	changes := 0
	payloads := map[int]map[string]string{}
	for _, d := range e.Deliveries {
		payloads[d.N] = d.Payload
	}
	var unsaid []string
	m := newModel(&c.Def)
	for i, s := range c.History {
		seq := int64(0)
		if l := m.current(); l != nil {
			seq = l.seq
		}
		m.apply(s, i+1 < len(c.History) && c.History[i+1].Op == OpCrash)
		switch s.Op {
		case OpDecide:
			d, _ := json.Marshal(map[string]any{"state": StateAsk, "seq": seq, "choose": s.Choice, "reason": "the conformance check decides", "by": "conformance", "at": "2026-01-01T00:00:00Z"})
			p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"opkit.dev/decision": string(d)}}})
			fmt.Fprintf(&b, "- patch: {object: %s, merge: %s}\n", ref, p)
		case OpCreate:
			obj, _ := json.Marshal(c.Def.Object())
			fmt.Fprintf(&b, "- apply: %s\n", obj)
		case OpChange:
			changes++
			p, _ := json.Marshal(c.Def.ChangePatch(s.Field, strconv.Itoa(changes)))
			fmt.Fprintf(&b, "- patch: {object: %s, merge: %s}\n", ref, p)
		case OpTouch:
			fmt.Fprintf(&b, "- patch: {object: %s, merge: {metadata: {annotations: {%s: \"%d\"}}}}\n", ref, TouchAnnotation, i)
		case OpDelete:
			fmt.Fprintf(&b, "- delete: {object: %s}\n", ref)
		case OpRetry:
			fmt.Fprintf(&b, "- retry: {object: %s}\n", ref)
		case OpPause, OpResume:
			p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": PauseAnnotations(s.Op)}})
			fmt.Fprintf(&b, "- patch: {object: %s, merge: %s}\n", ref, p)
		case OpPauseOperator, OpResumeOperator:
			fmt.Fprintf(&b, "# step %d, %s: a scenario's operators are files, which cannot be paused whole (opkit pause --operator OP --all)\n", i+1, s)
			unsaid = append(unsaid, s.String())
		case OpRerun:
			fmt.Fprintf(&b, "# step %d, %s: a scenario cannot name the run to ask for again (opkit rerun RUN)\n", i+1, s)
		case OpRedeliver:
			fmt.Fprintf(&b, "# step %d, %s: a scenario cannot name the delivery to handle again (opkit events redeliver ID)\n", i+1, s)
			unsaid = append(unsaid, s.String())
		case OpDeliver, OpDeliverAgain:
			status := 202
			if s.Op == OpDeliverAgain {
				status = 409
			} else if c.Def.Source.Object {
				changes++ // the value the object's spec.a takes
			}
			p, _ := json.Marshal(payloads[s.Delivery])
			if c.Def.Source.Consumed() {
				// opkit test connects to no NATS: the message is handed to
				// the engine as its consumer would, with its id.
				event := NATSSubject
				if c.Def.Source.Kind == Kafka {
					event = KafkaTopic
				}
				fmt.Fprintf(&b, "- send: {source: %s, event: %s, id: %q, payload: %s, status: %d}\n", SourceName, event, c.Def.SourceDeliveryID(s.Delivery), p, status)
				break
			}
			if c.Def.Source.Kind == CloudEvents {
				// In the binary mode: the checker's posts take turns.
				fmt.Fprintf(&b, "- send: {source: %s, headers: {ce-specversion: \"1.0\", ce-id: %s, ce-source: %s, ce-type: %s}, payload: %s, status: %d}\n",
					SourceName, DeliveryID(s.Delivery), CloudEventsSource, CloudEventsType, p, status)
				break
			}
			fmt.Fprintf(&b, "- send: {source: %s, headers: {%s: %s}, payload: %s, status: %d}\n", SourceName, DeliveryHeader, DeliveryID(s.Delivery), p, status)
		default:
			fmt.Fprintf(&b, "# step %d, %s: a scenario cannot stop, kill or start its engine\n", i+1, s)
			unsaid = append(unsaid, s.String())
		}
	}
	writeExpects(&b, c, e, ref)
	if len(unsaid) > 0 {
		fmt.Fprintf(&b, "# not said by the scenario: %s. Play the case in Go instead:\n", strings.Join(unsaid, ", "))
	}
	fmt.Fprintf(&b, "\n// Go:\n%s\n", GoString(c))
	return b.String()
}

// writeExpects writes the steps of a scenario that check what the model
// expects at the end of c: the object (ref), then each run's attempts by
// outcome.
func writeExpects(b *strings.Builder, c Case, e *Expectation, ref string) {
	// What the model expects at the end: each run's attempts by outcome,
	// and the object.
	type count struct {
		handler, trigger, outcome string
	}
	counts := map[count]int{}
	for _, r := range e.Runs {
		for _, o := range r.Outcomes {
			counts[count{r.Handler, string(r.Trigger), string(o)}]++
		}
	}
	keys := make([]count, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j])
	})
	if n := len(e.Ends); n > 0 {
		end := e.Ends[n-1]
		switch {
		case !end.Exists:
			fmt.Fprintf(b, "- expect: {object: %s, absent: true}\n", ref)
		case c.Def.Kind == CustomResource:
			fmt.Fprintf(b, "- expect: {object: %s, cel: \"(has(object.status.count) ? object.status.count : 0) == %d\"}\n", ref, end.Count)
		}
		if end.Exists && end.State != "" {
			fmt.Fprintf(b, "- expect: {object: %s, matches: {status: {state: {name: %s}}}}\n", ref, end.State)
		}
	}
	for _, k := range keys {
		fmt.Fprintf(b, "- expect: {run: {handler: %s, trigger: %s, outcome: %s, count: %d}}\n", k.handler, k.trigger, k.outcome, counts[k])
	}
}

// GoString writes c as a Go expression.
func GoString(c Case) string {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance.Case{\n\tDef: conformance.Def{Kind: %q", c.Def.Kind)
	if c.Def.States != nil {
		b.WriteString(", States: &conformance.Machine{}")
	}
	if c.Def.Source != nil {
		kind := map[SourceKind]string{NATS: "Kind: conformance.NATS, ", CloudEvents: "Kind: conformance.CloudEvents, ", Kafka: "Kind: conformance.Kafka, "}[c.Def.Source.Kind]
		fmt.Fprintf(&b, ", Source: &conformance.Source{%sObject: %t}", kind, c.Def.Source.Object)
	}
	if c.Def.Cluster {
		b.WriteString(", Cluster: true")
	}
	b.WriteString(", Handlers: []conformance.Handler{\n")
	for _, h := range c.Def.Handlers {
		fmt.Fprintf(&b, "\t\t{Name: %q, On: %#v, Fields: %#v, States: %#v, MaxAttempts: %d, Behaviour: %#v, Serve: %t},\n", h.Name, h.On, h.Fields, h.States, h.MaxAttempts, h.Behaviour, h.Serve)
	}
	b.WriteString("\t}},\n\tHistory: []conformance.Step{\n")
	for _, s := range c.History {
		fmt.Fprintf(&b, "\t\t%#v,\n", s)
	}
	b.WriteString("\t},\n}")
	return b.String()
}
