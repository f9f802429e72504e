package statemachine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// The engine's answer to a decision is an Event on the object, one of
// these reasons, whose message names the decision (Ref): opkit decide and
// the console read it (Answer) to say what became of the decision they
// wrote, in the engine's words.
const (
	// EventDecided: the decision is taken.
	EventDecided = "Decided"
	// EventDecisionRefused (Warning): the decision is refused, and
	// removed; the message says why.
	EventDecisionRefused = "DecisionRefused"
	// EventDecisionWaits: a valid decision is not taken yet; the message
	// says what it waits for.
	EventDecisionWaits = "DecisionWaits"
)

// PausedWaits is why a decision on a paused object waits.
const PausedWaits = "the object is paused (" + v1alpha1.PauseAnnotation + "): it is taken once the object is resumed"

// OperatorPausedWaits is why a decision on an object of an operator
// paused whole waits.
const OperatorPausedWaits = "its whole operator is paused (" + v1alpha1.PauseAnnotation + " on its Operator): it is taken once the operator is resumed"

// Ref names a decision in the engine's Events: who, when, on which visit,
// and what they chose.
func Ref(d v1alpha1.Decision) string {
	at := ""
	if d.At != "" {
		at = " at " + d.At
	}
	return fmt.Sprintf("the decision of %s%s (%s, visit %d: choose %s)", d.By, at, d.State, d.Seq, d.Choose)
}

// Message is the message of the engine's Event for a step that answers a
// decision, and its reason; "" for a step that does not.
func (s Step) Message() (reason, message string) {
	d := s.Decision
	switch {
	case s.Refused != "" && d == nil:
		return EventDecisionRefused, fmt.Sprintf("the decision in %s is refused: %s", v1alpha1.DecisionAnnotation, s.Refused)
	case s.Refused != "":
		return EventDecisionRefused, fmt.Sprintf("%s is refused: %s", Ref(*d), s.Refused)
	case s.Waits != "" && d != nil:
		return EventDecisionWaits, fmt.Sprintf("%s waits: %s", Ref(*d), s.Waits)
	case s.Action == Move && d != nil:
		return EventDecided, fmt.Sprintf("%s chose %s in %s: %s", d.By, d.Choose, d.State, d.Reason)
	}
	return "", ""
}

// Verdict is what became of a decision written on an object.
type Verdict int

// Verdicts.
const (
	// Unanswered: the engine has not answered (yet).
	Unanswered Verdict = iota
	// Taken: the object moved by the decision.
	Taken
	// Refused: the engine refused it, and removed it.
	Refused
	// Waiting: it stays on the object, to be taken once what it waits
	// for is done.
	Waiting
)

func (v Verdict) String() string {
	return [...]string{"unanswered", "taken", "refused", "waiting"}[v]
}

// Event is what Answer reads of one of the object's Events.
type Event struct{ Reason, Message string }

// Answer reads what became of the decision d written on obj (a custom
// resource, as unstructured data), from the object as read now and its
// Events, and says it in a sentence:
//   - Taken: status.state is the visit the decision began (seq d.Seq+1,
//     trigger decision, by d.By, in the state chosen);
//   - Refused: the annotation is gone, the object did not move by it, and
//     a DecisionRefused Event names it (its message is the why);
//   - Waiting: the annotation is still d, and a DecisionWaits Event names
//     it, or the object is paused;
//   - Unanswered: none of these (yet): the engine has not answered, or its
//     Event has not arrived.
func Answer(d v1alpha1.Decision, obj map[string]any, events []Event) (Verdict, string) {
	cur, _ := v1alpha1.ReadObjectState(obj)
	if cur != nil && cur.Seq == d.Seq+1 && cur.Trigger == v1alpha1.TransitionDecision && cur.By == d.By && cur.Name == d.Choose {
		run := ""
		if cur.Run != "" {
			run = fmt.Sprintf(" (run %s)", cur.Run)
		}
		return Taken, fmt.Sprintf("taken: %s -> %s%s", d.State, d.Choose, run)
	}
	ref := Ref(d)
	said := func(reason string) string {
		for _, e := range events {
			if e.Reason == reason && strings.Contains(e.Message, ref) {
				return e.Message
			}
		}
		return ""
	}
	if why := said(EventDecisionRefused); why != "" {
		return Refused, why
	}
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	raw, pending := annotations[v1alpha1.DecisionAnnotation].(string)
	var there v1alpha1.Decision
	if pending && (json.Unmarshal([]byte(raw), &there) != nil || there != d) {
		return Unanswered, fmt.Sprintf("another decision replaced it before the engine answered: %s", raw)
	}
	if !pending {
		if cur != nil && (cur.Name != d.State || cur.Seq != d.Seq) {
			return Unanswered, fmt.Sprintf("it is gone, and the object moved to %s (visit %d) otherwise: it was not taken", cur.Name, cur.Seq)
		}
		return Unanswered, "it is gone and the object did not move by it: the engine refused it (its Event DecisionRefused has not arrived), or someone removed it"
	}
	if why := said(EventDecisionWaits); why != "" {
		return Waiting, why
	}
	if _, paused := annotations[v1alpha1.PauseAnnotation]; paused {
		return Waiting, ref + " waits: " + PausedWaits
	}
	return Unanswered, "no engine has answered it yet: is one running for this object's Operator? The decision stays on the object, and is taken or refused when an engine reads it"
}

// LastRefusal is the message of the first DecisionRefused Event among
// events (newest first) that names a decision on the visit seq of state:
// why the engine refused the last decision made on what the object asks
// now; "" for none.
func LastRefusal(events []Event, state string, seq int64) string {
	visit := fmt.Sprintf(" (%s, visit %d: choose ", state, seq)
	for _, e := range events {
		if e.Reason == EventDecisionRefused && strings.Contains(e.Message, visit) {
			return e.Message
		}
	}
	return ""
}
