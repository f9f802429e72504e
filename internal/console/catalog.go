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

	"github.com/opkit-dev/opkit/internal/definition"
)

// operator is what the console knows of one operator, from its CRD.
type operator struct {
	Name       string
	GVK        schema.GroupVersionKind
	Plural     string
	Namespaced bool
	Columns    []column
}

// column is one printer column of the operator's resource.
type column struct {
	Name string
	path *jsonpath.JSONPath
}

// objectRow is what the console keeps of one custom resource: enough for
// the tables and the counts, not the object.
type objectRow struct {
	Namespace, Name string
	UID             string
	Created         time.Time
	Columns         []string
	State           state
	Message         string
}

// state is an object's summary, from its conditions.
type state string

// States, most urgent first.
const (
	stateStalled  state = "Stalled"
	stateDegraded state = "Degraded"
	statePaused   state = "Paused"
	stateNotReady state = "NotReady"
	stateReady    state = "Ready"
	stateUnknown  state = "Unknown"
)

var states = []state{stateReady, stateNotReady, stateDegraded, stateStalled, statePaused, stateUnknown}

// catalog reads the operators and their objects from the cluster, keeping
// what it read for ttl so that pages and live updates share one list.
type catalog struct {
	client client.Client
	ttl    time.Duration

	mu        sync.Mutex
	operators []*operator
	opsAt     time.Time
	objects   map[string]*objectList // by operator name
	lists     singleflight.Group     // the reads of objects under way
}

type objectList struct {
	at   time.Time
	rows []objectRow
	err  error
}

// Operators returns the operators whose CRDs opkit installed, by name.
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
	ops := []*operator{}
	for i := range crds.Items {
		if op := operatorOf(&crds.Items[i]); op != nil {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	c.operators, c.opsAt = ops, time.Now()
	return ops, nil
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

// Objects returns the operator's objects, sorted by namespace and name.
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
	slices.SortFunc(rows, func(a, b objectRow) int {
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Name, b.Name)
	})
	return rows, nil
}

func rowOf(op *operator, obj *unstructured.Unstructured) objectRow {
	row := objectRow{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()), Created: obj.GetCreationTimestamp().Time}
	for _, col := range op.Columns {
		row.Columns = append(row.Columns, columnValue(col, obj))
	}
	row.State, row.Message = stateOf(obj)
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
