package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	osuser "os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// An object whose operator declares states (spec.states) shows its life
// cycle: status.state, the diagram with its current state, and, while the
// state needs a person, the question and a button per choice. A choice is
// posted to /decide (see decide) and written as the DecisionAnnotation,
// which the engine takes.

// maxReason is the longest reason a decision may give, in bytes.
const maxReason = 1000

// stateView is status.state as the object's page shows it.
type stateView struct {
	v1alpha1.ObjectState
	// At is Since, parsed; zero when it does not parse.
	At time.Time
	// RunID is Run when it is a run id (it links the run).
	RunID string
}

// objectState reads status.state; nil when there is none.
func objectState(obj *unstructured.Unstructured) (*v1alpha1.ObjectState, error) {
	return v1alpha1.ReadObjectState(obj.Object)
}

// decideView is the question of a state that needs a person, and what
// the page offers to answer it.
type decideView struct {
	Question string
	// State and Seq are the visit asked about, posted back with the
	// choice.
	State   string
	Seq     int64
	Choices []choiceView
	// Pending is a decision sent and not taken by the engine yet: the page
	// says so, and what the engine answered, instead of offering the
	// choices again.
	Pending *pendingDecision
	// LastRefused is why the engine refused the last decision made on this
	// visit (its DecisionRefused Event), or "".
	LastRefused string
	// Refused is why this user cannot decide here, or "".
	Refused string
	// Paused: the object's handlers are paused, and with them its state
	// step: a decision waits until it is resumed.
	Paused    bool
	MaxReason int
}

type choiceView struct{ To, Description string }

type pendingDecision struct {
	v1alpha1.Decision
	Sent time.Time
	// Waiting: the engine said it waits; Answer is what it said, or that
	// it has not answered (statemachine.Answer), as opkit decide says it.
	Waiting bool
	Answer  string
}

// lifeCycle adds the object's life cycle to the timeline's data: its
// state, the diagram, and the decision form, with the engine's answer to
// a decision from the object's events (newest first). It adds nothing for
// an object whose operator declares no states and that has no
// status.state.
func (s *Server) lifeCycle(ctx context.Context, u *user, op *operator, obj *unstructured.Unstructured, events []event, data map[string]any) []string {
	var notices []string
	def, _, _ := s.catalog.definition(ctx, op.Name)
	st, err := objectState(obj)
	if err != nil {
		notices = append(notices, "Its state cannot be read: "+err.Error())
	}
	current := ""
	if st != nil {
		current = st.Name
		view := &stateView{ObjectState: *st}
		view.At, _ = time.Parse(time.RFC3339, st.Since)
		if archive.ValidID(st.Run) {
			view.RunID = st.Run
		}
		data["ObjState"] = view
	}
	m := machineOf(def, current, op.GVK.Kind)
	if m != nil {
		data["Machine"] = m
	}
	if st == nil && m == nil {
		return notices
	}
	data["LifeCycle"] = true
	if st == nil {
		return notices
	}
	var declared *definition.State
	if def != nil && def.States != nil {
		declared = def.States.State(st.Name)
	}
	if st.Question == "" && (declared == nil || !declared.NeedsPerson) {
		return notices
	}
	dv := &decideView{Question: st.Question, State: st.Name, Seq: st.Seq, MaxReason: maxReason}
	choices := st.Choices
	if declared != nil {
		if dv.Question == "" {
			dv.Question = declared.Question
		}
		if len(choices) == 0 {
			choices = declared.Choices()
		}
	}
	for _, to := range choices {
		c := choiceView{To: to}
		if declared != nil {
			for _, t := range declared.Transitions {
				if t.To == to {
					c.Description = t.Description
				}
			}
		}
		dv.Choices = append(dv.Choices, c)
	}
	said := engineSaid(events)
	if raw, ok := obj.GetAnnotations()[v1alpha1.DecisionAnnotation]; ok {
		p := &pendingDecision{}
		if json.Unmarshal([]byte(raw), &p.Decision) != nil {
			p.Choose = "(an annotation that is not a decision's JSON)"
		}
		p.Sent, _ = time.Parse(time.RFC3339, p.At)
		verdict, answer := statemachine.Answer(p.Decision, obj.Object, said)
		p.Waiting, p.Answer = verdict == statemachine.Waiting, sentence(answer)
		dv.Pending = p
	}
	if refused := statemachine.LastRefusal(said, st.Name, st.Seq); refused != "" {
		dv.LastRefused = sentence(refused)
	}
	_, dv.Paused = obj.GetAnnotations()[v1alpha1.PauseAnnotation]
	if err := s.may(ctx, u, op, op.GVK, "patch", obj.GetNamespace()); err != nil {
		dv.Refused = "You cannot decide here: " + err.Error() + ". Deciding needs patch on the object, as the console's other actions do."
	}
	data["Decide"] = dv
	return notices
}

