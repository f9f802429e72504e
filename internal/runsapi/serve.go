package runsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// kindOf is the kind a request reads.
func (h *Handler) kindOf(resource string) kind {
	if resource == deliveriesResource {
		return deliveries{store: h.o.Archive, namespace: h.o.Namespace}
	}
	return runs{store: h.o.Archive, namespace: h.o.Namespace}
}

// matches reports whether obj is in sel's namespace and matches its
// selectors.
func (s *filter) matches(obj *object) bool {
	return !s.none && (s.namespace == "" || s.namespace == obj.namespace) && s.labels.Matches(obj.labels) && s.fields.Matches(obj.fields) &&
		(s.since.IsZero() || obj.began.UnixMilli() >= s.since.UnixMilli())
}

// resourceVersion is the resourceVersion of a change at t: its Unix time
// in nanoseconds.
func resourceVersion(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// parseResourceVersion reads a resourceVersion; "" and "0" are zero.
func parseResourceVersion(rv string) (time.Time, error) {
	if rv == "" || rv == "0" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not one this server returned (a number)", rv))
	}
	return time.Unix(0, n), nil
}

func isNotFound(err error) bool { return errors.Is(err, archive.ErrNotFound) }

// getRun answers a get of one run.
func (h *Handler) getRun(w http.ResponseWriter, r *http.Request, req request) {
	h.getObject(w, r, req, h.kindOf(runsResource))
}

// getDelivery answers a get of one delivery.
func (h *Handler) getDelivery(w http.ResponseWriter, r *http.Request, req request) {
	h.getObject(w, r, req, h.kindOf(deliveriesResource))
}

// getObject answers a get: the object, in its namespace only.
func (h *Handler) getObject(w http.ResponseWriter, r *http.Request, req request, k kind) {
	obj, err := k.get(r.Context(), req.name)
	if err == nil && obj.namespace != req.namespace {
		err = archive.ErrNotFound
	}
	switch {
	case isNotFound(err):
		writeStatus(w, apierrors.NewNotFound(groupResource(k.resource()), req.name))
		return
	case err != nil:
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("reading the archive: %w", err)))
		return
	}
	if t, ok := wantsTable(r); ok {
		writeJSON(w, http.StatusOK, table(k, []*object{obj}, t, metav1.ListMeta{ResourceVersion: obj.meta.ResourceVersion}, true))
		return
	}
	writeJSON(w, http.StatusOK, obj.api)
}

// list answers a list: a page of at most limit (at most 1000; 500 when
// the request sets none, so that a client that pages nothing does not
// read a million runs at once), and the continue token of the next.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, req request) {
	k := h.kindOf(req.resource)
	sel, err := k.parse(r, req.namespace)
	if err != nil {
		writeStatus(w, err)
		return
	}
	limit := 500
	if text := r.URL.Query().Get("limit"); text != "" {
		if limit, err = strconv.Atoi(text); err != nil || limit < 0 {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("limit %q: want a number of objects", text)))
			return
		}
		if limit == 0 {
			limit = 500
		}
	}
	cursor := ""
	if token := r.URL.Query().Get("continue"); token != "" {
		if cursor, err = readContinue(token, k.resource(), sel); err != nil {
			writeStatus(w, err)
			return
		}
	}
	// The list's resourceVersion is the time it was read, from which a
	// watch takes over.
	rv := resourceVersion(time.Now())
	var objs []*object
	next := ""
	if !sel.none {
		if objs, next, err = k.list(r.Context(), sel, min(limit, 1000), cursor); err != nil {
			writeStatus(w, apierrors.NewInternalError(fmt.Errorf("reading the archive: %w", err)))
			return
		}
	}
	meta := metav1.ListMeta{ResourceVersion: rv, Continue: continueToken(k.resource(), sel, next)}
	if t, ok := wantsTable(r); ok {
		writeJSON(w, http.StatusOK, table(k, objs, t, meta, true))
		return
	}
	items := make([]json.RawMessage, len(objs))
	for i, o := range objs {
		data, err := json.Marshal(o.api)
		if err != nil {
			writeStatus(w, apierrors.NewInternalError(err))
			return
		}
		items[i] = data
	}
	writeJSON(w, http.StatusOK, struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}{metav1.TypeMeta{Kind: k.kind() + "List", APIVersion: runsv1alpha1.SchemeGroupVersion.String()}, meta, items})
}

// tableOptions are what a client asked of a Table.
type tableOptions struct {
	// include is includeObject: None, Metadata (the default) or Object.
	include metav1.IncludeObjectPolicy
}

// wantsTable reports whether the request asks for a meta.k8s.io/v1
// Table, as kubectl does: Accept application/json;as=Table;v=v1;g=meta.k8s.io.
func wantsTable(r *http.Request) (tableOptions, bool) {
	for accept := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		params := map[string]string{}
		parts := strings.Split(accept, ";")
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			params[k] = v
		}
		if strings.TrimSpace(parts[0]) == "application/json" && params["as"] == "Table" && params["g"] == "meta.k8s.io" && params["v"] == "v1" {
			o := tableOptions{include: metav1.IncludeObjectPolicy(r.URL.Query().Get("includeObject"))}
			if o.include == "" {
				o.include = metav1.IncludeMetadata
			}
			return o, true
		}
	}
	return tableOptions{}, false
}

// table is objs as a Table, with the column definitions when headers is
// set.
func table(k kind, objs []*object, o tableOptions, meta metav1.ListMeta, headers bool) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ListMeta: meta, Rows: []metav1.TableRow{}}
	if headers {
		t.ColumnDefinitions = k.columns()
	}
	now := time.Now()
	for _, obj := range objs {
		cells := make([]any, len(obj.cells))
		for i, c := range obj.cells {
			if at, ok := c.(startedAt); ok {
				c = duration.HumanDuration(now.Sub(time.Time(at))) + " ago"
			}
			cells[i] = c
		}
		row := metav1.TableRow{Cells: cells}
		switch o.include {
		case metav1.IncludeObject:
			row.Object = runtime.RawExtension{Object: obj.api.(runtime.Object)}
		case metav1.IncludeMetadata:
			row.Object = runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
				ObjectMeta: *obj.meta,
			}}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}
