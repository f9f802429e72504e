package conformance

import (
	"fmt"
	"slices"
	"strings"
)

// compareTraces checks what docs/observability.md promises of traces, the
// engine tracing: every run's record has a trace, which its handler gets;
// the attempts of a key after one that failed are in its trace; each
// delivery's record continues its sender's trace (a redelivery's is a
// trace of its own), and its runs on event are in it; and the run a
// delivery's object caused (Run.CausedBy) is in the delivery's trace.
// seen are the observed attempts, by run.
func compareTraces(def *Def, e *Expectation, obs *Observed, seen map[RunID][]Seen) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		out = append(out, Violation{Row: RowTrace, Text: fmt.Sprintf(format, args...)})
	}
	// Every run has a trace, and its handler gets it: in its binding
	// context, and in its environment when it has a process of its own.
	for _, s := range obs.Runs {
		if TraceID(s.Trace) == "" {
			add("%s (run %s) has no trace in the archive (%q): the engine traces, and every run is a span", s.ID, s.RunID, s.Trace)
			continue
		}
		if s.Given != s.Trace {
			add("%s (run %s): its handler got the traceparent %q in its binding context; its run's is %q", s.ID, s.RunID, s.Given, s.Trace)
		}
		if h := def.Handler(s.ID.Handler); h != nil && !h.Serve && s.Env != s.Trace {
			add("%s (run %s): its handler got TRACEPARENT=%q in its environment; its run's is %q", s.ID, s.RunID, s.Env, s.Trace)
		}
	}
	for _, u := range obs.Untraced {
		add("the archive records a handler's run with no trace: %s", u)
	}
	// The attempts after a failure continue its trace.
	for _, r := range e.Runs {
		got := seen[r.ID()]
		if !slices.Equal(finished(got), r.Outcomes) {
			continue // the runs' own comparison says how
		}
		k := 0 // the index, among r.Outcomes, of the next attempt that finishes
		var last *Seen
		for i := range got {
			s := &got[i]
			if r.Continues(k) && TraceID(s.Trace) != TraceID(last.Trace) {
				what := "attempt"
				if s.Interrupted {
					what = "attempt (SIGKILLed)"
				}
				add("%s: the %s after its failed attempt (run %s, trace %s) is run %s in trace %s; the docs promise every attempt of a key after a failure is one trace",
					r.ID(), what, last.RunID, TraceID(last.Trace), s.RunID, TraceID(s.Trace))
			}
			if !s.Interrupted {
				last = s
				k++
			}
		}
	}
	// Each delivery's record continues its sender's trace; a redelivery's
	// is its own.
	records := map[*Delivery]*SeenDelivery{}
	for _, d := range e.Deliveries {
		rec := deliveryRecord(def, obs, d)
		if rec == nil {
			continue // the deliveries' own comparison says so
		}
		records[d] = rec
		got := TraceID(rec.Trace)
		switch {
		case d.Trace != "" && got != d.Trace:
			add("delivery %s (record %s) is in trace %q (%s); its sender's traceparent, which its receipt continues, is of trace %s", DeliveryID(d.N), rec.ID, got, rec.Trace, d.Trace)
		case d.Trace == "" && got == "":
			add("redelivery %d of %s (record %s) has no trace (%q)", d.Redelivery, DeliveryID(d.N), rec.ID, rec.Trace)
		case d.Trace == "":
			if orig := deliveryRecord(def, obs, &Delivery{N: d.N}); orig != nil && TraceID(orig.Trace) == got {
				add("redelivery %d of %s (record %s) is in the trace %s of the delivery it redelivers; the docs give a redelivery a trace of its own", d.Redelivery, DeliveryID(d.N), rec.ID, got)
			}
		}
	}
	// Its runs on event are in its trace, every attempt.
	for _, s := range obs.Runs {
		if s.ID.Trigger != Event {
			continue
		}
		var rec *SeenDelivery
		for d, r := range records {
			if d.N == s.ID.Delivery && d.Redelivery == s.ID.Redelivery {
				rec = r
			}
		}
		if rec != nil && TraceID(s.Trace) != TraceID(rec.Trace) {
			add("%s (run %s) is in trace %s; its delivery's record %s is in trace %s, which its handling continues", s.ID, s.RunID, TraceID(s.Trace), rec.ID, TraceID(rec.Trace))
		}
	}
	// The run a delivery's object caused continues the delivery's trace.
	for _, r := range e.Runs {
		got := seen[r.ID()]
		rec := records[r.CausedBy]
		if r.CausedBy == nil || rec == nil || len(got) == 0 {
			continue
		}
		if TraceID(got[0].Trace) != TraceID(rec.Trace) {
			by := "delivery " + DeliveryID(r.CausedBy.N)
			if r.CausedBy.Redelivery > 0 {
				by = fmt.Sprintf("redelivery %d of %s", r.CausedBy.Redelivery, DeliveryID(r.CausedBy.N))
			}
			add("%s (run %s) is in trace %s; %s (record %s, trace %s) made the object's generation it runs for, and the reconcile that decides the object's next run continues the delivery's trace",
				r.ID(), got[0].RunID, TraceID(got[0].Trace), by, rec.ID, TraceID(rec.Trace))
		}
	}
	return out
}

// deliveryRecord is the archive's record of d that was accepted: the
// sender's delivery's (not a replay's, which is Refused), or the
// redelivery's; nil when there is not exactly one.
func deliveryRecord(def *Def, obs *Observed, d *Delivery) *SeenDelivery {
	var found *SeenDelivery
	n := 0
	id := def.SourceDeliveryID(d.N)
	for i := range obs.Deliveries {
		s := &obs.Deliveries[i]
		switch {
		case d.Redelivery > 0 && s.Redelivery != d.Redelivery:
		case d.Redelivery == 0 && (s.DeliveryID != id || s.RedeliveryOf != "" || s.Outcome == "Refused"):
		default:
			found = s
			n++
		}
	}
	if n != 1 {
		return nil
	}
	return found
}

// TraceID is the trace id of a W3C traceparent (version 00: 32 hex digits
// after "00-"), "" when it is none.
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	return parts[1]
}
