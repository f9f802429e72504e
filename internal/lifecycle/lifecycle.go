package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/request"
	"github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// Machine runs one Operator's state machine for its objects.
type Machine struct {
	machine  *definition.StateMachine
	operator string
	archive  archive.Recorder
	clock    clock.Clock
	events   events.EventRecorder
	client   client.Client
	console  string // the console's base URL, or ""
	// memory is the operator's per-object memory (package run): it keeps
	// what the machine knows of each object between its reconciles
	// (run.LifeCycle), and the decision annotation's removal is recorded
	// in it.
	memory *run.Memory
}

// Visit is one reconcile's view of an object's state.
type Visit struct {
	// cur is status.state as read; nil for a new object.
	cur *v1alpha1.ObjectState
	// next is the state this reconcile writes (initial or moved to); nil
	// for none.
	next *v1alpha1.ObjectState
	// set are the status fields the transition taken sets, by name.
	set map[string]any
	// Step is what the state machine decided; why is the record's log.
	step statemachine.Step
}

// setRetry is how soon a transition whose set could not be evaluated is
// tried again, when nothing else wakes the object.
const setRetry = 10 * time.Second

// Options are what a Machine acts with. Every field but ConsoleURL is
// required.
type Options struct {
	Archive archive.Recorder
	Clock   clock.Clock
	Events  events.EventRecorder
	Client  client.Client
	// ConsoleURL is the console's base URL, which Events link runs to;
	// "" for none.
	ConsoleURL string
	// Memory is the operator's per-object memory.
	Memory *run.Memory
}

// New returns the state machine of d, or nil for a definition without
// one.
func New(d *definition.Definition, o Options) *Machine {
	if d.States == nil {
		return nil
	}
	return &Machine{machine: d.States, operator: d.Operator.Name, archive: o.Archive, clock: o.Clock, events: o.Events, client: o.Client,
		console: strings.TrimSuffix(o.ConsoleURL, "/"), memory: o.Memory}
}

// readState reads an object's status.state; nil when it has none (or an
// unreadable one, which the initial state then replaces).
func readState(obj map[string]any) *v1alpha1.ObjectState {
	s, err := v1alpha1.ReadObjectState(obj)
	if err != nil || s == nil || s.Name == "" {
		return nil
	}
	return s
}

// stateValue is s as status.state holds it.
func stateValue(s *v1alpha1.ObjectState) map[string]any {
	m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	return m
}

// withState returns a shallow copy of obj whose status.state is s, and
// whose status has the fields of set.
func withState(obj map[string]any, s *v1alpha1.ObjectState, set map[string]any) map[string]any {
	out := maps.Clone(obj)
	status, _ := obj["status"].(map[string]any)
	status = maps.Clone(status)
	if status == nil {
		status = map[string]any{}
	}
	maps.Copy(status, set)
	status["state"] = stateValue(s)
	out["status"] = status
	return out
}

// Begin reads the object's state before its children render: a new
// object is put into its initial state (vars.Self then holds it), and a
// transition that is not in the archive is recorded.
func (s *Machine) Begin(ctx context.Context, cr *unstructured.Unstructured, vars *definition.Vars) *Visit {
	v := &Visit{cur: readState(cr.Object)}
	if v.cur == nil {
		v.step = statemachine.Next(statemachine.Input{Machine: s.machine, Now: s.clock.Now()})
		v.next = v.step.Next
		v.next.Run = archive.NewID(time.Now())
		vars.Self = v.Self(cr.Object)
		return v
	}
	s.recover(ctx, cr, v.cur)
	return v
}

// Self is obj as templates, guards and handlers read it during the visit:
// a new object is in its initial state already.
func (v *Visit) Self(obj map[string]any) map[string]any {
	if v == nil || v.cur != nil || v.next == nil {
		return obj
	}
	return withState(obj, v.next, nil)
}