// decision is what a decide form posts.
type decision struct {
	State  string
	Seq    int64
	Choose string
	Reason string
}

// readDecision reads a decide form: a visit's seq that is not a number is
// a 400 that says so.
func readDecision(form url.Values) (decision, error) {
	seq, err := strconv.ParseInt(form.Get("seq"), 10, 64)
	if err != nil {
		return decision{}, badRequest("the form's seq %q is not a number: reload the page and decide again", form.Get("seq"))
	}
	return decision{State: form.Get("state"), Seq: seq, Choose: form.Get("choose"), Reason: strings.TrimSpace(form.Get("reason"))}, nil
}

// checkDecision refuses a decision on obj that the engine would refuse,
// or that is not the person's to make any more: the object is being
// deleted, it moved to another state or visit since the page was shown,
// its state does not wait for a person, the choice is not one offered,
// the reason is missing, or a decision is already sent and not taken yet.
func checkDecision(obj *unstructured.Unstructured, d decision) error {
	what := obj.GetKind() + " " + objectLabel(obj.GetNamespace(), obj.GetName())
	if strings.TrimSpace(d.Reason) == "" {
		return badRequest("a decision needs a reason: say why in the Why? field, and choose again")
	}
	if len(d.Reason) > maxReason {
		return badRequest("the reason is %d bytes long; at most %d are kept: say it shorter", len(d.Reason), maxReason)
	}
	st, err := objectState(obj)
	if err != nil {
		return &httpError{http.StatusConflict, fmt.Sprintf("%s: %v", what, err)}
	}
	if st == nil {
		return &httpError{http.StatusConflict, what + " has no state yet: there is nothing to decide"}
	}
	if obj.GetDeletionTimestamp() != nil {
		return &httpError{http.StatusConflict, what + " is being deleted: its state does not move any more; nothing was sent"}
	}
	if st.Name != d.State || st.Seq != d.Seq {
		return &httpError{http.StatusConflict, fmt.Sprintf("%s moved since the page was shown: it is in %s (visit %d), not in %s (visit %d) that you decided on; nothing was sent: reload the page and decide again if it still asks",
			what, st.Name, st.Seq, d.State, d.Seq)}
	}
	if st.Question == "" {
		return &httpError{http.StatusConflict, fmt.Sprintf("%s is in %s, which does not wait for a person's decision; nothing was sent", what, st.Name)}
	}
	if !slices.Contains(st.Choices, d.Choose) {
		return &httpError{http.StatusConflict, fmt.Sprintf("%q is not a choice from %s: choose one of %s", d.Choose, st.Name, strings.Join(st.Choices, ", "))}
	}
	if raw, ok := obj.GetAnnotations()[v1alpha1.DecisionAnnotation]; ok {
		var sent v1alpha1.Decision
		_ = json.Unmarshal([]byte(raw), &sent)
		return &httpError{http.StatusConflict, fmt.Sprintf("a decision is already sent for %s (by %s: choose %s) and the engine has not answered it; nothing was sent: the object's page says why it waits",
			what, cmp.Or(sent.By, "someone"), cmp.Or(sent.Choose, "?"))}
	}
	return nil
}

// decisionWait is how long a decide form waits for the engine's answer
// before it shows the object's page, which says it (taken, refused with
// why, or what the decision waits for), and follows it live after.
const decisionWait = 3 * time.Second

// decide answers a decide form: it checks the user may patch the object,
// reads the object again, refuses what checkDecision refuses, and writes
// the DecisionAnnotation with a merge patch that carries the
// resourceVersion it read, so that a change in between refuses it too.
// Then it waits up to decisionWait for the engine's answer, and shows the
// object's page.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, u *user, opName, ns, name string) {
	ctx := r.Context()
	op, err := s.mayAct(ctx, u, opName, ns)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := readDecision(postForm(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(op.GVK)
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			err = notFound("%s %s does not exist", op.GVK.Kind, objectLabel(ns, name))
		}
		s.fail(w, r, err)
		return
	}
	if err := checkDecision(obj, d); err != nil {
		s.fail(w, r, err)
		return
	}
	sent := v1alpha1.Decision{State: d.State, Seq: d.Seq, Choose: d.Choose, Reason: d.Reason, By: s.decidedBy(u), At: time.Now().UTC().Format(time.RFC3339)}
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, sent.Patch(obj.GetResourceVersion()))); err != nil {
		switch {
		case apierrors.IsConflict(err):
			err = &httpError{http.StatusConflict, fmt.Sprintf("%s %s changed while you decided; nothing was sent: reload the page and decide again if it still asks", op.GVK.Kind, objectLabel(ns, name))}
		case apierrors.IsNotFound(err):
			err = notFound("%s %s does not exist", op.GVK.Kind, objectLabel(ns, name))
		}
		s.fail(w, r, err)
		return
	}
	s.awaitAnswer(ctx, obj, sent)
	http.Redirect(w, r, objectURL(opName, ns, name), http.StatusSeeOther)
}

