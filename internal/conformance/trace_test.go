package conformance_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/conformance"
)

// caused writes the runs a delivery's object caused, one a line: "h1
// create gen 1: d1" (or "d1 redelivery 1").
func caused(e *conformance.Expectation) string {
	var b strings.Builder
	for _, r := range e.Runs {
		if d := r.CausedBy; d != nil {
			fmt.Fprintf(&b, "%s %s gen %d: %s", r.Handler, r.Trigger, r.Gen, conformance.DeliveryID(d.N))
			if d.Redelivery > 0 {
				fmt.Fprintf(&b, " redelivery %d", d.Redelivery)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func TestModelSaysWhichRunADeliverysObjectCaused(t *testing.T) {
	deliver := func(n int) conformance.Step { return conformance.Step{Op: conformance.OpDeliver, Delivery: n} }
	redeliver := func(n int) conformance.Step { return conformance.Step{Op: conformance.OpRedeliver, Delivery: n} }
	at := func(s ...conformance.Step) []conformance.Step { return s }
	for _, tc := range []struct {
		name     string
		handlers []conformance.Handler
		history  []conformance.Step
		want     string
	}{
		{
			name:     "the create run of the object the first delivery creates, the update run of each change after",
			handlers: []conformance.Handler{handler("h1", write, "create", "update")},
			history:  at(deliver(1), deliver(2), redeliver(1)),
			want:     "h1 create gen 1: d1\nh1 update gen 2: d2\nh1 update gen 3: d1 redelivery 1\n",
		},
		{
			name:     "only the object's next run: the first create handler's",
			handlers: []conformance.Handler{handler("h1", ok, "create"), handler("h2", ok, "create")},
			history:  at(deliver(1)),
			want:     "h1 create gen 1: d1\n",
		},
		{
			name:     "a person's change made before the next run: its run is for another generation, and promised nothing",
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  append(at(deliver(1)), append(steps("pause"), append(at(deliver(2)), steps("change b", "resume")...)...)...),
			want:     "h1 create gen 1: d1\n",
		},
		{
			name:     "the delivery's change made while paused: the run after the resume",
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  append(at(deliver(1)), append(steps("pause"), append(at(deliver(2)), steps("resume")...)...)...),
			want:     "h1 create gen 1: d1\nh1 update gen 2: d2\n",
		},
		{
			name:     "a change no create or update handler is about: the next run is another's",
			handlers: []conformance.Handler{{Name: "h1", On: []conformance.Trigger{"update"}, Fields: []string{"b"}, MaxAttempts: 2}, handler("h2", ok, "when")},
			history:  at(deliver(1)),
			want:     "",
		},
		{
			name:     "a redelivery that changes nothing writes its own trace over the one the next run was to continue",
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  append(at(deliver(1), deliver(2)), append(steps("pause"), append(at(deliver(3), redeliver(3)), steps("resume")...)...)...),
			want:     "h1 create gen 1: d1\nh1 update gen 2: d2\nh1 update gen 3: d3 redelivery 1\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conformance.Case{Def: conformance.Def{Kind: conformance.CustomResource, Handlers: tc.handlers, Source: &conformance.Source{Object: true}}, History: tc.history}
			if !conformance.Valid(c) {
				t.Fatalf("the case is not valid:\n%s", c)
			}
			if got := caused(conformance.Expect(c)); got != tc.want {
				t.Errorf("runs a delivery caused:\n%s\nwant:\n%s\nruns:\n%s", got, tc.want, runs(conformance.Expect(c)))
			}
		})
	}
}

func TestAnAttemptAfterAFailureContinuesItsTrace(t *testing.T) {
	r := &conformance.Run{Outcomes: []conformance.Outcome{conformance.Failed, conformance.GaveUp, conformance.Failed, conformance.Succeeded}}
	var got []bool
	for i := range r.Outcomes {
		got = append(got, r.Continues(i))
	}
	// After opkit retry, the attempts are a trace of their own: GaveUp is
	// no failure a retry continues.
	if want := []bool{false, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("continues %v, want %v", got, want)
	}
}

func TestTraceID(t *testing.T) {
	for tp, want := range map[string]string{
		conformance.SenderTraceparent(7):                          conformance.SenderTraceID(7),
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"": "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "",
	} {
		if got := conformance.TraceID(tp); got != want {
			t.Errorf("TraceID(%q) = %q, want %q", tp, got, want)
		}
	}
}

// traced is the case, and what an engine that keeps every promise about
// traces would be seen to do, of TestCompareChecksThePromisesAboutTraces:
// a webhook delivery creates the object, whose handler fails once; its
// handler on event runs.
func traced() (conformance.Case, *conformance.Observed) {
	c := conformance.Case{
		Def: conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Object: true}, Handlers: []conformance.Handler{
			handler("h1", conformance.Behaviour{Fail: 1}, "create"), handler("e1", ok, "event"),
		}},
		History: []conformance.Step{{Op: conformance.OpDeliver, Delivery: 1}},
	}
	sender := conformance.SenderTraceID(1)
	tp := func(trace, span string) string { return "00-" + trace + "-" + span + "-01" }
	seen := func(id conformance.RunID, run string, attempt int, outcome conformance.Outcome, trace string) conformance.Seen {
		s := conformance.Seen{ID: id, Key: id.Handler, RunID: run, Attempt: attempt, Outcome: outcome, Spec: map[string]string{"a": "1"}, Generation: 1, Trace: trace}
		s.Given, s.Env = s.Trace, s.Trace
		return s
	}
	create := conformance.RunID{Life: 1, Handler: "h1", Trigger: conformance.Create, Gen: 1}
	event := conformance.RunID{Handler: "e1", Trigger: conformance.Event, Delivery: 1}
	obs := &conformance.Observed{
		Traced: true,
		Runs: []conformance.Seen{
			seen(create, "r1", 1, conformance.Failed, tp(sender, "00000000000000a1")),
			seen(event, "r2", 1, conformance.Succeeded, tp(sender, "00000000000000a2")),
			seen(create, "r3", 2, conformance.Succeeded, tp(sender, "00000000000000a3")),
		},
		Deliveries: []conformance.SeenDelivery{{ID: "D1", DeliveryID: "d1", Outcome: conformance.DeliveryHandled, Trace: tp(sender, "00000000000000d1")}},
		Answers:    []int{202},
	}
	obs.Runs[1].Key = "conformance/event/src/d1/e1"
	obs.Runs[1].Payload = map[string]string{"delivery": "d1", "a": "1"}
	return c, obs
}

func TestCompareChecksThePromisesAboutTraces(t *testing.T) {
	other := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		mutate func(*conformance.Observed)
		want   string // in the violation, "" for none
	}{
		{name: "every promise kept", mutate: func(*conformance.Observed) {}},
		{name: "not traced: nothing is checked", mutate: func(o *conformance.Observed) { o.Traced, o.Runs[2].Trace = false, "" }},
		{name: "a run without a trace", mutate: func(o *conformance.Observed) { o.Runs[1].Trace = "" }, want: "has no trace"},
		{name: "a handler that did not get its run's trace", mutate: func(o *conformance.Observed) { o.Runs[1].Given = "" }, want: "binding context"},
		{name: "a retry in a trace of its own", mutate: func(o *conformance.Observed) {
			o.Runs[2].Trace, o.Runs[2].Given, o.Runs[2].Env = retrace(o.Runs[2].Trace, other)
		}, want: "after a failure is one trace"},
		{name: "a delivery that does not continue its sender's trace", mutate: func(o *conformance.Observed) { o.Deliveries[0].Trace, _, _ = retrace(o.Deliveries[0].Trace, other) }, want: "its sender's traceparent"},
		{name: "a run on event out of its delivery's trace", mutate: func(o *conformance.Observed) {
			o.Runs[1].Trace, o.Runs[1].Given, o.Runs[1].Env = retrace(o.Runs[1].Trace, other)
		}, want: "its delivery's record"},
		{name: "the run the delivery's object caused out of its trace", mutate: func(o *conformance.Observed) {
			for _, i := range []int{0, 2} { // both attempts: the retry continues the first
				o.Runs[i].Trace, o.Runs[i].Given, o.Runs[i].Env = retrace(o.Runs[i].Trace, other)
			}
		}, want: "made the object's generation it runs for"},
		{name: "an archive record of a handler's run without a trace", mutate: func(o *conformance.Observed) { o.Untraced = []string{"run r9"} }, want: "with no trace: run r9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, obs := traced()
			tc.mutate(obs)
			var got []string
			for _, v := range conformance.Compare(&c.Def, conformance.Expect(c), obs) {
				if v.Row == conformance.RowTrace {
					got = append(got, v.Text)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("violations %q, want none", got)
			case tc.want != "" && !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) }):
				t.Errorf("violations %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// retrace is traceparent tp moved to trace id, three times (the record's,
// the binding context's and the environment's).
func retrace(tp, id string) (string, string, string) {
	parts := strings.Split(tp, "-")
	parts[1] = id
	out := strings.Join(parts, "-")
	return out, out, out
}
