package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/scenario"
)

// pollEvery is how often an expect step looks again.
const pollEvery = 100 * time.Millisecond

// describeExpect says what an expect step checks.
func describeExpect(e *scenario.Expect) string {
	switch {
	case e.Object != nil:
		o := e.Object
		var checks []string
		if o.Absent {
			checks = append(checks, "absent")
		}
		if o.Matches != nil {
			checks = append(checks, "matches")
		}
		if o.CEL != nil {
			checks = append(checks, "cel "+o.CEL.Source)
		}
		if o.Condition != nil {
			checks = append(checks, fmt.Sprintf("condition %s=%s", o.Condition.Type, o.Condition.Status))
		}
		return o.Ref.String() + " " + strings.Join(checks, ", ")
	case e.Run != nil && e.Run.Transition():
		return "state transition" + runFilter(e.Run)
	case e.Run != nil:
		return "run of " + e.Run.Handler + runFilter(e.Run)
	case e.Event != nil:
		return "event " + e.Event.Reason
	case e.Log != nil:
		return fmt.Sprintf("log of %s contains %q", e.Log.Handler, e.Log.Contains)
	}
	return "?"
}

func runFilter(e *scenario.ExpectRun) string {
	var parts []string
	for _, p := range []struct{ k, v string }{{"object", e.Object}, {"trigger", e.Trigger}, {"from", e.From}, {"to", e.To}, {"outcome", e.Outcome}} {
		if p.v != "" {
			parts = append(parts, p.k+" "+p.v)
		}
	}
	if e.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", e.Attempt))
	}
	if e.Count != nil {
		parts = append(parts, fmt.Sprintf("count %d", *e.Count))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// expect polls a check until it holds or the step's timeout passes; the
// error then is the check's last finding.
func (r *scenarioRun) expect(ctx context.Context, e *scenario.Expect) error {
	given := e.Timeout
	if given == 0 {
		given = r.sc.Timeout
	}
	timeout, within := given, given.String()
	if f := r.opts.TimeoutScale; f > 1 {
		timeout = time.Duration(float64(given) * f)
		within = fmt.Sprintf("%s (×%g: %s)", given, f, timeout.Round(time.Millisecond))
	}
	check, err := r.check(e)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if es, ok := errors.AsType[*errStep](last); ok {
				es.what = "not so within " + within
				return es
			}
			return fmt.Errorf("not so within %s: %w", within, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// check returns the function that checks e once: nil when it holds.
func (r *scenarioRun) check(e *scenario.Expect) (func(context.Context) error, error) {
	switch {
	case e.Object != nil:
		obj, err := r.object(e.Object.Ref)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return r.checkObject(ctx, e.Object, obj.DeepCopy()) }, nil
	case e.Run != nil:
		query := r.runQuery
		if e.Run.Transition() {
			query = r.transitionQuery
		}
		q, err := query(e.Run.Operator, e.Run.Handler, e.Run.Object)
		if err != nil {
			return nil, err
		}
		r.named = append(r.named, q)
		return func(ctx context.Context) error { return r.checkRun(ctx, e.Run, q) }, nil
	case e.Event != nil:
		var involved *unstructured.Unstructured
		if e.Event.Object != nil {
			obj, err := r.object(*e.Event.Object)
			if err != nil {
				return nil, err
			}
			involved = obj
		}
		return func(ctx context.Context) error { return r.checkEvent(ctx, e.Event, involved) }, nil
	case e.Log != nil:
		q, err := r.runQuery(e.Log.Operator, e.Log.Handler, e.Log.Object)
		if err != nil {
			return nil, err
		}
		r.named = append(r.named, q)
		return func(ctx context.Context) error { return r.checkLog(ctx, e.Log, q) }, nil
	}
	return nil, fmt.Errorf("an expect step with nothing to check")
}

func (r *scenarioRun) checkObject(ctx context.Context, e *scenario.ExpectObject, obj *unstructured.Unstructured) error {
	err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if e.Absent {
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		found := "it exists"
		if ts := obj.GetDeletionTimestamp(); ts != nil {
			found = fmt.Sprintf("it is being deleted since %s, held by the finalizers %v", ts.UTC().Format(time.RFC3339), obj.GetFinalizers())
		}
		return &errStep{what: e.Ref.String() + " is gone", expected: "no such object", found: found}
	}
	if apierrors.IsNotFound(err) {
		return &errStep{what: e.Ref.String(), expected: "it exists", found: "no such object"}
	}
	if err != nil {
		return err
	}
	if e.Matches != nil {
		if diffs := match("", e.Matches, obj.Object); len(diffs) > 0 {
			return &errStep{what: e.Ref.String() + " matches", expected: yamlish(e.Matches), found: strings.Join(diffs, "\n")}
		}
	}
	if e.CEL != nil {
		ok, err := e.CEL.Eval(obj.Object)
		if err != nil {
			return &errStep{what: e.Ref.String() + " cel", expected: e.CEL.Source, found: "an error: " + err.Error()}
		}
		if !ok {
			return &errStep{what: e.Ref.String() + " cel", expected: e.CEL.Source, found: "false, on\n" + yamlish(withoutManagedFields(obj.Object))}
		}
	}
	if c := e.Condition; c != nil {
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		var found []string
		for _, raw := range conds {
			m, ok := raw.(map[string]any)
			if !ok {
				continue
			}
			found = append(found, fmt.Sprintf("%v=%v reason %v: %v", m["type"], m["status"], m["reason"], m["message"]))
			if m["type"] == c.Type && m["status"] == c.Status && (c.Reason == "" || m["reason"] == c.Reason) {
				return nil
			}
		}
		want := c.Type + "=" + c.Status
		if c.Reason != "" {
			want += " reason " + c.Reason
		}
		if len(found) == 0 {
			found = []string{"no conditions"}
		}
		return &errStep{what: e.Ref.String() + " condition " + c.Type, expected: want, found: strings.Join(found, "\n")}
	}
	return nil
}

// runQuery selects the runs of a handler (of an object, when named) in
// the scenario's namespace, or of the operator itself.
func (r *scenarioRun) runQuery(operator, handlerName, object string) (archive.Query, error) {
	d, err := r.operator(operator)
	if err != nil {
		return archive.Query{}, err
	}
	if _, err := handler(d, handlerName); err != nil {
		return archive.Query{}, err
	}
	return archive.Query{Operator: d.Operator.Name, Handler: handlerName, Name: object}, nil
}

// transitionQuery selects the records of the state transitions of an
// operator's objects (of object, when named) in the scenario's namespace.
// It takes a handler's name, always empty, to be called as runQuery is.
func (r *scenarioRun) transitionQuery(operator, _, object string) (archive.Query, error) {
	d, err := r.operator(operator)
	if err != nil {
		return archive.Query{}, err
	}
	if d.States == nil {
		return archive.Query{}, fmt.Errorf("operator %s has no states: its objects make no state transitions", d.Operator.Name)
	}
	return archive.Query{Operator: d.Operator.Name, Handler: v1alpha1.TransitionHandler, Name: object}, nil
}

// runs lists the runs q selects, newest first.
func (r *scenarioRun) runs(ctx context.Context, q archive.Query) ([]archive.Run, error) {
	return archive.ListAll(ctx, r.store, q)
}

func (r *scenarioRun) checkRun(ctx context.Context, e *scenario.ExpectRun, q archive.Query) error {
	runs, err := r.runs(ctx, q)
	if err != nil {
		return err
	}
	n := 0
	for _, run := range runs {
		from, to, _ := run.Transition()
		if (e.Trigger == "" || run.Trigger == e.Trigger) && (e.Outcome == "" || string(run.Outcome) == e.Outcome) && (e.Attempt == 0 || run.Attempt == e.Attempt) &&
			(e.From == "" || from == e.From) && (e.To == "" || to == e.To) {
			n++
		}
	}
	what, one, many := "a run of "+e.Handler, "a run", "runs"
	if e.Transition() {
		what, one, many = "a state transition", "a transition", "transitions"
	}
	switch {
	case e.Count == nil && n > 0, e.Count != nil && n == *e.Count:
		return nil
	case e.Count == nil:
		return &errStep{what: what, expected: one + runFilter(e), found: runLines(runs)}
	}
	return &errStep{what: what, expected: fmt.Sprintf("%d %s", *e.Count, many) + runFilter(e), found: fmt.Sprintf("%d:\n%s", n, runLines(runs))}
}

func (r *scenarioRun) checkLog(ctx context.Context, e *scenario.ExpectLog, q archive.Query) error {
	runs, err := r.runs(ctx, q)
	if err != nil {
		return err
	}
	for _, run := range runs {
		l, err := r.store.Logs(ctx, run.ID, 0)
		if err != nil {
			continue
		}
		if strings.Contains(string(l.Data), e.Contains) {
			return nil
		}
	}
	found := "no run"
	if len(runs) > 0 {
		found = fmt.Sprintf("%d runs, none of whose logs contains it (their logs follow)", len(runs))
	}
	return &errStep{what: "a log of " + e.Handler, expected: fmt.Sprintf("a line containing %q", e.Contains), found: found}
}

func (r *scenarioRun) checkEvent(ctx context.Context, e *scenario.ExpectEvent, involved *unstructured.Unstructured) error {
	var list corev1.EventList
	if err := r.client.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return err
	}
	var found []string
	for _, ev := range list.Items {
		if involved != nil && (ev.InvolvedObject.Kind != involved.GetKind() || ev.InvolvedObject.Name != involved.GetName()) {
			continue
		}
		found = append(found, fmt.Sprintf("%s %s %s %s: %s", ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message))
		if ev.Reason == e.Reason && (e.Type == "" || ev.Type == e.Type) && strings.Contains(ev.Message, e.Message) {
			return nil
		}
	}
	want := e.Reason
	if e.Type != "" {
		want = e.Type + " " + want
	}
	if e.Message != "" {
		want += fmt.Sprintf(" with a message containing %q", e.Message)
	}
	if involved != nil {
		want += " on " + involved.GetKind() + " " + involved.GetName()
	}
	if len(found) == 0 {
		found = []string{"no Events"}
	}
	sort.Strings(found)
	return &errStep{what: "an Event " + e.Reason, expected: want, found: strings.Join(found, "\n")}
}

// runLines lists runs one a line.
func runLines(runs []archive.Run) string {
	if len(runs) == 0 {
		return "no run"
	}
	lines := make([]string, 0, len(runs))
	for _, run := range slices.Backward(runs) { // oldest first
		lines = append(lines, runLine(run))
	}
	return strings.Join(lines, "\n")
}

func runLine(run archive.Run) string {
	handler := run.Handler
	if from, to, ok := run.Transition(); ok {
		if from == "" {
			from = "-"
		}
		handler = "state " + from + " -> " + to
	}
	s := fmt.Sprintf("%s %s %s %s: %s, attempt %d", handler, run.Kind, run.Name, run.Trigger, run.Outcome, run.Attempt)
	if run.Error != "" {
		s += ": " + run.Error
	}
	return s
}

// match compares a partial expectation with what was found: every field
// of want must be in got and equal (maps partially, lists item by item
// and of the same length, numbers by value). It returns each difference,
// named by its path.
func match(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, found %s", orRoot(path), show(got))}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var diffs []string
		for _, k := range keys {
			p := join(path, k)
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s: want %s, found no such field", p, show(w[k])))
				continue
			}
			diffs = append(diffs, match(p, w[k], gv)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want a list, found %s", orRoot(path), show(got))}
		}
		var diffs []string
		if len(w) != len(g) {
			diffs = append(diffs, fmt.Sprintf("%s: want %d items, found %d", orRoot(path), len(w), len(g)))
		}
		for i := range min(len(w), len(g)) {
			diffs = append(diffs, match(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	}
	if equalScalar(want, got) {
		return nil
	}
	return []string{fmt.Sprintf("%s: want %s, found %s", orRoot(path), show(want), show(got))}
}

func equalScalar(want, got any) bool {
	if wn, ok := compare.Number(want); ok {
		gn, ok := compare.Number(got)
		return ok && (wn == gn || math.Abs(wn-gn) < 1e-9*math.Max(math.Abs(wn), 1))
	}
	return want == got
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "the object"
	}
	return path
}

// show prints a value as JSON, short.
func show(v any) string {
	if v == nil {
		return "null"
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(data) > 200 {
		return string(data[:200]) + "…"
	}
	return string(data)
}

// yamlish prints an object as indented JSON, for a report.
func yamlish(v any) string {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

func withoutManagedFields(obj map[string]any) map[string]any {
	u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	u.SetManagedFields(nil)
	return u.Object
}
