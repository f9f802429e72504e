package console

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An operator that owns no custom resource has no CRD to find it by: the
// console learns it from its definition, the engine's (Options.Definitions,
// which covers Operators run from files) or the cluster's Operator object.
// Its objects are what the archive's handler records say, as the engine
// writes nothing to them.

// operatorGVK is the kind of an Operator, the object of a calendar's runs.
var operatorGVK = v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind)

// operatorsResource is the resource of operatorGVK.
const operatorsResource = "operators"

// watchSpec is what a watch operator selects, for people.
type watchSpec struct {
	// Namespaces watched; empty for every namespace.
	Namespaces []string
	// Selector is the label selector ("" for none), Filter the CEL
	// condition ("" for none).
	Selector, Filter string
}

// schedule is one handler of a calendar.
type schedule struct {
	Handler string
	// Every or Cron, as declared; TimeZone and CatchUp defaulted.
	Every, Cron, TimeZone, CatchUp string
	// Last is the last slot handled (run, or skipped by the policy), from
	// the archive; zero for none yet.
	Last time.Time
	// Next is the next slot after Last or now, whichever is later; zero
	// when it cannot be computed (an Operator that does not compile).
	Next time.Time
	// Runs are its latest runs, newest first.
	Runs []archive.Run

	handler *definition.Handler // nil for an Operator that does not compile
}

// unowned returns the operators that own no resource, the engine's first,
// and the names of those the engine or the cluster says own one.
func (c *catalog) unowned(ctx context.Context) ([]*operator, map[string]bool) {
	var ops []*operator
	decided := map[string]bool{} // named by the engine
	owned := map[string]bool{}
	if c.defs != nil {
		for _, d := range c.defs() {
			decided[d.Operator.Name] = true
			if d.Owns() {
				owned[d.Operator.Name] = true
				continue
			}
			ops = append(ops, c.fromDefinition(d))
		}
	}
	var list v1alpha1.OperatorList
	err := c.client.List(ctx, &list)
	switch {
	case meta.IsNoMatchError(err):
		c.warning = "" // no Operator CRD: the engine runs Operators from files only
		return ops, owned
	case err != nil:
		c.warning = fmt.Sprintf("The cluster's Operators cannot be read (%v): operators that watch objects or run on schedules only may be missing.", err)
		return ops, owned
	}
	c.warning = ""
	compiled := map[string]*operator{}
	for i := range list.Items {
		o := &list.Items[i]
		if decided[o.Name] {
			continue
		}
		if !o.Spec.Resource.IsZero() {
			owned[o.Name] = true
			continue
		}
		key := fmt.Sprintf("%s/%d", o.UID, o.Generation)
		op := c.compiled[key]
		if op == nil || op.Unserved != "" { // a kind may come to be served
			op = c.fromCluster(o)
		}
		compiled[key] = op
		ops = append(ops, op)
	}
	c.compiled = compiled
	return ops, owned
}

// fromCluster compiles an Operator of the cluster; one that does not
// compile is shown from its spec, marked Invalid.
func (c *catalog) fromCluster(o *v1alpha1.Operator) *operator {
	d, err := definition.Compile(definition.FromCluster(o.DeepCopy()))
	if err == nil {
		return c.fromDefinition(d)
	}
	op := &operator{Name: o.Name, Invalid: err.Error()}
	if w := o.Spec.Watch; w != nil {
		op.Subject = watchedSubject
		gv, _ := schema.ParseGroupVersion(w.APIVersion)
		op.GVK = gv.WithKind(w.Kind)
		op.Watch = &watchSpec{Namespaces: w.Namespaces, Filter: w.Filter}
		if w.Selector != nil {
			if sel, err := metav1.LabelSelectorAsSelector(w.Selector); err == nil {
				op.Watch.Selector = sel.String()
			}
		}
		c.mapKind(op)
		return op
	}
	op.Subject, op.GVK, op.Plural = calendarSubject, operatorGVK, operatorsResource
	for _, h := range o.Spec.Handlers {
		if h.Schedule != nil {
			op.Schedules = append(op.Schedules, scheduleOf(h, nil))
		}
	}
	return op
}

// fromDefinition is an unowned operator as its definition says.
func (c *catalog) fromDefinition(d *definition.Definition) *operator {
	op := &operator{Name: d.Operator.Name, Source: d.Source}
	if w := d.Watch; w != nil {
		op.Subject, op.GVK = watchedSubject, w.GVK
		op.Watch = &watchSpec{Namespaces: w.Namespaces}
		if w.Selector != nil {
			op.Watch.Selector = w.Selector.String()
		}
		if spec := d.Operator.Spec.Watch; spec != nil {
			op.Watch.Filter = spec.Filter
		}
		c.mapKind(op)
		return op
	}
	op.Subject, op.GVK, op.Plural = calendarSubject, operatorGVK, operatorsResource
	for _, h := range d.Handlers {
		i := slices.IndexFunc(d.Operator.Spec.Handlers, func(s v1alpha1.Handler) bool { return s.Name == h.Name })
		if i >= 0 && d.Operator.Spec.Handlers[i].Schedule != nil {
			op.Schedules = append(op.Schedules, scheduleOf(d.Operator.Spec.Handlers[i], h))
		}
	}
	return op
}