// Step decides the object's move after its children converged and its
// handlers stepped (handlers is their state, nil for an Operator without
// handlers; operatorPaused: the step found the whole operator paused,
// which holds the object as its own pause does); a move is put into
// vars.Self. It returns when to look again
// for the state's timeout (0 for no timeout to wait for).
func (s *Machine) Step(cr *unstructured.Unstructured, v *Visit, vars *definition.Vars, handlers *cause.State, operatorPaused bool) time.Duration {
	if v.next != nil {
		return 0 // initialized: the next reconcile steps from the initial state
	}
	cv := cause.VisitOf(s.machine, v.cur) // v.cur is what cr holds: a new object returned above
	var awaited []string
	var run definition.Run
	if handlers != nil && cv != nil {
		awaited, run = cv.Awaited(handlers, cr.GetGeneration()), cv.Run(handlers)
	}
	in := statemachine.Input{
		Machine: s.machine, Current: v.cur, Awaited: awaited, Deleting: cr.GetDeletionTimestamp() != nil, Now: s.clock.Now(),
		Guard: func(t *definition.Transition) (bool, error) { return t.Holds(*vars, run) },
	}
	_, in.Paused = cr.GetAnnotations()[v1alpha1.PauseAnnotation]
	in.OperatorPaused = operatorPaused
	if d, ok := cr.GetAnnotations()[v1alpha1.DecisionAnnotation]; ok {
		in.Decision = &d
	}
	v.step = statemachine.Next(in)
	for _, ge := range v.step.GuardErrors {
		s.events.Eventf(cr, nil, corev1.EventTypeWarning, "GuardFailed", "Evaluate", "%v", ge)
	}
	if v.step.Unknown != "" {
		s.events.Eventf(cr, nil, corev1.EventTypeWarning, "UnknownState", "Step", "%s", v.step.Unknown)
	}
	if v.step.Action == statemachine.Move {
		if t := v.step.Transition; t != nil {
			set, err := t.Assign(*vars, run)
			if err != nil {
				// The transition waits for what its set reads (a decision
				// stays to be taken then, and says so).
				if !errors.Is(err, definition.ErrChildMissing) {
					s.events.Eventf(cr, nil, corev1.EventTypeWarning, "SetFailed", "Transition", "the transition from %s to %s waits: %v", v.cur.Name, t.To, err)
				}
				v.step = statemachine.Step{Decision: v.step.Decision}
				if v.step.Decision != nil {
					v.step.Waits = fmt.Sprintf("the status fields the transition to %s sets cannot be evaluated yet (%v); it is tried again in %s", t.To, err, setRetry)
				}
				return setRetry
			}
			v.set = set
		}
		v.next = v.step.Next
		v.next.Run = archive.NewID(time.Now())
		vars.Self = withState(vars.Self, v.next, v.set)
		return 0 // the write reconciles the object again
	}
	if !v.step.Until.IsZero() {
		return max(v.step.Until.Sub(s.clock.Now()), time.Second)
	}
	return 0
}

// WriteTo puts the state and its conditions into the status being
// written; it reports whether the write must be made over the
// resourceVersion read (the state moves).
func (v *Visit) WriteTo(status map[string]any, conds []metav1.Condition) ([]metav1.Condition, bool) {
	cur := v.cur
	if v.next != nil {
		maps.Copy(status, v.set)
		status["state"] = stateValue(v.next)
		cur = v.next
	}
	if cur == nil {
		return conds, false
	}
	msg := cur.Reason
	if msg == "" {
		msg = "the initial state"
	}
	state := metav1.Condition{Type: v1alpha1.ConditionState, Status: metav1.ConditionTrue, Reason: cur.Name, Message: msg}
	person := metav1.Condition{Type: v1alpha1.ConditionNeedsPerson, Status: metav1.ConditionFalse, Reason: "NoDecisionNeeded", Message: cur.Name + " does not wait for a person"}
	if cur.Question != "" {
		state.Message = cur.Question
		person.Status, person.Reason = metav1.ConditionTrue, "WaitingForDecision"
		person.Message = fmt.Sprintf("%s (choose %s with opkit decide)", cur.Question, strings.Join(cur.Choices, " or "))
	}
	return append(conds, state, person), v.next != nil
}

