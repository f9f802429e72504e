package statemachine

import (
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// TestStepMessage: a step that answers a decision gives the Event that
// says so, naming the decision; others give none.
func TestStepMessage(t *testing.T) {
	m := database()
	d := v1alpha1.Decision{State: "NeedsAttention", Seq: 5, Choose: "RollingBack", Reason: "the checks fail", By: "jane", At: "2026-11-26T12:00:00Z"}
	ref := "the decision of jane at 2026-11-26T12:00:00Z (NeedsAttention, visit 5: choose RollingBack)"
	for _, tc := range []struct {
		name            string
		in              Input
		reason, message string
	}{
		{"taken", Input{Current: state("NeedsAttention", 5, at(0)), Decision: decision(d)},
			EventDecided, "jane chose RollingBack in NeedsAttention: the checks fail"},
		{"refused", Input{Current: state("NeedsAttention", 6, at(0)), Decision: decision(d)},
			EventDecisionRefused, ref + " is refused: the decision is for NeedsAttention (visit 5), and the object is in NeedsAttention (visit 6): decide again on what it is in now"},
		{"not a decision", Input{Current: state("NeedsAttention", 5, at(0)), Decision: raw(`{"choose": 5}`)},
			EventDecisionRefused, "the decision in opkit.dev/decision is refused: the annotation opkit.dev/decision is not a decision (json: cannot unmarshal number into Go struct field Decision.choose of type string): use opkit decide"},
		{"waiting", Input{Current: state("NeedsAttention", 5, at(0)), Paused: true, Decision: decision(d)},
			EventDecisionWaits, ref + " waits: " + PausedWaits},
		{"a guard's move", Input{Current: state("Verifying", 4, at(0)), Guard: guards(map[string]any{"verify succeeded": true})}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Machine, tc.in.Now = m, at(time.Hour)
			reason, message := Next(tc.in).Message()
			if reason != tc.reason || message != tc.message {
				t.Errorf("Message: %s %q\nwant %s %q", reason, message, tc.reason, tc.message)
			}
		})
	}
}

// TestAnswer: opkit decide and the console read what became of the
// decision they wrote from the object and its Events.
func TestAnswer(t *testing.T) {
	d := v1alpha1.Decision{State: "NeedsAttention", Seq: 5, Choose: "RollingBack", Reason: "the checks fail", By: "jane", At: "2026-11-26T12:00:00Z"}
	ref := Ref(d)
	object := func(state map[string]any, annotations map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "orders", "annotations": annotations}, "status": map[string]any{"state": state}}
	}
	asking := map[string]any{"name": "NeedsAttention", "seq": int64(5), "trigger": "guard", "question": "Roll back?", "choices": []any{"RollingBack", "Ready"}}
	pending := map[string]any{v1alpha1.DecisionAnnotation: *decision(d)}
	other := d
	other.By = "max"
	for _, tc := range []struct {
		name   string
		obj    map[string]any
		events []Event
		want   Verdict
		says   string
	}{
		{"nothing yet", object(asking, pending), nil, Unanswered, "no engine has answered it yet"},
		{"taken", object(map[string]any{"name": "RollingBack", "seq": int64(6), "trigger": "decision", "by": "jane", "run": "r1"}, pending), nil,
			Taken, "taken: NeedsAttention -> RollingBack (run r1)"},
		{"refused, as its Event says", object(asking, nil), []Event{
			{EventDecisionRefused, "the decision of max (NeedsAttention, visit 5: choose Ready) is refused: not this one"},
			{EventDecisionRefused, ref + " is refused: Verifying is not a choice"},
		}, Refused, ref + " is refused: Verifying is not a choice"},
		{"gone, its Event not arrived", object(asking, nil), nil, Unanswered, "the engine refused it (its Event DecisionRefused has not arrived), or someone removed it"},
		{"waiting, as its Event says", object(asking, pending), []Event{{EventDecisionWaits, ref + " waits: the handlers of this visit of NeedsAttention have not finished: page"}},
			Waiting, ref + " waits: the handlers of this visit of NeedsAttention have not finished: page"},
		{"paused", object(asking, map[string]any{v1alpha1.DecisionAnnotation: *decision(d), v1alpha1.PauseAnnotation: "true"}), nil,
			Waiting, ref + " waits: " + PausedWaits},
		{"replaced", object(asking, map[string]any{v1alpha1.DecisionAnnotation: *decision(other)}), nil, Unanswered, "another decision replaced it"},
		{"moved otherwise", object(map[string]any{"name": "Ready", "seq": int64(6), "trigger": "decision", "by": "max"}, nil), nil,
			Unanswered, "the object moved to Ready (visit 6) otherwise: it was not taken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, says := Answer(d, tc.obj, tc.events)
			if got != tc.want || !strings.Contains(says, tc.says) {
				t.Errorf("Answer: %s %q\nwant %s saying %q", got, says, tc.want, tc.says)
			}
		})
	}
}

// TestLastRefusal: the console shows why the engine refused the last
// decision on the visit the object is in, and none of another visit's.
func TestLastRefusal(t *testing.T) {
	d := v1alpha1.Decision{State: "NeedsAttention", Seq: 5, Choose: "Ready", By: "jane"}
	old := d
	old.Seq = 3
	events := []Event{
		{EventDecided, "jane chose RollingBack in NeedsAttention: the checks fail"},
		{EventDecisionRefused, Ref(d) + " is refused: the object is being deleted"},
		{EventDecisionRefused, Ref(old) + " is refused: too late"},
	}
	if got := LastRefusal(events, "NeedsAttention", 5); got != Ref(d)+" is refused: the object is being deleted" {
		t.Errorf("visit 5: %q", got)
	}
	if got := LastRefusal(events, "NeedsAttention", 4); got != "" {
		t.Errorf("visit 4: %q, want none", got)
	}
}