// scheduleOf describes a calendar's handler: as declared, with the
// defaults of the compiled handler h (nil when it did not compile).
func scheduleOf(spec v1alpha1.Handler, h *definition.Handler) *schedule {
	s := spec.Schedule
	out := &schedule{Handler: spec.Name, Every: s.Every, Cron: s.Cron, TimeZone: s.TimeZone, CatchUp: s.CatchUp, handler: h}
	if out.TimeZone == "" && out.Cron != "" {
		out.TimeZone = "UTC"
	}
	if out.CatchUp == "" {
		out.CatchUp = v1alpha1.CatchUpOnce
	}
	return out
}

// mapKind finds a watched kind's resource and scope.
func (c *catalog) mapKind(op *operator) {
	m, err := c.client.RESTMapper().RESTMapping(op.GVK.GroupKind(), op.GVK.Version)
	if err != nil {
		op.Unserved = fmt.Sprintf("kind %s is not served by the cluster: %v", op.GVK, err)
		return
	}
	op.Plural, op.Namespaced = m.Resource.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace
}

// resourceOf returns the resource of a kind, for access checks.
func (c *catalog) resourceOf(gvk schema.GroupVersionKind) (string, error) {
	m, err := c.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return "", fmt.Errorf("kind %s is not served by the cluster, so access to it cannot be checked: %w", gvk, err)
	}
	return m.Resource.Resource, nil
}

// watchRecord is the engine's handler record of a watched object.
type watchRecord struct {
	State  *cause.State   `json:"state"`
	Object map[string]any `json:"object,omitempty"`
}

// calendarRecord is the engine's handler record of an operator-wide
// schedule (key schedule/<handler>).
type calendarRecord struct {
	Slot time.Time `json:"slot"`
}

// scheduleKeyPrefix starts the keys of calendars' handler records.
const scheduleKeyPrefix = "schedule/"

// watched returns the rows of a watch operator's objects, one for each
// handler record.
func (c *catalog) watched(ctx context.Context, op *operator) ([]objectRow, error) {
	records, err := c.states.HandlerRecords(ctx, op.Name)
	if err != nil {
		return nil, fmt.Errorf("reading the watched objects' state from the archive: %w", err)
	}
	rows := []objectRow{}
	for _, r := range records {
		if r.Kind == "" || strings.HasPrefix(r.Key, scheduleKeyPrefix) {
			continue
		}
		rows = append(rows, watchedRow(r))
	}
	sortRows(rows)
	return rows, nil
}

// watchedRow summarises a handler record: Stalled when a handler gave up,
// Retrying when one failed and runs again, OK otherwise.
func watchedRow(r archive.HandlerRecord) objectRow {
	row := objectRow{Namespace: r.Namespace, Name: r.Name, UID: r.Key, APIVersion: r.APIVersion, Kind: r.Kind, Updated: r.UpdatedAt, State: stateOK}
	var rec watchRecord
	if err := json.Unmarshal(r.Data, &rec); err != nil {
		row.State, row.Message = stateUnknown, "its handler record does not decode: "+err.Error()
		return row
	}
	if rec.Object != nil {
		obj := &unstructured.Unstructured{Object: rec.Object}
		row.Created = obj.GetCreationTimestamp().Time
		row.Gone = obj.GetDeletionTimestamp() != nil
	}
	if rec.State == nil {
		return row
	}
	if lr := rec.State.LastRun; lr != nil {
		row.LastRun = &archive.Run{ID: lr.ID, Handler: lr.Handler, Trigger: lr.Trigger, Outcome: archive.Outcome(lr.Outcome), Attempt: lr.Attempt}
	}
	for _, h := range handlerStates(rec.State) {
		switch {
		case h.Stalled:
			row.State, row.Message = stateStalled, fmt.Sprintf("handler %s gave up after %d attempts: %s", h.Name, h.Attempt, h.LastError)
			return row
		case h.Attempt > 0 && row.State == stateOK:
			row.State, row.Message = stateRetrying, fmt.Sprintf("handler %s failed (attempt %d): %s", h.Name, h.Attempt, h.LastError)
		}
	}
	return row
}

// handlerState is one handler's record, for the timeline.
type handlerState struct {
	Name string
	cause.HandlerState
	NextRetry time.Time
}