// After does what follows the status write of a reconcile that stepped:
// the Events and archive record of a move, and the decision annotation
// removed once taken or refused. written is false when the write failed
// (nothing is posted or recorded: the next reconcile decides again).
func (s *Machine) After(ctx context.Context, cr *unstructured.Unstructured, v *Visit, written bool) error {
	if !written {
		return nil
	}
	if n := v.next; n != nil {
		s.moved(ctx, cr, n, v.step.Why)
	}
	s.answer(cr, v.step)
	if v.step.Consume {
		return s.removeDecision(ctx, cr)
	}
	return nil
}

// answer posts the engine's answer to the object's decision, if the step
// gives one: Decided, DecisionRefused (a Warning), or DecisionWaits, once
// for as long as it waits for the same thing.
func (s *Machine) answer(cr *unstructured.Unstructured, step statemachine.Step) {
	reason, message := step.Message()
	switch reason {
	case "":
		return
	case statemachine.EventDecisionWaits:
		if s.memory.LifeCycle(cr).Waits == message {
			return
		}
		s.memory.SetLifeCycle(cr, func(l *run.LifeCycle) { l.Waits = message })
	default:
		s.memory.SetLifeCycle(cr, func(l *run.LifeCycle) { l.Waits = "" })
	}
	request.Decide.Answer(s.events, cr, reason, message)
}

// moved posts a transition's Events and records it.
func (s *Machine) moved(ctx context.Context, cr *unstructured.Unstructured, n *v1alpha1.ObjectState, why string) {
	run := s.runRef(n.Run)
	if n.From == "" {
		s.events.Eventf(cr, nil, corev1.EventTypeNormal, "StateChanged", "Transition", "-> %s: the initial state (run %s)", n.Name, run)
	} else {
		s.events.Eventf(cr, nil, corev1.EventTypeNormal, "StateChanged", "Transition", "%s -> %s: %s (run %s)", n.From, n.Name, n.Reason, run)
	}
	if n.Question != "" {
		s.events.Eventf(cr, nil, corev1.EventTypeWarning, "NeedsPerson", "Transition", "%s needs a person: %s Choose %s: opkit decide %s --choose STATE --reason \"...\"",
			n.Name, n.Question, strings.Join(n.Choices, " or "), objectArg(cr))
	}
	if err := s.record(ctx, cr, n, why); err != nil {
		s.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", "Transition", "the transition to %s (run %s) could not be recorded (%v); it is recorded once the archive can", n.Name, n.Run, err)
	}
}

// record adds the transition to n to the archive, with why as its log.
func (s *Machine) record(ctx context.Context, cr *unstructured.Unstructured, n *v1alpha1.ObjectState, why string) error {
	r := archive.NewRun(s.operator, v1alpha1.TransitionHandler, "state", n.Trigger, cr, time.Now()).Instant()
	r.Key, r.Actor = transitionKey(cr.GetUID(), n.Seq), n.By
	r.Diff = []archive.Change{{Op: "change", Path: "status.state.name", Old: n.From, New: n.Name}}
	if n.From == "" {
		r.Diff[0] = archive.Change{Op: "add", Path: "status.state.name", New: n.Name}
	}
	if archive.ValidID(n.Run) {
		r.ID = n.Run // else a status.state.run not of opkit's: the record gets its own
	}
	// Written, it is recorded, also when the engine is stopping.
	if err := archive.Keep(ctx, s.archive, r, transitionLog(n, why)); err != nil {
		return err
	}
	s.memory.SetLifeCycle(cr, func(l *run.LifeCycle) { l.Recorded = n.Run })
	return nil
}

