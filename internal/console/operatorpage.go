package console

import (
	"context"
	"net/http"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/internal/archive"
)

// objectsPerPage is the operator page's table size.
const objectsPerPage = 100

// operatorPage is an operator's page: its objects by state, a page at a
// time, each with its last run, its rollouts, its schedules (an
// operator-wide one) or recent runs (a watch), and its sources.
func (s *Server) operatorPage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	name := r.PathValue("operator")
	op, err := s.operatorNamed(ctx, name)
	if err != nil {
		return "", nil, err
	}
	if op == nil {
		if op, err = s.archiveOperator(ctx, name); err != nil {
			return "", nil, err
		}
	}
	if op == nil {
		return "", nil, notFound("no operator %s: no CRD labelled opkit.dev/operator=%s, no Operator %s in the cluster or run by the engine beside the console, and nothing of it in the run archive", name, name, name)
	}
	if err := s.may(ctx, u, op, op.GVK, "get", op.listNamespaces()...); err != nil {
		return "", nil, err
	}
	q := r.URL.Query()
	v := &view{Title: name, Crumbs: []crumb{{"Operators", "/"}}}
	v.Live = withQuery(operatorURL(name), q.Encode())
	if op.Invalid != "" {
		v.Notices = append(v.Notices, "Its Operator does not compile, so what is shown comes from its spec alone: "+op.Invalid)
	}
	if op.Unserved != "" {
		v.Notices = append(v.Notices, op.Unserved)
	}
	sources, notices := s.operatorSources(ctx, name)
	v.Notices = append(v.Notices, notices...)
	if paused := s.operatorPaused(ctx, name); paused != "" {
		v.Notices = append(v.Notices, paused)
	}
	if op.Calendar() {
		scheds, err := s.schedules(ctx, op)
		if err != nil {
			v.Notices = append(v.Notices, err.Error())
		}
		v.Data = map[string]any{"Op": op, "Schedules": scheds, "NoActions": noActions(op), "OperatorURL": objectURL(name, "", name), "Sources": sources}
		return "operator", v, nil
	}
	filter := state(q.Get("state"))
	pageNo, _ := strconv.Atoi(q.Get("page"))
	pageNo = max(pageNo, 1)
	objs, err := s.catalog.Objects(ctx, op)
	if err != nil {
		v.Notices = append(v.Notices, err.Error())
	}
	n := map[state]int{}
	var rows []objectRow
	for _, o := range objs {
		n[o.State]++
		if filter == "" || o.State == filter {
			rows = append(rows, o)
		}
	}
	var counts []stateCount
	for _, st := range op.States() {
		counts = append(counts, stateCount{st, n[st]})
	}
	pages := max((len(rows)+objectsPerPage-1)/objectsPerPage, 1)
	pageNo = min(pageNo, pages)
	rows = rows[min((pageNo-1)*objectsPerPage, len(rows)):min(pageNo*objectsPerPage, len(rows))]

	// The last run of each object shown, from the operator's recent runs
	// (or, for a watched object, as its handler record says).
	last, recent, err := s.lastRuns(ctx, name)
	if err != nil {
		v.Notices = append(v.Notices, "The run archive cannot be read: "+err.Error())
	}
	// A pending rollout: which definition each object is on.
	var rollouts, pending []*rolloutView
	if op.Owns() {
		rollouts, pending = s.pendingRollouts(ctx, u, name, objs)
	}
	out := objectRows(name, op, rows, pending, last)
	data := map[string]any{"Op": op, "Rows": out, "Counts": counts, "Total": len(objs), "Filter": string(filter),
		"Page": pageNo, "Pages": pages, "Prev": pageLink(q, pageNo-1, pages), "Next": pageLink(q, pageNo+1, pages), "Sources": sources,
		"Rollouts": rollouts, "RolloutColumn": len(pending) > 0}
	if op.Owns() {
		if def, _, _ := s.catalog.definition(ctx, name); def != nil {
			if m := machineOf(def, "", op.GVK.Kind); m != nil {
				data["Machine"] = m
			}
		}
	}
	if op.Watches() {
		runs, err := s.runRows(ctx, u, op, recent)
		if err != nil {
			return "", nil, err
		}
		data["Recent"], data["NoActions"] = runs, noActions(op)
	}
	v.Data = data
	return "operator", v, nil
}

// lastRuns are the last run of each object of operator name, by UID,
// among its 1,000 newest, and its 20 newest runs.
func (s *Server) lastRuns(ctx context.Context, name string) (map[string]archive.Run, []archive.Run, error) {
	last := map[string]archive.Run{}
	page, err := s.opts.Archive.List(ctx, archive.Query{Operator: name, Limit: 1000})
	if err != nil {
		return last, nil, err
	}
	for _, run := range page.Runs {
		if _, ok := last[run.UID]; !ok {
			last[run.UID] = run
		}
	}
	return last, page.Runs[:min(len(page.Runs), 20)], nil
}

// pendingRollouts are the rollouts of operator name that u may see, each
// with the count of objs it covers, and those of them pending.
func (s *Server) pendingRollouts(ctx context.Context, u *user, name string, objs []objectRow) (rollouts, pending []*rolloutView) {
	rollouts = s.operatorRollouts(ctx, u, name)
	for _, ro := range rollouts {
		for _, o := range objs {
			if ro.covers(o.Namespace) {
				ro.Total++
			}
		}
		if ro.Pending {
			pending = append(pending, ro)
		}
	}
	return rollouts, pending
}

// runRows are the rows of runs of op that u may list.
func (s *Server) runRows(ctx context.Context, u *user, op *operator, runs []archive.Run) ([]runRow, error) {
	var rows []runRow
	for _, run := range runs {
		ok, err := s.mayList(ctx, u, op, &run)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		rows = append(rows, runRow{Run: run, Label: run.Object(), URL: runObjectURL(op, &run)})
	}
	return rows, nil
}

// operatorObject is a row of an operator's page: an object, its page,
// its last run.
type operatorObject struct {
	objectRow
	URL  string
	Last *archive.Run
	// Def is the object's definition against a pending rollout.
	Def *objectDefinition
}

// objectRows are the rows of an operator's page for the objects of rows:
// each with its last run (from last, by UID, else its own), and its
// definition against a pending rollout.
func objectRows(name string, op *operator, rows []objectRow, pending []*rolloutView, last map[string]archive.Run) []operatorObject {
	var out []operatorObject
	for _, o := range rows {
		rw := operatorObject{objectRow: o, URL: objectURL(name, o.Namespace, o.Name), Last: o.LastRun}
		for _, ro := range pending {
			if ro.covers(o.Namespace) {
				rw.Def = ro.definitionOf(o.Namespace, o.Name, o.Definition)
				break
			}
		}
		if run, ok := last[o.UID]; ok {
			rw.Last = &run
		}
		if o.Kind != "" && (o.APIVersion != op.GVK.GroupVersion().String() || o.Kind != op.GVK.Kind) {
			rw.URL += "?" + kindQuery(schema.FromAPIVersionAndKind(o.APIVersion, o.Kind))
		}
		out = append(out, rw)
	}
	return out
}