// handlerStates lists a state's handler records by name.
func handlerStates(st *cause.State) []handlerState {
	var out []handlerState
	for name, hs := range st.Handlers {
		if hs == nil {
			continue
		}
		h := handlerState{Name: name, HandlerState: *hs}
		h.NextRetry, _ = time.Parse(time.RFC3339, hs.NextRetryAt)
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b handlerState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// record returns the latest handler record of a watched object, decoded,
// or nil.
func (c *catalog) record(ctx context.Context, opName string, gvk schema.GroupVersionKind, ns, name string) (*archive.HandlerRecord, *watchRecord, error) {
	records, err := c.states.HandlerRecords(ctx, opName)
	if err != nil {
		return nil, nil, err
	}
	var found *archive.HandlerRecord
	for i, r := range records {
		if r.Namespace == ns && r.Name == name && r.Kind == gvk.Kind && (found == nil || r.UpdatedAt.After(found.UpdatedAt)) {
			found = &records[i]
		}
	}
	if found == nil {
		return nil, nil, nil
	}
	rec := &watchRecord{}
	if err := json.Unmarshal(found.Data, rec); err != nil {
		return found, nil, fmt.Errorf("its handler record does not decode: %w", err)
	}
	return found, rec, nil
}

// schedules returns a calendar's schedules with their last and next
// slots and latest runs.
func (s *Server) schedules(ctx context.Context, op *operator) ([]*schedule, error) {
	records, err := s.opts.Archive.HandlerRecords(ctx, op.Name)
	if err != nil {
		return nil, fmt.Errorf("reading the schedules' last slots from the archive: %w", err)
	}
	last := map[string]time.Time{}
	for _, r := range records {
		var rec calendarRecord
		if h, ok := strings.CutPrefix(r.Key, scheduleKeyPrefix); ok && json.Unmarshal(r.Data, &rec) == nil {
			last[h] = rec.Slot
		}
	}
	now := time.Now()
	var out []*schedule
	for _, sc := range op.Schedules {
		sc := *sc
		sc.Last = last[sc.Handler]
		if sc.handler != nil {
			from := now
			if sc.Last.After(now) {
				from = sc.Last
			}
			sc.Next, _ = sc.handler.NextSlot(from)
		}
		page, err := s.opts.Archive.List(ctx, archive.Query{Operator: op.Name, Handler: sc.Handler, Kind: v1alpha1.Kind, Limit: 10})
		if err != nil {
			return nil, fmt.Errorf("the run archive cannot be read: %w", err)
		}
		sc.Runs = page.Runs
		out = append(out, &sc)
	}
	return out, nil
}

// operatorRun reports whether a run is for the operator itself: its
// object is the Operator.
func operatorRun(r *archive.Run) bool {
	return r.Kind == v1alpha1.Kind && r.APIVersion == v1alpha1.SchemeGroupVersion.String() && r.Name == r.Operator && r.Namespace == ""
}

// calendarRun reports whether a run is an operator-wide schedule's.
func calendarRun(r *archive.Run) bool {
	return operatorRun(r) && r.Trigger != v1alpha1.OnEvent
}

// eventRun reports whether a run is a handler's on a webhook delivery: a
// run for the operator itself, whose UID is the delivery's archive id.
func eventRun(r *archive.Run) bool {
	return operatorRun(r) && r.Trigger == v1alpha1.OnEvent
}

// admissionRun reports whether a run is an admission call (a handler on
// validate or mutate): the API server's request, answered once, never
// retried.
func admissionRun(r *archive.Run) bool {
	return r.Trigger == v1alpha1.OnValidate || r.Trigger == v1alpha1.OnMutate
}

// noActionsAdmission says why an admission call has no Retry.
const noActionsAdmission = "An admission call answers the API server's request once; it is not retried. Its client (kubectl) sends the request again."

// archiveOperator is what the run archive says of an operator the console
// does not otherwise know, or nil: a watch operator, from its objects'
// handler records; a calendar, from its schedules' records or runs, or one
// that runs on events only, from its deliveries. Such an operator is
// shown only without Kubernetes auth (see operatorNamed).
func (s *Server) archiveOperator(ctx context.Context, name string) (*operator, error) {
	records, err := s.opts.Archive.HandlerRecords(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("the run archive cannot be read: %w", err)
	}
	op := &operator{Name: name, FromArchive: true}
	known := false
	handlers := map[string]bool{}
	for _, r := range records {
		if h, ok := strings.CutPrefix(r.Key, scheduleKeyPrefix); ok {
			handlers[h] = true
		} else if r.Kind != "" && !known {
			known = true
			op.Subject, op.GVK, op.Watch = watchedSubject, schema.FromAPIVersionAndKind(r.APIVersion, r.Kind), &watchSpec{}
		}
	}
	if !known {
		page, err := s.opts.Archive.List(ctx, archive.Query{Operator: name, Kind: v1alpha1.Kind, Limit: 100})
		if err != nil {
			return nil, fmt.Errorf("the run archive cannot be read: %w", err)
		}
		for _, run := range page.Runs {
			if calendarRun(&run) {
				handlers[run.Handler] = true
			}
		}
		if len(handlers) == 0 {
			// An operator whose handlers run on events only: known by
			// its deliveries.
			page, err := s.opts.Archive.ListDeliveries(ctx, archive.DeliveryQuery{Operator: name, Limit: 1})
			if err != nil {
				return nil, fmt.Errorf("the run archive cannot be read: %w", err)
			}
			if len(page.Deliveries) == 0 {
				return nil, nil
			}
		}
		op.Subject, op.GVK, op.Plural = calendarSubject, operatorGVK, operatorsResource
		for _, h := range slices.Sorted(maps.Keys(handlers)) {
			op.Schedules = append(op.Schedules, &schedule{Handler: h})
		}
		return op, nil
	}
	s.catalog.mapKind(op)
	return op, nil
}
