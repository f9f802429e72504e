package console

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sync/singleflight"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// subject is what an operator's handlers run for.
type subject int

const (
	ownedSubject    subject = iota // the custom resources of its CRD
	watchedSubject                 // the objects of any kind its spec.watch selects
	calendarSubject                // itself: operator-wide schedules
)

// operator is what the console knows of one operator: from its CRD, or,
// for one that owns no resource, from its definition (the engine's, or
// the cluster's Operator object).
type operator struct {
	Name    string
	Subject subject
	// GVK is the kind of the objects its runs are for: its custom
	// resource's storage version, the watched kind, or the Operator kind
	// (opkit.dev/v1alpha1) for a calendar.
	GVK schema.GroupVersionKind
	// Plural is GVK's resource; "" for a watched kind the cluster does
	// not serve (Unserved says why).
	Plural     string
	Namespaced bool
	Unserved   string
	// Columns are the printer columns of a custom resource.
	Columns []column
	// Watch is what a watch operator selects.
	Watch *watchSpec
	// Schedules are a calendar's handlers.
	Schedules []*schedule
	// Source is the file the engine read it from; "" for the cluster.
	Source string
	// Invalid is why the cluster's Operator does not compile; what the
	// console shows of it then comes from its spec alone.
	Invalid string
	// FromArchive: the console knows it from the run archive alone (its
	// definition is neither in the cluster nor run beside the console).
	FromArchive bool
}

// Owns, Watches and Calendar say what its handlers run for.
func (o *operator) Owns() bool     { return o.Subject == ownedSubject }
func (o *operator) Watches() bool  { return o.Subject == watchedSubject }
func (o *operator) Calendar() bool { return o.Subject == calendarSubject }

// column is one printer column of the operator's resource.
type column struct {
	Name string
	path *jsonpath.JSONPath
}

// objectRow is what the console keeps of one object: a custom resource,
// or a watched object as its handler record in the archive says. Enough for
// the tables and the counts, not the object.
type objectRow struct {
	Namespace, Name string
	UID             string
	Created         time.Time
	Columns         []string
	State           state
	Message         string
	// Definition is the hash of the definition that last reconciled a
	// custom resource (status.opkit.definition), of an operator with
	// spec.rollout.
	Definition string

	// Of a watched object: its kind, when the engine last recorded its
	// state, whether it was deleted (its delete handlers are not done),
	// and its last run as the record says.
	APIVersion, Kind string
	Updated          time.Time
	Gone             bool
	LastRun          *archive.Run
}

// state is an object's summary, from its conditions.
type state string

// States, most urgent first. A custom resource's come from its
// conditions; a watched object, which has no opkit conditions, is Stalled
// (a handler gave up), Retrying (a handler failed and runs again) or OK.
const (
	stateStalled  state = "Stalled"
	stateDegraded state = "Degraded"
	stateRetrying state = "Retrying"
	statePaused   state = "Paused"
	stateNotReady state = "NotReady"
	stateReady    state = "Ready"
	stateOK       state = "OK"
	stateUnknown  state = "Unknown"
)

var (
	states        = []state{stateReady, stateNotReady, stateDegraded, stateStalled, statePaused, stateUnknown}
	watchedStates = []state{stateOK, stateRetrying, stateStalled}
)

// States are those an operator's objects can be in, in the order shown.
func (o *operator) States() []state {
	if o.Watches() {
		return watchedStates
	}
	return states
}

// catalog reads the operators and their objects from the cluster, keeping
// what it read for ttl so that pages and live updates share one list.
type catalog struct {
	client client.Client
	states archive.Reader
	// defs returns the engine's definitions; nil without an engine.
	defs func() []*definition.Definition
	ttl  time.Duration

	mu        sync.Mutex
	operators []*operator
	opsAt     time.Time
	warning   string                 // why the cluster's Operators could not be read
	compiled  map[string]*operator   // the cluster's unowned Operators, by uid/generation
	objects   map[string]*objectList // by operator name
	// definitions are the cluster's Operators, compiled, by name (see
	// definition).
	definitions map[string]definitionEntry
	lists       singleflight.Group // the reads of objects under way
}

type objectList struct {
	at   time.Time
	rows []objectRow
	err  error
}

// Operators returns, by name, the operators whose CRDs opkit installed,
// and those that own no resource (a watch, or operator-wide schedules)
// that the engine runs or the cluster has as Operator objects. An
// operator's definition wins over a CRD of its name left from an earlier
// spec; the engine's over the cluster's.
func (c *catalog) Operators(ctx context.Context) ([]*operator, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.operators != nil && time.Since(c.opsAt) < c.ttl {
		return c.operators, nil
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.client.List(ctx, &crds, client.HasLabels{definition.OperatorLabel}); err != nil {
		return nil, fmt.Errorf("listing the operators' CRDs: %w", err)
	}
	byName := map[string]*operator{}
	for i := range crds.Items {
		if op := operatorOf(&crds.Items[i]); op != nil {
			byName[op.Name] = op
		}
	}
	unowned, owned := c.unowned(ctx)
	for _, op := range unowned {
		if !owned[op.Name] {
			byName[op.Name] = op
		}
	}
	ops := []*operator{}
	for _, op := range byName {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	c.operators, c.opsAt = ops, time.Now()
	return ops, nil
}

// Warning says why the operators may be incomplete, or "".
func (c *catalog) Warning() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warning
}

// Operator returns one operator, or nil.
func (c *catalog) Operator(ctx context.Context, name string) (*operator, error) {
	ops, err := c.Operators(ctx)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		if op.Name == name {
			return op, nil
		}
	}
	return nil, nil
}

