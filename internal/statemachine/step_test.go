package statemachine

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// database is the machine of examples/database, as the loader compiles it
// (guards are named by their source; the tests give their values).
func database() *definition.StateMachine {
	guard := func(src string) *definition.Expression { return &definition.Expression{Source: src} }
	provisioning := &definition.State{Name: "Provisioning",
		Transitions: []*definition.Transition{{To: "Ready", Reason: "Provisioned", When: guard("server ready")}},
		Timeout:     &definition.Timeout{After: 10 * time.Minute, To: "NeedsAttention", Reason: "ProvisioningTooSlow"}}
	ready := &definition.State{Name: "Ready", Transitions: []*definition.Transition{{To: "Upgrading", Reason: "VersionChanged", When: guard("version changed")}}}
	verifying := &definition.State{Name: "Verifying",
		Transitions: []*definition.Transition{
			{To: "Ready", Reason: "Verified", When: guard("verify succeeded")},
			{To: "NeedsAttention", Reason: "VerificationFailed", When: guard("verify failed")},
		},
		Timeout: &definition.Timeout{After: 10 * time.Minute, To: "NeedsAttention", Reason: "VerificationTooSlow"}}
	attention := &definition.State{Name: "NeedsAttention", NeedsPerson: true, Question: "Roll back or accept?",
		Transitions: []*definition.Transition{{To: "RollingBack", Reason: "RollBack"}, {To: "Ready", Reason: "Accepted"}}}
	rolling := &definition.State{Name: "RollingBack", Transitions: []*definition.Transition{{To: "Ready", Reason: "RolledBack", When: guard("rolled back")}}}
	always := &definition.State{Name: "Always", Transitions: []*definition.Transition{{To: "Ready", Reason: "Always"}}}
	return &definition.StateMachine{Initial: provisioning, States: []*definition.State{provisioning, ready, verifying, attention, rolling, always}}
}

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func state(name string, seq int64, since time.Time) *v1alpha1.ObjectState {
	return &v1alpha1.ObjectState{Name: name, Seq: seq, Since: since.Format(time.RFC3339), Trigger: v1alpha1.TransitionGuard}
}

// guards gives each guard, by its source, a value or an error; a guard not
// listed does not hold.
func guards(values map[string]any) func(*definition.Transition) (bool, error) {
	return func(t *definition.Transition) (bool, error) {
		switch v := values[t.When.Source].(type) {
		case bool:
			return v, nil
		case error:
			return false, v
		}
		return false, nil
	}
}

func decision(d v1alpha1.Decision) *string {
	data, _ := json.Marshal(d)
	s := string(data)
	return &s
}

func raw(s string) *string { return &s }

