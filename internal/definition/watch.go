package definition

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// subject is what an operator's handlers run for.
type subject int

const (
	ownedSubject    subject = iota // each custom resource of spec.resource
	watchedSubject                 // each object spec.watch selects
	calendarSubject                // the operator itself: operator-wide schedules
)

// Watch is a compiled spec.watch: the objects of one kind an operator
// reacts to without owning them.
type Watch struct {
	GVK schema.GroupVersionKind
	// Namespaces are those watched; empty for all.
	Namespaces []string
	// Selector selects by labels; labels.Everything() when none is set.
	// The API server applies it (the engine's watch is a filtered one).
	Selector labels.Selector
	// Filter is the CEL condition over self an object must meet, or nil.
	Filter *Expression
	// Finalizer: opkit holds its finalizer on each watched object, for the
	// delete handlers to run before the object is gone.
	Finalizer bool

	// schema types self for Filter at run time, as it was at compile
	// time, for a definition compiled with schemas; nil otherwise.
	schema common.Schema
}

// Matches reports whether a watched object meets the filter.
func (w *Watch) Matches(self map[string]any) (bool, error) {
	if w.Filter == nil {
		return true, nil
	}
	return w.Filter.evalBool(map[string]any{"self": typed(self, w.schema), "children": map[string]any{}, "related": map[string]any{}})
}

// Owns reports whether the operator owns a custom resource (spec.resource).
func (d *Definition) Owns() bool { return !d.GVK.Empty() }

// What says in a few words what the operator reacts to, for logs:
// Printer.demo.example.com, the watch of Deployment.apps, operator-wide
// schedules, event sources (webhooks, CloudEvents, NATS, Kafka, a GitHub
// poll).
func (d *Definition) What() string {
	switch {
	case d.Owns():
		return d.GVK.GroupKind().String()
	case d.Watch != nil:
		return "the watch of " + d.Watch.GVK.GroupKind().String()
	case len(d.Sources) > 0 && !slices.ContainsFunc(d.Handlers, func(h *Handler) bool { return h.Fires(v1alpha1.OnSchedule) }):
		return "event sources"
	case len(d.Sources) > 0:
		return "operator-wide schedules and event sources"
	}
	return "operator-wide schedules"
}

// Calendar reports whether the operator has neither a custom resource
// nor a watch: its handlers are operator-wide schedules.
func (d *Definition) Calendar() bool { return d.GVK.Empty() && d.Watch == nil }

// compileUnowned compiles an Operator without spec.resource: a watch, or
// a calendar of operator-wide schedules.
func compileUnowned(l *errorList, src *Source, d *Definition, schemas SchemaResolver) *Definition {
	op := d.Operator
	subj := calendarSubject
	var selfSchema *spec.Schema
	if w := op.Spec.Watch; w != nil {
		subj = watchedSubject
		d.Watch = compileWatch(l, w)
		if d.Watch != nil && schemas != nil {
			s, err := schemas.ResolveSchema(d.Watch.GVK)
			if err != nil {
				l.add("spec.watch.kind", "kind %s %s is not served by the cluster: %v", w.APIVersion, w.Kind, err)
				return nil
			}
			selfSchema = s
		}
	}
	what := "an operator with neither resource nor watch runs operator-wide schedules only"
	if subj == watchedSubject {
		what = "a watch operator owns nothing"
	}
	if len(op.Spec.Related) > 0 {
		l.add("spec.related", "%s: related objects are read for a custom resource; declare spec.resource", what)
	}
	if len(op.Spec.Children) > 0 {
		l.add("spec.children", "%s: children need a custom resource to own them; declare spec.resource", what)
	}
	if len(op.Spec.Status) > 0 {
		l.add("spec.status", "%s: status fields are written to a custom resource; declare spec.resource", what)
	}
	if len(op.Spec.States) > 0 {
		l.add("spec.states", "%s: states are the life cycle of a custom resource; declare spec.resource", what)
	}
	if op.Spec.Rollout != nil {
		l.add("spec.rollout", "%s: a rollout moves custom resources from one definition to the next in steps; declare spec.resource", what)
	}
	if subj == calendarSubject && len(op.Spec.Handlers) == 0 {
		l.add("spec", "an Operator declares spec.resource (a custom resource it owns), spec.watch (objects it reacts to) or, with neither, handlers on schedule (operator-wide schedules) or on event (deliveries of spec.sources)")
		return nil
	}
	envs, err := watchedEnvs(selfSchema)
	if err != nil {
		l.add("spec.watch.kind", "%v", err)
		return nil
	}
	if w := op.Spec.Watch; w != nil && w.Filter != "" && d.Watch != nil {
		d.Watch.Filter = compileCondition(l, envs.object, "spec.watch.filter", w.Filter)
		if f := d.Watch.Filter; f != nil && (len(f.Children) > 0 || len(f.Related) > 0) {
			l.add(f.Field, "${%s}: a watch's filter reads self alone (the watched object); a watch has no children or related objects", f.Source)
			d.Watch.Filter = nil
		}
	}
	if d.Watch != nil && selfSchema != nil {
		d.Watch.schema = newValueSchema(selfSchema)
	}
	dir := ""
	if src.File != "" {
		if abs, err := filepath.Abs(src.File); err == nil {
			dir = filepath.Dir(abs)
		}
	}
	noNamespace := ""
	if subj == calendarSubject {
		noNamespace = "an operator-wide schedule has no object, and so no namespace"
	}
	d.Handlers = compileHandlers(l, envs, op.Spec.Handlers, dir, noNamespace, nil, subj)
	compileSources(l, d)
	if d.Watch != nil && d.Watch.schema != nil {
		// when and every templates read self as the filter does.
		for _, h := range d.Handlers {
			h.schemas = map[string]common.Schema{selfKey: d.Watch.schema}
		}
	}
	if subj == calendarSubject {
		for i, h := range op.Spec.Handlers {
			if len(h.On) > 0 && !slices.Equal(h.On, []string{v1alpha1.OnSchedule}) && !slices.Contains(h.On, v1alpha1.OnEvent) {
				l.add(fmt.Sprintf("spec.handlers[%d].on", i), "an operator with neither resource nor watch has no object to react to: its handlers run on schedule (on: [schedule]) or on event (on: [event]) only; declare spec.watch or spec.resource for the other triggers")
			}
		}
	}
	if d.Watch != nil && op.Spec.Watch.Finalizer {
		d.Watch.Finalizer = true
		if !slices.ContainsFunc(d.Handlers, func(h *Handler) bool { return h.Fires(v1alpha1.OnDelete) }) {
			l.add("spec.watch.finalizer", "the finalizer holds a deletion for the delete handlers, and no handler runs on delete: add one, or remove the finalizer")
		}
	}
	checkReferences(l, d, map[string]bool{}, map[string]bool{})
	return d
}