// transitionLog is the paragraph a transition's record keeps.
func transitionLog(n *v1alpha1.ObjectState, why string) string {
	var b strings.Builder
	if n.From == "" {
		fmt.Fprintf(&b, "entered %s, the initial state, at %s (seq %d)", n.Name, n.Since, n.Seq)
	} else {
		fmt.Fprintf(&b, "%s -> %s at %s (seq %d, trigger %s, reason %s)", n.From, n.Name, n.Since, n.Seq, n.Trigger, n.Reason)
	}
	if why != "" {
		fmt.Fprintf(&b, ": %s", why)
	}
	b.WriteString(".\n")
	if n.Question != "" {
		fmt.Fprintf(&b, "%s asks: %s (choices: %s)\n", n.Name, n.Question, strings.Join(n.Choices, ", "))
	}
	return b.String()
}

// recover records the transition status.state names when the archive does
// not have it: its engine stopped between the status write and the
// record.
func (s *Machine) recover(ctx context.Context, cr *unstructured.Unstructured, cur *v1alpha1.ObjectState) {
	if cur.Run == "" || s.memory.LifeCycle(cr).Recorded == cur.Run {
		return
	}
	ok, err := s.archive.Succeeded(ctx, transitionKey(cr.GetUID(), cur.Seq))
	if err != nil {
		return // the next reconcile looks again
	}
	if ok {
		s.memory.SetLifeCycle(cr, func(l *run.LifeCycle) { l.Recorded = cur.Run })
		return
	}
	why := "recorded from status.state by a later reconcile: the engine that made the transition stopped before its record"
	if cur.By != "" {
		why = fmt.Sprintf("%s decided: %s; %s", cur.By, cur.Message, why)
	}
	if err := s.record(ctx, cr, cur, why); err != nil {
		s.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", "Transition", "the transition to %s (run %s) could not be recorded (%v); it is recorded once the archive can", cur.Name, cur.Run, err)
	}
}

// Deleting answers the decision on an object being deleted, if it has
// one: it is refused at once, as its state moves no more.
func (s *Machine) Deleting(ctx context.Context, cr *unstructured.Unstructured) error {
	raw, ok := cr.GetAnnotations()[v1alpha1.DecisionAnnotation]
	cur := readState(cr.Object)
	if !ok || cur == nil {
		return nil
	}
	step := statemachine.Next(statemachine.Input{Machine: s.machine, Current: cur, Decision: &raw, Deleting: true, Now: s.clock.Now()})
	s.answer(cr, step)
	if step.Consume {
		return s.removeDecision(ctx, cr)
	}
	return nil
}

// runRef names a transition's record in an Event: its id, and its console
// page when the console's URL is known.
func (s *Machine) runRef(id string) string {
	if s.console == "" {
		return id
	}
	return id + " (" + s.console + "/runs/" + id + ")"
}

// transitionKey is the idempotency key of a transition's record.
func transitionKey(uid types.UID, seq int64) string { return fmt.Sprintf("%s/state/%d", uid, seq) }

// objectArg is how the CLI names an object: NS/NAME, or NAME.
func objectArg(cr *unstructured.Unstructured) string {
	if cr.GetNamespace() == "" {
		return cr.GetName()
	}
	return cr.GetNamespace() + "/" + cr.GetName()
}

// removeDecision removes the decision annotation, as it was read: a
// decision written since is left for the next reconcile.
func (s *Machine) removeDecision(ctx context.Context, cr *unstructured.Unstructured) error {
	value, ok := cr.GetAnnotations()[v1alpha1.DecisionAnnotation]
	if !ok {
		return nil
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(v1alpha1.DecisionAnnotation, "~", "~0"), "/", "~1")
	patch, _ := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}})
	removed := cr.DeepCopy()
	err := s.client.Patch(ctx, removed, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil:
		s.memory.Record(removed) // a stale cache would show the decision again
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err) || (apierrors.IsInvalid(err) && strings.Contains(err.Error(), "test")):
		return nil // changed since it was read: its update decides the new value
	}
	return fmt.Errorf("removing %s: %w", v1alpha1.DecisionAnnotation, err)
}
