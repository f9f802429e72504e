package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// Who may read what, under Kubernetes auth: an operator's objects and
// their runs are readable by whoever may get them, and an operator-wide
// schedule's runs by whoever may get the Operator.
//
//   - Owned: get on its custom resource, in the object's namespace (every
//     namespace for its lists).
//   - Watched: get on the object's kind, in its namespace (for the lists,
//     in each namespace the operator watches, or every namespace when it
//     watches them all).
//   - Calendar: get on its Operator object (operators.opkit.dev, by name).
//
// An operator the console does not know (no CRD, no Operator object, not
// run by the engine beside it) cannot be checked, and is refused.

// readResource is what reading op's objects of kind gvk needs get on;
// gvk defaults to the operator's kind.
func (s *Server) readResource(op *operator, gvk schema.GroupVersionKind) (resource, error) {
	switch op.Subject {
	case calendarSubject:
		return resource{Group: v1alpha1.Group, Resource: operatorsResource, Name: op.Name}, nil
	case watchedSubject:
		if gvk.Empty() || gvk == op.GVK {
			if op.Plural == "" {
				return resource{}, fmt.Errorf("access to operator %s's objects cannot be checked: %s", op.Name, op.Unserved)
			}
			return resource{Group: op.GVK.Group, Resource: op.Plural}, nil
		}
		plural, err := s.catalog.resourceOf(gvk)
		if err != nil {
			return resource{}, err
		}
		return resource{Group: gvk.Group, Resource: plural}, nil
	}
	return resource{Group: op.GVK.Group, Resource: op.Plural}, nil
}

// listNamespaces are the namespaces reading all of op's objects needs
// get in; "" is every namespace.
func (op *operator) listNamespaces() []string {
	if op.Watches() && op.Namespaced && len(op.Watch.Namespaces) > 0 {
		return op.Watch.Namespaces
	}
	return []string{""}
}

// may checks that the user may use verb on op's objects of kind gvk in
// each of namespaces.
func (s *Server) may(ctx context.Context, u *user, op *operator, gvk schema.GroupVersionKind, verb string, namespaces ...string) error {
	if !s.opts.Auth.Kubernetes {
		return nil
	}
	res, err := s.readResource(op, gvk)
	if err != nil {
		return forbidden("%v", err)
	}
	for _, ns := range namespaces {
		ok, err := s.auth.allowed(ctx, u, res, verb, ns)
		if err != nil {
			return err
		}
		if !ok {
			where := " in " + namespaceLabel(ns)
			if res.Name != "" {
				where = ""
			}
			return forbidden("%s may not %s %s%s", u.Name, verb, res, where)
		}
	}
	return nil
}

// operatorNamed returns an operator; one the console does not know is
// nil, and is readable only without Kubernetes auth, as its access cannot
// be checked.
func (s *Server) operatorNamed(ctx context.Context, name string) (*operator, error) {
	op, err := s.catalog.Operator(ctx, name)
	if err != nil && s.opts.Auth.Kubernetes {
		return nil, err
	}
	if op == nil && s.opts.Auth.Kubernetes {
		return nil, forbidden("operator %s is not in the cluster: its access cannot be checked", name)
	}
	return op, nil
}

// readable returns the operators the user may read: all their objects.
func (s *Server) readable(ctx context.Context, u *user) ([]*operator, error) {
	ops, err := s.catalog.Operators(ctx)
	if err != nil {
		return nil, err
	}
	var out []*operator
	for _, op := range ops {
		err := s.may(ctx, u, op, op.GVK, "get", op.listNamespaces()...)
		var he *httpError
		switch {
		case errors.As(err, &he) && he.status == http.StatusForbidden:
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, op)
	}
	return out, nil
}

// mayReadRun checks that the user may read a run: get on its object; a
// run on a webhook delivery, as its delivery is (mayReadDeliveries).
func (s *Server) mayReadRun(ctx context.Context, u *user, run *archive.Run) (*operator, error) {
	if eventRun(run) {
		return s.mayReadDeliveries(ctx, u, run.Operator)
	}
	op, err := s.operatorNamed(ctx, run.Operator)
	if err != nil || op == nil {
		return op, err
	}
	return op, s.may(ctx, u, op, runGVK(run), "get", run.Namespace)
}

// mayList reports whether the user, who may read op's lists, may read a
// run of op listed with others. A watch operator's runs may be of objects
// beyond what it watches now (an earlier spec's namespaces or kind): each
// is checked; the other operators' lists are read with access to all.
func (s *Server) mayList(ctx context.Context, u *user, op *operator, run *archive.Run) (bool, error) {
	if !s.opts.Auth.Kubernetes || op == nil || !op.Watches() || eventRun(run) {
		return true, nil
	}
	err := s.may(ctx, u, op, runGVK(run), "get", run.Namespace)
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusForbidden {
		return false, nil
	}
	return err == nil, err
}

func runGVK(run *archive.Run) schema.GroupVersionKind {
	gv, _ := schema.ParseGroupVersion(run.APIVersion)
	return gv.WithKind(run.Kind)
}

func namespaceLabel(ns string) string {
	if ns == "" {
		return "every namespace"
	}
	return "namespace " + ns
}

// Why an operator that owns no resource offers no actions, in one line.
const (
	noActionsWatched  = "opkit never writes to an object it watches but does not own, and Retry and Pause are annotations on the object, so neither is offered: a handler that gave up runs again at the object's next change."
	noActionsCalendar = "An operator-wide schedule has no object to retry or pause: a failed slot is retried by its handler's policy, and the next slot runs in any case."
	noActionsEvent    = "A run on a webhook delivery is for the operator itself and has no object to retry or pause: a failed run is retried by its handler's policy."
)

// noActions is why op offers no actions, or "" when it does.
func noActions(op *operator) string {
	switch {
	case op == nil:
		return ""
	case op.Watches():
		return noActionsWatched
	case op.Calendar():
		return noActionsCalendar
	}
	return ""
}

// runObjectURL links a run's object: the timeline of a custom resource
// or watched object (with its kind, when it is not the operator's), the
// operator's page for an operator-wide schedule's run, or the delivery
// page for a run on a webhook delivery.
func runObjectURL(op *operator, run *archive.Run) string {
	switch {
	case eventRun(run) && archive.ValidID(run.UID):
		return deliveryURL(run.UID)
	case eventRun(run):
		return operatorURL(run.Operator)
	case calendarRun(run):
		return operatorURL(run.Operator) + "#schedule-" + run.Handler
	}
	u := objectURL(run.Operator, run.Namespace, run.Name)
	if run.Kind != "" && (op == nil || !op.Owns() && runGVK(run) != op.GVK) {
		u += "?" + kindQuery(runGVK(run))
	}
	return u
}

// kindQuery names a kind in a timeline's URL.
func kindQuery(gvk schema.GroupVersionKind) string {
	return url.Values{"apiVersion": {gvk.GroupVersion().String()}, "kind": {gvk.Kind}}.Encode()
}

// kindOf reads the kind a timeline's URL names, if any.
func kindOf(q url.Values) (schema.GroupVersionKind, bool) {
	gv, err := schema.ParseGroupVersion(q.Get("apiVersion"))
	if err != nil || q.Get("apiVersion") == "" || q.Get("kind") == "" {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(q.Get("kind")), true
}
