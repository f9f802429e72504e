package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
)

// The operator page's view of a staged rollout (spec.rollout,
// docs/changing-operators.md): the Rollout the engine keeps for the
// operator, read as it is, never written but through a person's request.
// A Rollout that cannot be read (no CRD, none, not allowed) shows
// nothing: a rollout is an addition to the page, not a condition of it.

// rolloutView is one Rollout of an operator, as the operator page shows
// it.
type rolloutView struct {
	// Name is the Rollout object's; Namespace the one namespace its
	// engine runs in, "" for every namespace.
	Name, Namespace string
	Operator        string
	Phase, Reason   string
	// Pending: From and To differ and the rollout is not Complete; the
	// page then shows the section, and the objects' definitions.
	Pending  bool
	From, To string
	Step     int
	Steps    []rolloutStepView
	NSteps   int
	Settle   string
	Moved    int
	Total    int
	// Request is a person's request not answered yet, and who asked.
	Request, RequestedBy string
	// Diff is the definition's change, spec.rollout aside; DiffErr why
	// it cannot be said.
	Diff    []archive.Change
	DiffErr string
	// CanContinue and CanUndo say which request the phase accepts;
	// MayRequest that the user may write one (patch on the Rollout).
	// ResourceVersion is the Rollout's as read, for the form: a request
	// on a rollout changed since is refused.
	CanContinue, CanUndo bool
	MayRequest           bool
	ResourceVersion      string

	moved map[string]bool
}

// rolloutStepView is one step of the rollout's plan.
type rolloutStepView struct {
	N    int
	Text string
	// Taken: the objects of the step are moved. Next: the step that
	// comes next, and What says when.
	Taken, Next bool
	When        string
}

// Paused and RolledBack name the phases the page sets apart.
func (r *rolloutView) Paused() bool     { return r.Phase == v1alpha1.RolloutPaused }
func (r *rolloutView) RolledBack() bool { return r.Phase == v1alpha1.RolloutRolledBack }

// covers reports whether the object in namespace ns is one of the
// rollout's.
func (r *rolloutView) covers(ns string) bool { return r.Namespace == "" || r.Namespace == ns }

// objectDefinition is what the objects table says of one object's
// definition while a rollout is pending.
type objectDefinition struct {
	// Version is new, previous, or unknown (a definition of neither, or
	// none yet); Hash the one its status says.
	Version, Hash string
	// Moving says the definition it is to be on, when its status says
	// another: it has not been reconciled by it yet.
	Moving string
}

// definitionOf says where the object is, against the rollout.
func (r *rolloutView) definitionOf(ns, name, on string) *objectDefinition {
	version := func(hash string) string {
		switch hash {
		case r.To:
			return "new"
		case r.From:
			return "previous"
		}
		return "unknown"
	}
	want := r.From
	if r.moved[objectLabel(ns, name)] {
		want = r.To
	}
	d := &objectDefinition{Version: version(on), Hash: on}
	if on == "" {
		d.Version = "none yet"
	}
	if on != want {
		d.Moving = version(want)
	}
	return d
}

// operatorRollouts reads the Rollouts of the operator name: the one named
// after it, or those of its engines of one namespace (NAME.NAMESPACE).
// Rollouts the user may not get, or that cannot be read, are left out.
func (s *Server) operatorRollouts(ctx context.Context, u *user, name string) []*rolloutView {
	var found []unstructured.Unstructured
	one := &unstructured.Unstructured{}
	one.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := s.catalog.client.Get(ctx, client.ObjectKey{Name: name}, one); err == nil {
		found = append(found, *one)
	} else {
		// No CRD, none, or not allowed: the engines of one namespace may
		// have theirs; any error here means there is nothing to show.
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind + "List"))
		if s.catalog.client.List(ctx, list) != nil {
			return nil
		}
		for _, item := range list.Items {
			if strings.HasPrefix(item.GetName(), name+".") {
				found = append(found, item)
			}
		}
	}
	var out []*rolloutView
	for i := range found {
		res := resource{Group: v1alpha1.Group, Resource: v1alpha1.RolloutResource, Name: found[i].GetName()}
		if ok, err := s.auth.allowed(ctx, u, res, "get", ""); err != nil || !ok {
			continue
		}
		if r := readRolloutView(name, &found[i]); r != nil {
			res.Name = r.Name
			r.MayRequest, _ = s.auth.allowed(ctx, u, res, "patch", "")
			out = append(out, r)
		}
	}
	return out
}

