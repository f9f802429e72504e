package console

import (
	"context"
	"slices"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// actionView is what a person did that a run of the timeline records: a
// re-run asked, handlers paused, resumed or retried, a schedule run now, a
// delivery redelivered, or any run the archive records with an actor.
// Who is the run's actor (a redelivery's RedeliveredBy), Why the reason
// recorded with it; a record that keeps its reason in its log (a pause,
// a retry, a manual run) has it in the timeline's accounts instead. Of is the run
// (Run) or delivery (Delivery) the action repeats.
type actionView struct {
	// Badge is set for a record that is the action itself, not a run of
	// a handler: Paused, Resumed, Retried.
	Badge    string
	Words    string
	Run      string
	Delivery string
	Who, Why string
	// Account says the reason is in the run's log: the timeline's
	// accounts hold it.
	Account bool
}

// actionOf reads the action that run records, from its record and, for a
// run of a redelivery, the redelivery that started it (redelivered, by
// run id); nil for a run no person asked for. A record of a kind this
// console does not know, but with an actor, is shown generically: who,
// and its trigger.
func actionOf(r archive.Run, redelivered map[string]archive.Delivery) *actionView {
	if d, ok := redelivered[r.ID]; ok {
		return &actionView{Words: "redelivery of", Delivery: d.RedeliveryOf, Who: d.RedeliveredBy, Why: d.RedeliveryReason}
	}
	switch {
	case r.Handler == v1alpha1.TransitionHandler:
		return nil // the transition's row says who decided
	case r.RerunOf != "":
		return &actionView{Words: "re-run of", Run: r.RerunOf, Who: r.Actor, Why: r.Reason}
	case r.Handler == v1alpha1.PauseHandler:
		badge := "Paused"
		if r.Trigger == v1alpha1.TriggerResumed {
			badge = "Resumed"
		}
		return &actionView{Badge: badge, Who: r.Actor, Why: r.Reason, Account: r.Reason == ""}
	case r.Handler == v1alpha1.RetryHandler:
		return &actionView{Badge: "Retried", Who: r.Actor, Why: r.Reason, Account: r.Reason == ""}
	case r.Actor != "":
		words := r.Trigger + " run"
		if r.Trigger == v1alpha1.TriggerManual {
			words = "run now"
		}
		return &actionView{Words: words, Who: r.Actor, Why: r.Reason, Account: r.Reason == ""}
	}
	return nil
}

// redeliveredRuns maps each run among runs that a redelivery started to
// that redelivery, from the operator's latest deliveries: read only when
// a run of runs handled a delivery (trigger event), and nil when the
// archive cannot say.
func (s *Server) redeliveredRuns(ctx context.Context, operator string, runs []archive.Run) map[string]archive.Delivery {
	if !slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Trigger == v1alpha1.OnEvent }) {
		return nil
	}
	page, err := s.opts.Archive.ListDeliveries(ctx, archive.DeliveryQuery{Operator: operator, Limit: 1000})
	if err != nil {
		return nil
	}
	out := map[string]archive.Delivery{}
	for _, d := range page.Deliveries {
		if d.RedeliveryOf == "" {
			continue
		}
		for _, id := range d.Runs {
			out[id] = d
		}
	}
	return out
}