// awaitAnswer waits up to decisionWait for the engine to answer the
// decision d written on obj (statemachine.Answer over the object and its
// Events): taken, refused, or waiting.
func (s *Server) awaitAnswer(ctx context.Context, obj *unstructured.Unstructured, d v1alpha1.Decision) {
	poll(ctx, func(ctx context.Context) bool {
		cur := obj.DeepCopy()
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return true
		}
		events, _ := s.events(ctx, cur)
		verdict, _ := statemachine.Answer(d, cur.Object, engineSaid(events))
		return verdict != statemachine.Unanswered
	})
}

// poll calls done every 250 ms, up to decisionWait, until it reports that
// the engine answered (or that asking again cannot help): how an action's
// answer is awaited before its page is shown.
func poll(ctx context.Context, done func(context.Context) bool) {
	ctx, cancel := context.WithTimeout(ctx, decisionWait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		if done(ctx) {
			return
		}
	}
}

// sentence is s with its first letter upper-case and a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// engineSaid is the object's events as statemachine.Answer reads them.
func engineSaid(events []event) []statemachine.Event {
	out := make([]statemachine.Event, len(events))
	for i, e := range events {
		out[i] = statemachine.Event{Reason: e.Reason, Message: e.Message}
	}
	return out
}

// decidedBy is who a decision from u is recorded as made by: the
// Kubernetes user under Kubernetes auth; under token auth, whoever holds
// the console's token; without auth, the console on loopback, and the OS
// user it runs as.
func (s *Server) decidedBy(u *user) string {
	switch {
	case s.opts.Auth.Kubernetes:
		return u.Name
	case s.opts.Auth.Token != "":
		return "console token holder"
	}
	if name := osUser(); name != "" {
		return "console (" + name + ")"
	}
	return "console"
}

// osUser is the name of the user the process runs as, or "".
var osUser = sync.OnceValue(func() string {
	if u, err := osuser.Current(); err == nil {
		return u.Username
	}
	return ""
})

// transitionView is a run that records a state transition, as the
// timeline and its run page show it.
type transitionView struct {
	From, To string
	Trigger  string
	Actor    string
}

// transitionOf reads a transition run; nil for another run.
func transitionOf(r archive.Run) *transitionView {
	from, to, ok := r.Transition()
	if !ok {
		return nil
	}
	return &transitionView{Trigger: r.Trigger, Actor: r.Actor, From: from, To: to}
}

// triggerWords says how a transition came, in words.
func triggerWords(trigger string) string {
	switch trigger {
	case v1alpha1.TransitionInitial:
		return "the initial state of a new object"
	case v1alpha1.TransitionGuard:
		return "its guard held"
	case v1alpha1.TransitionTimeout:
		return "its timeout expired"
	case v1alpha1.TransitionDecision:
		return "a person decided"
	case "":
		return "–"
	}
	return trigger
}

// transitionLogs keeps the logs of transition runs, which do not change
// once written: the timeline shows each one's paragraph on every update.
type transitionLogs struct {
	mu   sync.Mutex
	logs map[string]string
}

// accounts returns the engine's account of each transition, pause, resume
// and retry among runs, by run id, cut to a paragraph; and of each other run
// a person asked for whose record keeps no reason (a schedule run now),
// the first line of its log, which says who asked and why.
func (s *Server) accounts(ctx context.Context, runs []archive.Run) map[string]string {
	out := map[string]string{}
	for _, r := range runs {
		firstLine := false
		switch a := actionOf(r, nil); {
		case r.Handler == v1alpha1.TransitionHandler, a != nil && a.Badge != "":
		case a != nil && a.Account:
			firstLine = true
		default:
			continue
		}
		s.logs.mu.Lock()
		text, ok := s.logs.logs[r.ID]
		s.logs.mu.Unlock()
		if !ok {
			stored, err := s.opts.Archive.Logs(ctx, r.ID, 0)
			if err != nil {
				continue
			}
			text = strings.TrimSpace(archive.CleanLog(stored.Data))
			if firstLine {
				text, _, _ = strings.Cut(text, "\n")
			}
			text = cut(text, 400)
			if text == "" || r.FinishedAt.IsZero() {
				out[r.ID] = text
				continue // not written whole yet, maybe
			}
			s.logs.mu.Lock()
			if s.logs.logs == nil || len(s.logs.logs) > 10_000 {
				s.logs.logs = map[string]string{}
			}
			s.logs.logs[r.ID] = text
			s.logs.mu.Unlock()
		}
		out[r.ID] = text
	}
	return out
}