// readRolloutView reads a Rollout of the operator name; nil when it is
// not one (unreadable, or another operator's: an operator may have a dot
// in its name).
func readRolloutView(name string, u *unstructured.Unstructured) *rolloutView {
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return nil
	}
	st := obj.Status
	var to v1alpha1.Operator
	if err := json.Unmarshal([]byte(st.To.Operator), &to); err != nil || to.Name != name {
		return nil
	}
	r := &rolloutView{Name: u.GetName(), Namespace: strings.TrimPrefix(strings.TrimPrefix(u.GetName(), name), "."), Operator: name,
		Phase: st.Phase, Reason: st.Reason, From: st.From.Hash, To: st.To.Hash, Step: st.Step, NSteps: st.Steps, Moved: st.MovedCount,
		Request: obj.Spec.Request, RequestedBy: obj.Spec.RequestedBy, ResourceVersion: u.GetResourceVersion(), moved: map[string]bool{}}
	r.Pending = st.From.Hash != st.To.Hash && (st.Phase == v1alpha1.RolloutProgressing || st.Phase == v1alpha1.RolloutPaused || st.Phase == v1alpha1.RolloutRolledBack)
	r.CanContinue = st.Phase == v1alpha1.RolloutPaused || st.Phase == v1alpha1.RolloutRolledBack
	r.CanUndo = st.Phase == v1alpha1.RolloutProgressing || st.Phase == v1alpha1.RolloutPaused
	for _, m := range st.Moved {
		r.moved[m] = true
	}
	if r.Moved == 0 {
		r.Moved = len(st.Moved)
	}
	if !r.Pending {
		return r
	}
	if d, err := definition.Compile(definition.FromCluster(&to)); err == nil && d.Rollout != nil {
		r.Settle = definition.ShortDuration(d.Rollout.Settle)
		for i, step := range d.Rollout.Steps {
			sv := rolloutStepView{N: i + 1, Text: step.String(), Taken: i < st.Step}
			if i == st.Step {
				switch st.Phase {
				case v1alpha1.RolloutProgressing:
					sv.Next, sv.When = true, "once the moved objects have been healthy for "+r.Settle
				case v1alpha1.RolloutPaused:
					sv.Next, sv.When = true, "once a person continues the rollout"
				}
			}
			r.Steps = append(r.Steps, sv)
		}
	}
	diff, err := definitionDiff(st.From.Operator, st.To.Operator)
	if err != nil {
		r.DiffErr = err.Error()
	}
	r.Diff = diff
	return r
}

// requestRollout writes a person's Continue or Undo to an operator's
// Rollout (POST /operators/OP/rollouts/NAME/continue|undo), as opkit
// rollout continue|undo does: spec.request and spec.requestedBy, by a
// merge patch that carries the resourceVersion the page showed, so that
// a rollout changed since is refused (409) rather than asked something
// its person did not see. It needs patch on the Rollout, and the phase
// to accept the request; the engine answers it within a second or two.
func (s *Server) requestRollout(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, ok := s.formUser(w, r)
	if !ok {
		return
	}
	opName, name, action := r.PathValue("operator"), r.PathValue("rollout"), r.PathValue("action")
	req := map[string]string{"continue": v1alpha1.RolloutContinue, "undo": v1alpha1.RolloutUndo}[action]
	if req == "" {
		s.fail(w, r, notFound("no rollout action %q: continue or undo", action))
		return
	}
	res := resource{Group: v1alpha1.Group, Resource: v1alpha1.RolloutResource, Name: name}
	if ok, err := s.auth.allowed(ctx, u, res, "patch", ""); err != nil || !ok {
		if err == nil {
			err = forbidden("%s may not patch %s", u.Name, res)
		}
		s.fail(w, r, err)
		return
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := s.catalog.client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			err = notFound("no Rollout %s", name)
		}
		s.fail(w, r, err)
		return
	}
	view := readRolloutView(opName, obj)
	switch {
	case view == nil:
		s.fail(w, r, notFound("the Rollout %s is not operator %s's", name, opName))
		return
	case obj.GetResourceVersion() != r.PostFormValue("resourceVersion"):
		s.fail(w, r, &httpError{http.StatusConflict, "the rollout changed since the page showed it: look at it again"})
		return
	case req == v1alpha1.RolloutContinue && !view.CanContinue, req == v1alpha1.RolloutUndo && !view.CanUndo:
		s.fail(w, r, &httpError{http.StatusConflict, fmt.Sprintf("the rollout is %s: nothing to %s (%s)", view.Phase, action, view.Reason)})
		return
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion()},
		"spec":     map[string]any{"request": req, "requestedBy": s.decidedBy(u)},
	})
	if err == nil {
		err = s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	}
	if apierrors.IsConflict(err) {
		err = &httpError{http.StatusConflict, "the rollout changed since the page showed it: look at it again"}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, operatorURL(opName), http.StatusSeeOther)
}

// definitionDiff lists the changes from one definition to another (each
// an Operator as JSON) over their spec, spec.rollout aside: how a change
// rolls out is not part of what rolls out. Maps are compared key by key;
// lists of items with an id or a name (children, handlers, sources) item
// by item, as spec.children[content]; other lists item by item when
// their lengths agree, else as a whole; numbers by value.
func definitionDiff(from, to string) ([]archive.Change, error) {
	spec := func(which, data string) (map[string]any, error) {
		var op map[string]any
		if err := json.Unmarshal([]byte(data), &op); err != nil {
			return nil, fmt.Errorf("the %s definition is not an Operator: %w", which, err)
		}
		s, _ := op["spec"].(map[string]any)
		delete(s, "rollout")
		return s, nil
	}
	before, err := spec("previous", from)
	if err != nil {
		return nil, err
	}
	after, err := spec("new", to)
	if err != nil {
		return nil, err
	}
	var out []archive.Change
	compare.Walk("spec", before, after, compare.ListsByKey, func(op, path string, was, now any) {
		out = append(out, archive.Change{Op: op, Path: path, Old: was, New: now})
	})
	return out, nil
}