func TestNext(t *testing.T) {
	m := database()
	valid := v1alpha1.Decision{State: "NeedsAttention", Seq: 5, Choose: "RollingBack", Reason: "the checks fail", By: "jane", At: "2026-11-26T12:00:00Z"}
	with := func(change func(*v1alpha1.Decision)) v1alpha1.Decision { d := valid; change(&d); return d }
	otherState := with(func(d *v1alpha1.Decision) { d.State = "Verifying" })
	inReady := with(func(d *v1alpha1.Decision) { d.State = "Ready" })
	inGone := with(func(d *v1alpha1.Decision) { d.State = "Gone" })
	notAChoice := with(func(d *v1alpha1.Decision) { d.Choose = "Verifying" })
	noReason := with(func(d *v1alpha1.Decision) { d.Reason = " " })
	nobody := with(func(d *v1alpha1.Decision) { d.By = "" })
	// A handler of the visit that has not finished (cause.Visit.Awaited);
	// one that gave up is not awaited, so a decision is taken.
	running := []string{"page (on entering NeedsAttention)"}
	missing := fmt.Errorf("no such key: succeeded: %w", definition.ErrChildMissing)
	tests := []struct {
		name string
		in   Input
		want Step
	}{
		{
			name: "a new object starts in the initial state",
			in:   Input{Now: at(0)},
			want: Step{Action: Initialize, Next: &v1alpha1.ObjectState{Name: "Provisioning", Seq: 1, Since: "2026-11-26T12:00:00Z", Trigger: v1alpha1.TransitionInitial},
				Why: "the object was created: it starts in Provisioning"},
		},
		{
			name: "a new object starts even while paused: templates read its state",
			in:   Input{Now: at(0), Paused: true, Current: &v1alpha1.ObjectState{}},
			want: Step{Action: Initialize, Next: &v1alpha1.ObjectState{Name: "Provisioning", Seq: 1, Since: "2026-11-26T12:00:00Z", Trigger: v1alpha1.TransitionInitial},
				Why: "the object was created: it starts in Provisioning"},
		},
		{
			name: "the first transition whose guard holds is taken",
			in:   Input{Current: state("Verifying", 4, at(0)), Now: at(time.Minute), Guard: guards(map[string]any{"verify succeeded": true, "verify failed": true})},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "Ready", Seq: 5, Since: "2026-11-26T12:01:00Z", Reason: "Verified", From: "Verifying", Trigger: v1alpha1.TransitionGuard},
				Why: "the transition from Verifying to Ready was taken: its guard held: verify succeeded"},
		},
		{
			name: "a later transition holds when the first does not",
			in:   Input{Current: state("Verifying", 4, at(0)), Now: at(time.Minute), Guard: guards(map[string]any{"verify succeeded": false, "verify failed": true})},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "NeedsAttention", Seq: 5, Since: "2026-11-26T12:01:00Z", Reason: "VerificationFailed", From: "Verifying", Trigger: v1alpha1.TransitionGuard,
				Question: "Roll back or accept?", Choices: []string{"RollingBack", "Ready"}},
				Why: "the transition from Verifying to NeedsAttention was taken: its guard held: verify failed"},
		},
		{
			name: "a guard that reads what does not exist yet does not hold, silently; the deadline is kept",
			in:   Input{Current: state("Verifying", 4, at(0)), Now: at(time.Minute), Guard: guards(map[string]any{"verify succeeded": missing, "verify failed": missing})},
			want: Step{Until: at(10 * time.Minute)},
		},
		{
			name: "a guard that fails otherwise does not hold and is reported; the next is tried",
			in:   Input{Current: state("Verifying", 4, at(0)), Now: at(time.Minute), Guard: guards(map[string]any{"verify succeeded": errors.New("no such overload"), "verify failed": true})},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "NeedsAttention", Seq: 5, Since: "2026-11-26T12:01:00Z", Reason: "VerificationFailed", From: "Verifying", Trigger: v1alpha1.TransitionGuard,
				Question: "Roll back or accept?", Choices: []string{"RollingBack", "Ready"}},
				Why:         "the transition from Verifying to NeedsAttention was taken: its guard held: verify failed",
				GuardErrors: []GuardError{{State: "Verifying", To: "Ready", Err: errors.New("no such overload")}}},
		},
		{
			name: "a transition without a guard holds",
			in:   Input{Current: state("Always", 2, at(0)), Now: at(time.Second), Guard: guards(nil)},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "Ready", Seq: 3, Since: "2026-11-26T12:00:01Z", Reason: "Always", From: "Always", Trigger: v1alpha1.TransitionGuard},
				Why: "the transition from Always to Ready was taken: it has no guard"},
		},
		{
			name: "nothing holds: the object waits until the timeout's deadline, since + after",
			in:   Input{Current: state("Provisioning", 1, at(0)), Now: at(time.Minute), Guard: guards(nil)},
			want: Step{Until: at(10 * time.Minute)},
		},
		{
			name: "the timeout comes first, whatever holds",
			in:   Input{Current: state("Provisioning", 1, at(0)), Now: at(10 * time.Minute), Guard: guards(map[string]any{"server ready": true})},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "NeedsAttention", Seq: 2, Since: "2026-11-26T12:10:00Z", Reason: "ProvisioningTooSlow", From: "Provisioning", Trigger: v1alpha1.TransitionTimeout,
				Question: "Roll back or accept?", Choices: []string{"RollingBack", "Ready"}},
				Why: "the state's timeout of 10m0s expired at 2026-11-26T12:10:00Z (in Provisioning since 2026-11-26T12:00:00Z)"},
		},
		{
			name: "a timeout that expired while no engine ran fires at the next step",
			in:   Input{Current: state("Provisioning", 1, at(0)), Now: at(3 * time.Hour), Guard: guards(nil)},
			want: Step{Action: Move, Next: &v1alpha1.ObjectState{Name: "NeedsAttention", Seq: 2, Since: "2026-11-26T15:00:00Z", Reason: "ProvisioningTooSlow", From: "Provisioning", Trigger: v1alpha1.TransitionTimeout,
				Question: "Roll back or accept?", Choices: []string{"RollingBack", "Ready"}},
				Why: "the state's timeout of 10m0s expired at 2026-11-26T12:10:00Z (in Provisioning since 2026-11-26T12:00:00Z)"},
		},
		{
			name: "nothing moves until the visit's handlers are done, not even a timeout past due",
			in:   Input{Current: state("Provisioning", 1, at(0)), Awaited: running, Now: at(time.Hour), Guard: guards(map[string]any{"server ready": true})},
			want: Step{},
		},
		{
			name: "paused holds everything",
			in:   Input{Current: state("Provisioning", 1, at(0)), Paused: true, Now: at(time.Hour), Guard: guards(map[string]any{"server ready": true})},
			want: Step{},
		},
		{
			name: "paused holds a decision too, which stays, and says why",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Paused: true, Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Decision: &valid, Waits: "the object is paused (opkit.dev/paused): it is taken once the object is resumed"},
		},
		{
			name: "its whole operator's pause holds everything too",
			in:   Input{Current: state("Provisioning", 1, at(0)), OperatorPaused: true, Now: at(time.Hour), Guard: guards(map[string]any{"server ready": true})},
			want: Step{},
		},
		{
			name: "its whole operator's pause holds a decision, which stays, and says why",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), OperatorPaused: true, Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Decision: &valid, Waits: "its whole operator is paused (opkit.dev/paused on its Operator): it is taken once the operator is resumed"},
		},
		{
			name: "an object being deleted does not move",
			in:   Input{Current: state("Provisioning", 1, at(0)), Deleting: true, Now: at(time.Hour), Guard: guards(map[string]any{"server ready": true})},
			want: Step{},
		},
		{
			name: "a state that NeedsPerson never moves without a decision: no guard, no timeout",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(1000 * time.Hour), Guard: guards(nil)},
			want: Step{},
		},
		{
			name: "a valid decision moves to the choice, with who and why",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Action: Move, Consume: true, Decision: &valid,
				Next: &v1alpha1.ObjectState{Name: "RollingBack", Seq: 6, Since: "2026-11-26T13:00:00Z", Reason: "RollBack", From: "NeedsAttention", Trigger: v1alpha1.TransitionDecision, By: "jane", Message: "the checks fail"},
				Why:  "jane decided, in NeedsAttention, to go to RollingBack: the checks fail"},
		},
		{
			name: "a decision waits for the visit's handlers, and says which",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Awaited: running, Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Decision: &valid, Waits: "the handlers of this visit of NeedsAttention have not finished: page (on entering NeedsAttention); it is taken once they have (one that gives up is done with)"},
		},
		{
			name: "a stale decision (another visit) is refused",
			in:   Input{Current: state("NeedsAttention", 7, at(0)), Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Consume: true, Decision: &valid, Refused: "the decision is for NeedsAttention (visit 5), and the object is in NeedsAttention (visit 7): decide again on what it is in now"},
		},
		{
			name: "a decision for a state the object is not in is refused",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: decision(otherState)},
			want: Step{Consume: true, Decision: &otherState, Refused: "the decision is for Verifying (visit 5), and the object is in NeedsAttention (visit 5): decide again on what it is in now"},
		},
		{
			name: "a decision in a state that does not wait for a person is refused, and guards are not tried",
			in:   Input{Current: state("Ready", 5, at(0)), Now: at(time.Hour), Decision: decision(inReady), Guard: guards(map[string]any{"version changed": true})},
			want: Step{Consume: true, Decision: &inReady, Refused: "the object is in Ready, which does not wait for a person"},
		},
		{
			name: "a choice that is not one is refused, naming the choices",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: decision(notAChoice)},
			want: Step{Consume: true, Decision: &notAChoice, Refused: "Verifying is not a choice of NeedsAttention: choose one of RollingBack, Ready"},
		},
		{
			name: "a decision without a reason is refused",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: decision(noReason)},
			want: Step{Consume: true, Decision: &noReason, Refused: "the decision gives no reason"},
		},
		{
			name: "a decision without who is refused",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: decision(nobody)},
			want: Step{Consume: true, Decision: &nobody, Refused: "the decision does not say who decided (by)"},
		},
		{
			name: "an annotation that is not a decision is refused",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Now: at(time.Hour), Decision: raw("RollingBack")},
			want: Step{Consume: true, Refused: "the annotation opkit.dev/decision is not a decision (invalid character 'R' looking for beginning of value): use opkit decide"},
		},
		{
			name: "a state the machine does not declare moves nowhere",
			in:   Input{Current: state("Gone", 3, at(0)), Now: at(time.Hour)},
			want: Step{Unknown: "status.state.name is Gone, which the Operator does not declare: nothing moves until the Operator declares it again"},
		},
		{
			name: "a decision in a state the machine does not declare is refused at once",
			in:   Input{Current: state("Gone", 5, at(0)), Now: at(time.Hour), Decision: decision(inGone)},
			want: Step{Consume: true, Decision: &inGone, Refused: "status.state.name is Gone, which the Operator does not declare: nothing moves until the Operator declares it again",
				Unknown: "status.state.name is Gone, which the Operator does not declare: nothing moves until the Operator declares it again"},
		},
		{
			name: "a decision on an object being deleted is refused at once",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Deleting: true, Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Consume: true, Decision: &valid, Refused: "the object is being deleted: its state does not move any more"},
		},
		{
			name: "a wrong decision is refused at once, while the visit's handlers run",
			in:   Input{Current: state("NeedsAttention", 5, at(0)), Awaited: running, Now: at(time.Hour), Decision: decision(notAChoice)},
			want: Step{Consume: true, Decision: &notAChoice, Refused: "Verifying is not a choice of NeedsAttention: choose one of RollingBack, Ready"},
		},
		{
			name: "a wrong decision is refused at once, while the object is paused",
			in:   Input{Current: state("NeedsAttention", 7, at(0)), Paused: true, Now: at(time.Hour), Decision: decision(valid)},
			want: Step{Consume: true, Decision: &valid, Refused: "the decision is for NeedsAttention (visit 5), and the object is in NeedsAttention (visit 7): decide again on what it is in now"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Machine = m
			got := Next(tc.in)
			// The transition taken is the one a guard or a decision
			// chose, leading where the step goes; none for a timeout.
			switch {
			case got.Action == Move && got.Next.Trigger != v1alpha1.TransitionTimeout:
				if got.Transition == nil || got.Transition.To != got.Next.Name {
					t.Errorf("Next moved to %s by %s, with transition %+v; want the transition to %s", got.Next.Name, got.Next.Trigger, got.Transition, got.Next.Name)
				}
			case got.Transition != nil:
				t.Errorf("Next gave the transition to %s without a move by a guard or a decision: %s", got.Transition.To, show(got))
			}
			got.Transition = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Next:\n got %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
}

// TestTimeoutFiresOnce steps an object through its timeout as reconciles
// would, the status of each written back: it fires once; the visit it
// leads to (a new seq and since) does not fire it again.
func TestTimeoutFiresOnce(t *testing.T) {
	m := database()
	// Verifying -> NeedsAttention on timeout, with no guard holding.
	cur := state("Verifying", 3, at(0))
	moves := 0
	for _, now := range []time.Time{at(time.Minute), at(10 * time.Minute), at(10 * time.Minute), at(11 * time.Minute), at(3 * time.Hour)} {
		s := Next(Input{Machine: m, Current: cur, Now: now, Guard: guards(nil)})
		if s.Action == Move {
			moves++
			cur = s.Next
		}
	}
	if moves != 1 || cur.Name != "NeedsAttention" || cur.Seq != 4 || cur.Trigger != v1alpha1.TransitionTimeout {
		t.Errorf("after the steps: %d moves, state %+v; want one move to NeedsAttention, seq 4, on timeout", moves, cur)
	}
	// A step made over the status as it was before the move (a stale
	// read) would decide it again: the engine's write, guarded by the
	// resourceVersion, is what refuses it. The step itself is the same.
	again := Next(Input{Machine: m, Current: state("Verifying", 3, at(0)), Now: at(11 * time.Minute), Guard: guards(nil)})
	if again.Action != Move || again.Next.Seq != 4 {
		t.Errorf("over the old status: %+v, want the same move to seq 4 (which the write's precondition refuses)", again)
	}
}

func show(s Step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{%s", s.Action)
	if s.Next != nil {
		fmt.Fprintf(&b, " next=%+v", *s.Next)
	}
	if s.Decision != nil {
		fmt.Fprintf(&b, " decision=%+v", *s.Decision)
	}
	fmt.Fprintf(&b, " why=%q until=%v consume=%v refused=%q waits=%q unknown=%q guardErrors=%v}", s.Why, s.Until, s.Consume, s.Refused, s.Waits, s.Unknown, s.GuardErrors)
	return b.String()
}
