package runsapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// object is one object of a kind as the handler serves it: its API
// object, and what lists, watches and tables read of it.
type object struct {
	id        string
	namespace string
	// changed is when it last changed: its resourceVersion.
	changed time.Time
	// began is when it started (a run) or came in (a delivery): what
	// the since field selects by.
	began time.Time
	// done is set when no later change comes (a run finished, a delivery
	// handled or refused).
	done   bool
	labels labels.Set
	fields fields.Set
	meta   *metav1.ObjectMeta
	api    any
	cells  []any
}

// kind is a resource served from the archive: runs or deliveries.
type kind interface {
	resource() string
	kind() string
	columns() []metav1.TableColumnDefinition
	parse(r *http.Request, namespace string) (*filter, error)
	// get returns one object, or an error wrapping archive.ErrNotFound.
	get(ctx context.Context, id string) (*object, error)
	// list returns a page of the objects sel selects, newest first, and
	// the cursor of the next page ("" on the last).
	list(ctx context.Context, sel *filter, limit int, cursor string) ([]*object, string, error)
	// unfinished returns the objects that may still change (running
	// runs, pending deliveries) and since those that came at or after t,
	// of sel's namespace and of its values but the outcome: a watch
	// matches them against the whole selection as they change.
	unfinished(ctx context.Context, sel *filter) ([]*object, error)
	since(ctx context.Context, sel *filter, t time.Time) ([]*object, error)
}

// runs is the runs resource.
type runs struct {
	store     archive.Reader
	namespace string // the engine's
}

// runLabels and runFields map the labels and fields of a run's
// selectors to the query value they set: a label and the field it
// mirrors set the same.
var (
	runLabels = map[string]string{
		runsv1alpha1.LabelOperator: "operator", runsv1alpha1.LabelHandler: "handler", runsv1alpha1.LabelTrigger: "trigger",
		runsv1alpha1.LabelObject: "object", runsv1alpha1.LabelOutcome: "outcome",
	}
	runFields = map[string]string{
		"metadata.name": "name", "status.outcome": "outcome", "spec.handler": "handler", "spec.operator": "operator", "spec.trigger": "trigger",
		"spec.object.kind": "kind", runFailedField: "failed",
	}
)

// runSinceField selects the runs that started at or after a time (RFC
// 3339), the archive's Query.Since. A time, not a duration as opkit
// events --since takes: a field selector is sent again, as it is, with
// each page (continue) and with the watch that follows a list, and one
// relative to the server's clock would select another set each time.
const runSinceField = "status.startedSince"

// runFailedField=true selects the runs that failed, Failed or GaveUp (the
// archive's Query.Failed, opkit runs --failed): status.outcome takes one
// value.
const runFailedField = "status.failed"

func (runs) resource() string { return runsResource }
func (runs) kind() string     { return runsv1alpha1.RunKind }

func (runs) parse(r *http.Request, namespace string) (*filter, error) {
	sel, err := parseSelection(r, namespace, runsResource, runLabels, runFields, runSinceField)
	if err == nil {
		if v := sel.value("failed"); v != "" && v != "true" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector: %s=%s: %s selects the failed runs with true only", runFailedField, v, runFailedField))
		}
	}
	return sel, err
}

// query is the archive's query of what sel selects but its namespace.
func (runs) query(sel *filter) archive.Query {
	return archive.Query{
		Operator: sel.value("operator"), Handler: sel.value("handler"), Trigger: sel.value("trigger"),
		Name: sel.value("object"), Outcome: archive.Outcome(sel.value("outcome")), Since: sel.since,
		Kind: sel.value("kind"), Failed: sel.value("failed") == "true",
	}
}

// queries are the archive's queries of sel: one, or, in the engine's
// namespace, the runs of that namespace and those of no namespace,
// which are served there.
func (k runs) queries(sel *filter) []archive.Query {
	q := k.query(sel)
	switch sel.namespace {
	case "":
		return []archive.Query{q}
	case k.namespace:
		none := q
		none.NoNamespace = true
		q.Namespace = sel.namespace
		return []archive.Query{q, none}
	default:
		q.Namespace = sel.namespace
		return []archive.Query{q}
	}
}