// compileWatch checks spec.watch.
func compileWatch(l *errorList, w *v1alpha1.Watch) *Watch {
	out := &Watch{Selector: labels.Everything()}
	ok := true
	switch {
	case w.APIVersion == "" || strings.Contains(w.APIVersion, "${"):
		l.add("spec.watch.apiVersion", "required, and it cannot be an expression (e.g. apps/v1)")
		ok = false
	case w.Kind == "" || strings.Contains(w.Kind, "${"):
		l.add("spec.watch.kind", "required, and it cannot be an expression (e.g. Deployment)")
		ok = false
	case w.APIVersion == "v1" && w.Kind == "Secret":
		l.add("spec.watch.kind", "watching Secrets is not supported: opkit would keep their values in its run archive (diffs, the last state of each); watch the objects that use them, or read a Secret in a handler")
		ok = false
	default:
		gv, err := schema.ParseGroupVersion(w.APIVersion)
		if err != nil {
			l.add("spec.watch.apiVersion", "%v", err)
			ok = false
		}
		out.GVK = gv.WithKind(w.Kind)
	}
	var valid bool
	if out.Namespaces, valid = namespaceList(l, "spec.watch.namespaces", w.Namespaces); !valid {
		ok = false
	}
	if w.Selector != nil {
		if !checkSelector(l, "spec.watch.selector", w.Selector) {
			ok = false
		} else if sel, err := metav1.LabelSelectorAsSelector(w.Selector); err != nil {
			l.add("spec.watch.selector", "%v", err)
			ok = false
		} else {
			out.Selector = sel
		}
	}
	if !ok {
		return nil
	}
	return out
}

// checkSelector reports each problem of a label selector at its own
// field (a key, a value, an operator), as LabelSelectorAsSelector would
// report only the first, at the selector. It returns false when there
// is one.
func checkSelector(l *errorList, field string, sel *metav1.LabelSelector) bool {
	ok := true
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		f := field + ".matchLabels." + k
		if msg := validationLabelKey(k); msg != "" {
			l.add(f, "%q is not a label key: %s", k, msg)
			ok = false
			continue
		}
		if msgs := validation.IsValidLabelValue(sel.MatchLabels[k]); len(msgs) > 0 {
			l.add(f, "%q is not a label value: %s", sel.MatchLabels[k], strings.Join(msgs, "; "))
			ok = false
		}
	}
	for i, e := range sel.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		if msg := validationLabelKey(e.Key); msg != "" {
			l.add(f+".key", "%q is not a label key: %s", e.Key, msg)
			ok = false
		}
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			if len(e.Values) == 0 {
				l.add(f+".values", "%s needs values: the label values to match", e.Operator)
				ok = false
			}
		case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
			if len(e.Values) > 0 {
				l.add(f+".values", "%s takes no values: leave values out", e.Operator)
				ok = false
			}
		default:
			l.add(f+".operator", "%q: expected In, NotIn, Exists or DoesNotExist", e.Operator)
			ok = false
			continue
		}
		for j, v := range e.Values {
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				l.add(fmt.Sprintf("%s.values[%d]", f, j), "%q is not a label value: %s", v, strings.Join(msgs, "; "))
				ok = false
			}
		}
	}
	return ok
}
