package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// child is one entry of status.opkit.children.
type child struct {
	ID, APIVersion, Kind, Namespace, Name string
}

// event is one Event of an object, for the timeline.
type event struct {
	Type, Reason, Message string
	Count                 int32
	At                    time.Time
}

// timeline is an object's page: a custom resource's, a watched object's
// (of the operator's kind, or of the kind its URL names: ?apiVersion=&kind=),
// or a calendar's Operator's.
func (s *Server) timeline(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	cursor := r.URL.Query().Get("cursor")
	if cursor != "" && !archive.ValidID(cursor) {
		return "", nil, badRequest("cursor %q is not one this console links to: follow the timeline's Older runs link", cursor)
	}
	t, err := s.objectTarget(r, u)
	if err != nil {
		return "", nil, err
	}
	opName, ns, name, op, gvk, hasKind := t.opName, t.ns, t.name, t.op, t.gvk, t.hasKind
	// A watched object's handler state is the archive's, not the object's.
	// An operator the console does not know watches the object when the
	// archive has a handler record of it.
	var (
		rec     *archive.HandlerRecord
		decoded *watchRecord
		recErr  error
	)
	if op != nil && op.Watches() || op == nil && hasKind {
		rec, decoded, recErr = s.catalog.record(ctx, opName, gvk, ns, name)
	}
	watched := op != nil && op.Watches() || op == nil && hasKind && rec != nil
	title := objectLabel(ns, name)
	if watched {
		title = gvk.Kind + " " + title
	}
	v := &view{Title: title, Crumbs: []crumb{{"Operators", "/"}, {opName, operatorURL(opName)}}}
	self := objectURL(opName, ns, name)
	kind := ""
	if hasKind {
		kind = kindQuery(gvk)
	}
	v.Live = withQuery(self, kind, cursorQuery(cursor))
	owned := !watched && (op == nil || op.Owns())
	data := map[string]any{"Op": op, "OpName": opName, "Namespace": ns, "Name": name, "Kind": gvk.Kind, "NoActions": noActions(op),
		"Owned": owned, "Watched": watched, "WhyURL": withQuery(self+"/why", kind)}

	obj, notice := s.readObject(ctx, gvk, ns, name)
	if notice != "" {
		v.Notices = append(v.Notices, notice)
	}
	if obj != nil {
		v.Notices = append(v.Notices, s.objectData(ctx, u, op, obj, owned, data)...)
	}
	if watched {
		v.Notices = append(v.Notices, watchedData(data, obj, rec, decoded, recErr)...)
	}
	query := archive.Query{Operator: opName, Namespace: ns, Name: name, Limit: 50, Cursor: cursor}
	if op == nil || !op.Owns() {
		query.Kind = gvk.Kind
	}
	page, err := s.opts.Archive.List(ctx, query)
	if err != nil {
		v.Notices = append(v.Notices, "The run archive cannot be read: "+err.Error())
		page = &archive.Page{}
	}
	data["Runs"] = page.Runs
	data["Accounts"] = s.accounts(ctx, page.Runs)
	data["Redelivered"] = s.redeliveredRuns(ctx, opName, page.Runs)
	if page.Next != "" {
		data["Next"] = withQuery("", kind, cursorQuery(page.Next))
	}
	// The actions concern handlers: offered where there are some (runs,
	// a last run in the status) or where the object is paused; and only
	// on a custom resource, the one object opkit may write to.
	if obj != nil && owned && op != nil {
		_, hasLastRun, _ := unstructured.NestedMap(obj.Object, "status", "opkit", "lastRun")
		data["Actions"] = len(page.Runs) > 0 || hasLastRun || data["Paused"] == true
	}
	if obj == nil && len(page.Runs) == 0 && op == nil {
		return "", nil, notFound("no operator %s, and no runs for %s", opName, objectLabel(ns, name))
	}
	v.Data = data
	return "timeline", v, nil
}

// objectTarget is the object an object page's URL names:
// /operators/{operator}/objects/{namespace}/{name}, of the operator's
// kind or, for a watch operator (or one the console does not know), of
// the kind its query names (?apiVersion=&kind=).
type objectTarget struct {
	opName, ns, name string
	op               *operator // nil: one the console does not know
	gvk              schema.GroupVersionKind
	hasKind          bool // the query named the kind
}