func (k runs) get(ctx context.Context, id string) (*object, error) {
	return getByID(ctx, id, k.store.Get, k.object)
}

// getByID is a kind's get: the record read of the archive by id, as its
// object; what is not an id is not found.
func getByID[T any](ctx context.Context, id string, read func(context.Context, string) (*T, error), object func(*T) *object) (*object, error) {
	if !archive.ValidID(id) {
		return nil, archive.ErrNotFound
	}
	rec, err := read(ctx, id)
	if err != nil {
		return nil, err
	}
	return object(rec), nil
}

func (k runs) list(ctx context.Context, sel *filter, limit int, cursor string) ([]*object, string, error) {
	if name := sel.value("name"); name != "" {
		return named(ctx, k, sel, name)
	}
	var pages [][]archive.Run
	more := false
	for _, q := range k.queries(sel) {
		q.Limit, q.Cursor = limit, cursor
		page, err := k.store.List(ctx, q)
		if err != nil {
			return nil, "", err
		}
		pages = append(pages, page.Runs)
		more = more || page.Next != ""
	}
	merged, next := mergeNewestFirst(pages, min(limit, 1000), more, func(r archive.Run) string { return r.ID })
	objs := make([]*object, len(merged))
	for i := range merged {
		objs[i] = k.object(&merged[i])
	}
	return objs, next, nil
}

// named is the list of the one object of k metadata.name names, if it
// matches the rest of the selection.
func named(ctx context.Context, k kind, sel *filter, name string) ([]*object, string, error) {
	obj, err := k.get(ctx, name)
	if isNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	if !sel.matches(obj) {
		return nil, "", nil
	}
	return []*object{obj}, "", nil
}

func (k runs) unfinished(ctx context.Context, sel *filter) ([]*object, error) {
	return k.all(ctx, sel, func(q *archive.Query) { q.Outcome = archive.Running })
}

func (k runs) since(ctx context.Context, sel *filter, t time.Time) ([]*object, error) {
	return k.all(ctx, sel, func(q *archive.Query) { q.Outcome, q.Since = "", later(t, sel.since) })
}

// all returns every run of sel's queries, changed by edit, oldest first.
func (k runs) all(ctx context.Context, sel *filter, edit func(*archive.Query)) ([]*object, error) {
	var objs []*object
	for _, q := range k.queries(sel) {
		edit(&q)
		found, err := archive.ListAll(ctx, k.store, q)
		if err != nil {
			return nil, err
		}
		for i := range found {
			objs = append(objs, k.object(&found[i]))
		}
	}
	slices.SortFunc(objs, func(a, b *object) int { return strings.Compare(a.id, b.id) })
	return objs, nil
}

