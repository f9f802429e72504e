package runsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// Options configures a Handler.
type Options struct {
	// Archive is what the API serves. Required.
	Archive archive.Reader
	// Namespace is where the runs of objects without a namespace
	// (cluster-scoped objects, operator-wide schedules) and every delivery
	// are served: the engine's namespace. Required.
	Namespace string
	// Authenticator says who sent each request. Required: a handler
	// that served anyone would serve the archive to anyone who reaches
	// its port.
	Authenticator Authenticator
	// Authorizer says whether that user may do what the request asks.
	// Required.
	Authorizer Authorizer
	// PollInterval is how often a watch reads the archive for new and
	// finished runs, and a followed log for what was appended. Defaults
	// to 1s.
	PollInterval time.Duration
	// BookmarkInterval is how often a watch that allows bookmarks gets
	// one, so that a client resumes from a recent resourceVersion.
	// Defaults to 30s.
	BookmarkInterval time.Duration
	// ResumeWindow is how old a resourceVersion a watch may resume from;
	// an older one is answered 410 Expired, and a client lists again.
	// Defaults to 5m.
	ResumeWindow time.Duration
}

// Handler serves the archive as runs.opkit.dev/v1alpha1. It is an
// http.Handler, safe for concurrent use.
type Handler struct {
	o Options
}

var _ http.Handler = &Handler{}

// New returns a Handler, or an error naming the option missing.
func New(o Options) (*Handler, error) {
	switch {
	case o.Archive == nil:
		return nil, errors.New("runsapi: Options.Archive is required")
	case o.Authenticator == nil:
		return nil, errors.New("runsapi: Options.Authenticator is required")
	case o.Authorizer == nil:
		return nil, errors.New("runsapi: Options.Authorizer is required")
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("runsapi: Options.Namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.BookmarkInterval <= 0 {
		o.BookmarkInterval = 30 * time.Second
	}
	if o.ResumeWindow <= 0 {
		o.ResumeWindow = 5 * time.Minute
	}
	return &Handler{o: o}, nil
}

// Resource names.
const (
	runsResource       = "runs"
	deliveriesResource = "deliveries"
	logSubresource     = "log"
)

// request is a parsed resource request.
type request struct {
	namespace   string // "" for every namespace
	resource    string
	name        string
	subresource string
}

// ServeHTTP answers one request: authenticates it, parses its path,
// authorizes it and serves it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, ok, err := h.o.Authenticator.Authenticate(r)
	switch {
	case err != nil:
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("authenticating the request: %w", err)))
		return
	case !ok:
		writeStatus(w, apierrors.NewUnauthorized("the request names no user this server trusts"))
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	req, discovery, err := parsePath(path)
	if err != nil {
		writeStatus(w, err)
		return
	}
	verb := "get"
	switch {
	case discovery:
	case req.name == "" && queryBool(r, "watch"):
		verb = "watch"
	case req.name == "":
		verb = "list"
	}
	attrs := Attributes{User: user, Verb: verb}
	if discovery {
		attrs.Path = path
	} else {
		attrs.Namespace, attrs.Resource, attrs.Subresource, attrs.Name = req.namespace, req.resource, req.subresource, req.name
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Before authorization: nothing here is writable by anyone.
		writeStatus(w, apierrors.NewMethodNotSupported(groupResource(req.resource), strings.ToLower(r.Method)))
		return
	}
	allowed, reason, err := h.o.Authorizer.Authorize(r.Context(), attrs)
	switch {
	case err != nil:
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("authorizing the request: %w", err)))
		return
	case !allowed:
		writeStatus(w, forbidden(attrs, reason))
		return
	}
	if discovery {
		h.serveDiscovery(w, path)
		return
	}
	switch {
	case req.subresource == logSubresource:
		h.serveLog(w, r, req)
	case req.resource == runsResource && req.name != "":
		h.getRun(w, r, req)
	case req.resource == deliveriesResource && req.name != "":
		h.getDelivery(w, r, req)
	case verb == "watch":
		h.watch(w, r, req)
	default:
		h.list(w, r, req)
	}
}