// objectTarget reads the object page's URL, and checks that the user may
// get the object.
func (s *Server) objectTarget(r *http.Request, u *user) (*objectTarget, error) {
	t := &objectTarget{opName: r.PathValue("operator"), ns: r.PathValue("namespace"), name: r.PathValue("name")}
	if t.ns == clusterScoped {
		t.ns = ""
	}
	op, err := s.operatorNamed(r.Context(), t.opName)
	if err != nil {
		return nil, err
	}
	t.op = op
	if op != nil {
		t.gvk = op.GVK
	}
	named, hasKind := kindOf(r.URL.Query())
	if hasKind && (op == nil || op.Watches()) {
		t.gvk, t.hasKind = named, true
	}
	if op != nil {
		if err := s.may(r.Context(), u, op, t.gvk, "get", t.ns); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// readObject reads the object of kind gvk (none: nil) from the cluster;
// nil, with a notice saying why, when it does not exist or cannot be read.
func (s *Server) readObject(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, string) {
	if gvk.Empty() {
		return nil, ""
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("%s %s does not exist (any more): its runs are below.", gvk.Kind, objectLabel(ns, name))
	case err != nil:
		return nil, fmt.Sprintf("%s %s cannot be read from the cluster: %v", gvk.Kind, objectLabel(ns, name), err)
	}
	return obj, ""
}

// objectData puts into data what the timeline shows of obj, as read: its
// state, children and life cycle (an object opkit owns), its conditions,
// YAML and Events. It returns the notices of what could not be read.
func (s *Server) objectData(ctx context.Context, u *user, op *operator, obj *unstructured.Unstructured, owned bool, data map[string]any) []string {
	var notices []string
	events, err := s.events(ctx, obj)
	if err != nil {
		notices = append(notices, "Events cannot be read: "+err.Error())
	}
	if owned {
		st, msg := stateOf(obj)
		data["State"], data["Message"] = st, msg
		_, data["Paused"] = obj.GetAnnotations()[v1alpha1.PauseAnnotation]
		data["Children"] = children(obj)
		if op != nil {
			notices = append(notices, s.lifeCycle(ctx, u, op, obj, events, data)...)
		}
	}
	data["Conditions"] = conditions(obj)
	data["YAML"] = objectYAML(obj)
	data["Events"] = events
	data["Exists"] = true
	return notices
}

// watchedData puts into data what the archive's handler record of a
// watched object says (rec, decoded; recErr when it cannot be read), obj
// as read (nil: gone). It returns the notices of what could not be read.
func watchedData(data map[string]any, obj *unstructured.Unstructured, rec *archive.HandlerRecord, decoded *watchRecord, recErr error) []string {
	switch {
	case recErr != nil:
		return []string{"Its handler record cannot be read: " + recErr.Error()}
	case rec == nil:
		data["State"], data["Message"] = stateUnknown, "no handler record: opkit does not watch it (any more), or has not seen it yet"
	default:
		row := watchedRow(*rec)
		data["State"], data["Message"], data["Recorded"] = row.State, row.Message, rec.UpdatedAt
		if decoded != nil && decoded.State != nil {
			data["Handlers"] = handlerStates(decoded.State)
		}
		if obj == nil && decoded != nil && decoded.Object != nil {
			data["LastSeenYAML"] = objectYAML(&unstructured.Unstructured{Object: decoded.Object})
		}
	}
	return nil
}

func cursorQuery(cursor string) string {
	if cursor == "" {
		return ""
	}
	return "cursor=" + url.QueryEscape(cursor)
}

// withQuery adds the non-empty parts of a query to path.
func withQuery(path string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return path
	}
	return path + "?" + strings.Join(out, "&")
}

func objectLabel(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func objectURL(op, ns, name string) string {
	if ns == "" {
		ns = clusterScoped
	}
	return "/operators/" + url.PathEscape(op) + "/objects/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

func objectYAML(obj *unstructured.Unstructured) string {
	c := obj.DeepCopy()
	c.SetManagedFields(nil)
	data, err := yaml.Marshal(c.Object)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func children(obj *unstructured.Unstructured) []child {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "opkit", "children")
	var out []child
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out = append(out, child{ID: str("id"), APIVersion: str("apiVersion"), Kind: str("kind"), Namespace: str("namespace"), Name: str("name")})
	}
	return out
}

// events returns the object's latest Events, newest first.
func (s *Server) events(ctx context.Context, obj *unstructured.Unstructured) ([]event, error) {
	var list corev1.EventList
	err := s.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{"involvedObject.uid": string(obj.GetUID())})
	if err != nil {
		return nil, err
	}
	var out []event
	for _, e := range list.Items {
		at := e.LastTimestamp.Time
		for _, t := range []time.Time{e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
			if at.IsZero() {
				at = t
			}
		}
		if e.Series != nil && e.Series.LastObservedTime.After(at) {
			at = e.Series.LastObservedTime.Time
		}
		count := max(e.Count, 1)
		if e.Series != nil {
			count = max(e.Series.Count, count)
		}
		out = append(out, event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: count, At: at})
	}
	slices.SortFunc(out, func(a, b event) int { return b.At.Compare(a.At) })
	return out[:min(len(out), 30)], nil
}