// object is the API object of a run.
func (k runs) object(r *archive.Run) *object {
	ns := r.Namespace
	if ns == "" {
		ns = k.namespace
	}
	changed := r.StartedAt
	if !r.FinishedAt.IsZero() {
		changed = r.FinishedAt
	}
	run := &runsv1alpha1.Run{
		TypeMeta: metav1.TypeMeta{Kind: runsv1alpha1.RunKind, APIVersion: runsv1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: r.ID, Namespace: ns, CreationTimestamp: metav1.NewTime(r.StartedAt), ResourceVersion: resourceVersion(changed),
			Labels: labelsOf(map[string]string{
				runsv1alpha1.LabelOperator: r.Operator, runsv1alpha1.LabelHandler: r.Handler, runsv1alpha1.LabelTrigger: r.Trigger,
				runsv1alpha1.LabelObject: r.Name, runsv1alpha1.LabelOutcome: string(r.Outcome),
			}),
		},
		Spec: runsv1alpha1.RunSpec{
			Operator: r.Operator, Handler: r.Handler, Action: r.Action, Trigger: r.Trigger,
			Object:     runsv1alpha1.ObjectReference{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID},
			Generation: r.Generation, Key: r.Key, Attempt: r.Attempt, Actor: r.Actor, RerunOf: r.RerunOf, Reason: r.Reason,
			Trace: r.Trace,
		},
		Status: runsv1alpha1.RunStatus{
			Outcome: string(r.Outcome), StartedAt: metav1.NewTime(r.StartedAt), FinishedAt: timeOrNil(r.FinishedAt),
			Error: r.Error, NextRetryAt: timeOrNil(r.NextRetryAt), Runner: r.Runner, LogBytes: r.LogBytes, LogTruncated: r.LogTruncated,
		},
	}
	return &object{
		id: r.ID, namespace: ns, changed: changed, began: r.StartedAt, done: r.Outcome != archive.Running,
		// Every label, valid or not, for matching: the archive selected by
		// them.
		labels: labels.Set{
			runsv1alpha1.LabelOperator: r.Operator, runsv1alpha1.LabelHandler: r.Handler, runsv1alpha1.LabelTrigger: r.Trigger,
			runsv1alpha1.LabelObject: r.Name, runsv1alpha1.LabelOutcome: string(r.Outcome),
		},
		fields: fields.Set{
			"metadata.name": r.ID, "metadata.namespace": ns, "status.outcome": string(r.Outcome),
			"spec.handler": r.Handler, "spec.operator": r.Operator, "spec.trigger": r.Trigger,
			"spec.object.kind": r.Kind, runFailedField: strconv.FormatBool(r.Outcome == archive.Failed || r.Outcome == archive.GaveUp),
		},
		meta:  &run.ObjectMeta,
		api:   run,
		cells: runCells(r),
	}
}

// labelsOf keeps the labels whose value is a valid label value.
func labelsOf(m map[string]string) map[string]string {
	for k, v := range m {
		if len(validation.IsValidLabelValue(v)) > 0 || v == "" {
			delete(m, k)
		}
	}
	return m
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}

// runColumns are opkit runs' columns, the run's name first as kubectl
// wants it; the runner's is shown with -o wide.
func (runs) columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The run's id."},
		{Name: "Operator", Type: "string"},
		{Name: "Kind", Type: "string", Description: "The kind of the run's object; Operator for an operator-wide schedule."},
		{Name: "Object", Type: "string", Description: "The run's object, namespace/name."},
		{Name: "Handler", Type: "string"},
		{Name: "Trigger", Type: "string"},
		{Name: "Attempt", Type: "integer"},
		{Name: "Outcome", Type: "string"},
		{Name: "Runner", Type: "string", Priority: 1, Description: "The runner Pod that ran it."},
		{Name: "Started", Type: "string", Description: "How long ago it started."},
		{Name: "Duration", Type: "string"},
		{Name: "Error", Type: "string"},
	}
}

// runCells are a run's cells, as opkit runs prints them; Started is
// filled in when the table is written (it is an age).
func runCells(r *archive.Run) []any {
	handler, duration, errText := r.Row()
	return []any{r.ID, r.Operator, orText(r.Kind, "-"), r.Object(), handler, r.Trigger, int64(r.Attempt), string(r.Outcome),
		orText(r.Runner, "-"), startedAt(r.StartedAt), duration, errText}
}

// startedAt is a cell that shows an age when the table is written.
type startedAt time.Time

// mergeNewestFirst merges pages of items newest first (by id,
// descending) into one of at most limit, and returns the cursor of the
// next: the last id returned when more remain in the pages or after
// them (more).
func mergeNewestFirst[T any](pages [][]T, limit int, more bool, id func(T) string) ([]T, string) {
	if limit <= 0 {
		limit = 50
	}
	var out []T
	at := make([]int, len(pages))
	for len(out) < limit {
		best := -1
		for p := range pages {
			if at[p] < len(pages[p]) && (best < 0 || id(pages[p][at[p]]) > id(pages[best][at[best]])) {
				best = p
			}
		}
		if best < 0 {
			break
		}
		out = append(out, pages[best][at[best]])
		at[best]++
	}
	for p := range pages {
		more = more || at[p] < len(pages[p])
	}
	if !more || len(out) == 0 {
		return out, ""
	}
	return out, id(out[len(out)-1])
}