// parsePath parses a path of the API: discovery (/apis,
// /apis/runs.opkit.dev, /apis/runs.opkit.dev/v1alpha1), or a resource's.
func parsePath(path string) (request, bool, error) {
	switch path {
	case "/apis", "/apis/" + runsv1alpha1.Group, "/apis/" + runsv1alpha1.SchemeGroupVersion.String():
		return request{}, true, nil
	}
	rest, ok := strings.CutPrefix(path, "/apis/"+runsv1alpha1.SchemeGroupVersion.String()+"/")
	if !ok {
		return request{}, false, apierrors.NewNotFound(groupResource(""), path)
	}
	parts := strings.Split(rest, "/")
	var req request
	if parts[0] == "namespaces" {
		if len(parts) < 3 || parts[1] == "" {
			return req, false, apierrors.NewNotFound(groupResource(""), path)
		}
		req.namespace, parts = parts[1], parts[2:]
	}
	req.resource = parts[0]
	if req.resource != runsResource && req.resource != deliveriesResource {
		return req, false, apierrors.NewNotFound(groupResource(req.resource), path)
	}
	if slices.Contains(parts[1:], "") {
		// A name or subresource left empty ("runs/", "runs//log") names
		// nothing: not the list it would otherwise read as.
		return req, false, apierrors.NewNotFound(groupResource(req.resource), path)
	}
	switch len(parts) {
	case 1:
	case 2, 3:
		if req.namespace == "" {
			// As for any namespaced resource: an object is read in its
			// namespace (a list in every namespace finds it by
			// --field-selector metadata.name=ID).
			return req, false, apierrors.NewBadRequest(fmt.Sprintf("%s %s: a %s is read in its namespace, /apis/%s/namespaces/NAMESPACE/%s/%s; in every namespace, list with fieldSelector=metadata.name=%s",
				req.resource, parts[1], req.resource, runsv1alpha1.SchemeGroupVersion, req.resource, parts[1], parts[1]))
		}
		req.name = parts[1]
		if len(parts) == 3 {
			req.subresource = parts[2]
			if req.resource != runsResource || req.subresource != logSubresource {
				return req, false, apierrors.NewNotFound(groupResource(req.resource+"/"+req.subresource), req.name)
			}
		}
	default:
		return req, false, apierrors.NewNotFound(groupResource(""), path)
	}
	return req, false, nil
}

// serveDiscovery answers the discovery documents.
func (h *Handler) serveDiscovery(w http.ResponseWriter, path string) {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: runsv1alpha1.SchemeGroupVersion.String(), Version: runsv1alpha1.Version}
	group := metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             runsv1alpha1.Group,
		Versions:         []metav1.GroupVersionForDiscovery{gv},
		PreferredVersion: gv,
	}
	switch path {
	case "/apis":
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group}})
	case "/apis/" + runsv1alpha1.Group:
		writeJSON(w, http.StatusOK, &group)
	default:
		verbs := metav1.Verbs{"get", "list", "watch"}
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: runsv1alpha1.SchemeGroupVersion.String(),
			APIResources: []metav1.APIResource{
				{Name: runsResource, SingularName: "run", Namespaced: true, Kind: runsv1alpha1.RunKind, Verbs: verbs, Categories: []string{"opkit"}},
				{Name: runsResource + "/" + logSubresource, Namespaced: true, Kind: runsv1alpha1.RunKind, Verbs: metav1.Verbs{"get"}},
				{Name: deliveriesResource, SingularName: "delivery", Namespaced: true, Kind: runsv1alpha1.DeliveryKind, Verbs: verbs, Categories: []string{"opkit"}},
			},
		})
	}
}

// groupResource names a resource of the group, for errors.
func groupResource(resource string) schema.GroupResource {
	return schema.GroupResource{Group: runsv1alpha1.Group, Resource: resource}
}

// forbidden is the 403 of a request refused, with the authorizer's
// reason.
func forbidden(a Attributes, reason string) *apierrors.StatusError {
	what := a.Resource
	if a.Subresource != "" {
		what += "/" + a.Subresource
	}
	if a.Resource == "" {
		err := apierrors.NewForbidden(groupResource(""), "", errors.New(orText(reason, "the authorizer refused it")))
		err.ErrStatus.Message = fmt.Sprintf("user %q cannot %s path %q: %s", a.User.Name, a.Verb, a.Path, orText(reason, "the authorizer refused it"))
		return err
	}
	where := "in every namespace"
	if a.Namespace != "" {
		where = "in the namespace " + a.Namespace
	}
	err := apierrors.NewForbidden(groupResource(what), a.Name, errors.New(orText(reason, "the authorizer refused it")))
	err.ErrStatus.Message = fmt.Sprintf("user %q cannot %s resource %q in API group %q %s: %s", a.User.Name, a.Verb, what, runsv1alpha1.Group, where, orText(reason, "the authorizer refused it"))
	return err
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeStatus answers an error as a metav1.Status, with its code; an
// error that is not an APIStatus is a 500.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	code := int(s.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, &s)
}

// writeJSON answers v as JSON with the code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// queryBool reports whether the query parameter is true (as the API
// server reads it: "true" or "1").
func queryBool(r *http.Request, name string) bool {
	v := r.URL.Query().Get(name)
	return v == "true" || v == "1"
}