func operatorOf(crd *apiextensionsv1.CustomResourceDefinition) *operator {
	op := &operator{
		Name:       crd.Labels[definition.OperatorLabel],
		Plural:     crd.Spec.Names.Plural,
		Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
	}
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		op.GVK = schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		for _, pc := range v.AdditionalPrinterColumns {
			if pc.JSONPath == ".metadata.creationTimestamp" {
				continue // the console shows the age itself
			}
			p := jsonpath.New(pc.Name).AllowMissingKeys(true)
			if p.Parse("{"+pc.JSONPath+"}") != nil {
				continue
			}
			op.Columns = append(op.Columns, column{Name: pc.Name, path: p})
		}
	}
	if op.GVK.Kind == "" {
		return nil
	}
	return op
}

// Objects returns the operator's objects, sorted by namespace and name:
// its custom resources, or the watched objects it has handler records for;
// none for a calendar.
func (c *catalog) Objects(ctx context.Context, op *operator) ([]objectRow, error) {
	c.mu.Lock()
	l := c.objects[op.Name]
	c.mu.Unlock()
	if l != nil && time.Since(l.at) < c.ttl {
		return l.rows, l.err
	}
	// Viewers that find the list stale together wait for one read of it,
	// which outlives the request that started it: its result is shared.
	v, _, _ := c.lists.Do(op.Name, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		rows, err := c.list(ctx, op)
		l := &objectList{at: time.Now(), rows: rows, err: err}
		c.mu.Lock()
		if c.objects == nil {
			c.objects = map[string]*objectList{}
		}
		c.objects[op.Name] = l
		c.mu.Unlock()
		return l, nil
	})
	l = v.(*objectList)
	return l.rows, l.err
}

// list reads the objects a page of 500 at a time, keeping their rows only.
func (c *catalog) list(ctx context.Context, op *operator) ([]objectRow, error) {
	switch op.Subject {
	case watchedSubject:
		return c.watched(ctx, op)
	case calendarSubject:
		return nil, nil
	}
	var rows []objectRow
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(op.GVK.GroupVersion().WithKind(op.GVK.Kind + "List"))
	opts := &client.ListOptions{Limit: 500}
	for {
		if err := c.client.List(ctx, list, opts); err != nil {
			return nil, fmt.Errorf("listing %s: %w", op.Plural, err)
		}
		for i := range list.Items {
			rows = append(rows, rowOf(op, &list.Items[i]))
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			break
		}
	}
	sortRows(rows)
	return rows, nil
}

// sortRows sorts by namespace and name.
func sortRows(rows []objectRow) {
	slices.SortFunc(rows, func(a, b objectRow) int {
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func rowOf(op *operator, obj *unstructured.Unstructured) objectRow {
	row := objectRow{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()), Created: obj.GetCreationTimestamp().Time}
	for _, col := range op.Columns {
		row.Columns = append(row.Columns, columnValue(col, obj))
	}
	row.State, row.Message = stateOf(obj)
	row.Definition, _, _ = unstructured.NestedString(obj.Object, "status", "opkit", "definition")
	return row
}

func columnValue(col column, obj *unstructured.Unstructured) string {
	results, err := col.path.FindResults(obj.Object)
	if err != nil || len(results) == 0 {
		return ""
	}
	var parts []string
	for _, r := range results[0] {
		if r.IsValid() && r.CanInterface() {
			parts = append(parts, fmt.Sprint(r.Interface()))
		}
	}
	return strings.Join(parts, ",")
}

// conditions reads an object's status.conditions.
func conditions(obj *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// stateOf summarises an object's conditions: Stalled, then Degraded, then
// Paused, then Ready or not; Unknown when the engine has not reported yet.
func stateOf(obj *unstructured.Unstructured) (state, string) {
	conds := conditions(obj)
	if c := meta.FindStatusCondition(conds, "Stalled"); c != nil && c.Status == metav1.ConditionTrue {
		return stateStalled, c.Message
	}
	if c := meta.FindStatusCondition(conds, "Degraded"); c != nil && c.Status == metav1.ConditionTrue {
		return stateDegraded, c.Message
	}
	if c := meta.FindStatusCondition(conds, "Paused"); c != nil && c.Status == metav1.ConditionTrue {
		return statePaused, c.Message
	}
	c := meta.FindStatusCondition(conds, "Ready")
	switch {
	case c == nil:
		return stateUnknown, "no Ready condition yet"
	case c.Status == metav1.ConditionTrue:
		return stateReady, c.Message
	default:
		return stateNotReady, c.Message
	}
}
