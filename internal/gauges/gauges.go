package gauges

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/run"
)

// gaugedConditions are the conditions opkit_objects counts, in the order
// of objectConditions.isTrue.
var gaugedConditions = [...]string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionStalled, v1alpha1.ConditionPaused}

// stalledIndex is ConditionStalled's in gaugedConditions.
var stalledIndex = slices.Index(gaugedConditions[:], v1alpha1.ConditionStalled)

var (
	objectsDesc = prometheus.NewDesc("opkit_objects",
		"Objects of each operator by condition (Ready, Degraded, Stalled, Paused) and status (True, False; a condition an object lacks counts as False). A watch operator's objects have Stalled only.",
		[]string{"operator", "condition", "status"}, nil)
	oldestFailingDesc = prometheus.NewDesc("opkit_oldest_failing_object_age_seconds",
		"Seconds since the earliest lastTransitionTime of a Degraded=True or Stalled=True condition among the operator's custom resources; 0 while none fails.",
		[]string{"operator"}, nil)
)

// objectConditions is what the gauges keep of one custom resource: which
// of gaugedConditions are True, and since when it has failed (Degraded or
// Stalled True; zero while it does not).
type objectConditions struct {
	isTrue       [len(gaugedConditions)]bool
	failingSince time.Time
}

// Table holds the conditions of one operator's custom resources
// as its reconciler last read them (from the cache, at the start of each
// reconcile). Every status write is a watch event that reconciles the
// object again, so the table follows the conditions the engine writes, one
// watch event behind, and holds those a previous engine wrote from the
// first reconcile on; the reconciler forgets an object once it is gone.
// The gauges are summed from it when scraped: O(1) per reconcile and a
// small record per object. Counting from the cache at each scrape instead
// would decode every custom resource (the cache keeps them packed,
// package informer) every 15 or 30 seconds.
type Table struct {
	mu      sync.Mutex
	objects map[types.NamespacedName]objectConditions
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{objects: map[types.NamespacedName]objectConditions{}}
}

// Record keeps the object's conditions.
func (t *Table) Record(cr *unstructured.Unstructured) {
	if t == nil {
		return
	}
	oc := readConditions(cr, time.Now())
	key := types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}
	t.mu.Lock()
	t.objects[key] = oc
	t.mu.Unlock()
}

// Forget drops an object that is gone.
func (t *Table) Forget(key types.NamespacedName) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.objects, key)
	t.mu.Unlock()
}

// readConditions reads the gauged conditions from status.conditions as
// decoded JSON holds them (no round trip through metav1.Condition: this
// runs at every reconcile). A failing condition without a readable
// lastTransitionTime fails since now.
func readConditions(cr *unstructured.Unstructured, now time.Time) objectConditions {
	var oc objectConditions
	raw, _, _ := unstructured.NestedFieldNoCopy(cr.Object, "status", "conditions")
	list, _ := raw.([]any)
	for _, item := range list {
		c, _ := item.(map[string]any)
		typ, _ := c["type"].(string)
		i := slices.Index(gaugedConditions[:], typ)
		if i < 0 || c["status"] != "True" {
			continue
		}
		oc.isTrue[i] = true
		if typ != v1alpha1.ConditionDegraded && typ != v1alpha1.ConditionStalled {
			continue
		}
		since := now
		if s, ok := c["lastTransitionTime"].(string); ok {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				since = t
			}
		}
		if oc.failingSince.IsZero() || since.Before(oc.failingSince) {
			oc.failingSince = since
		}
	}
	return oc
}

// objectCounts are one operator's objects as the gauges show them.
type objectCounts struct {
	objects int
	isTrue  [len(gaugedConditions)]int
	// stalledOnly: a watch operator's objects, which have handler state
	// but no conditions.
	stalledOnly  bool
	failingSince time.Time
}

func (c *objectCounts) add(oc objectConditions) {
	c.objects++
	for i, t := range oc.isTrue {
		if t {
			c.isTrue[i]++
		}
	}
	if !oc.failingSince.IsZero() && (c.failingSince.IsZero() || oc.failingSince.Before(c.failingSince)) {
		c.failingSince = oc.failingSince
	}
}

// addTo counts the table's objects into c.
func (t *Table) addTo(c *objectCounts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, oc := range t.objects {
		c.add(oc)
	}
}

// addWatchedTo counts a watch operator's objects into c: those it has
// handler state for, with Stalled only.
func addWatchedTo(c *objectCounts, rn *run.Runner) {
	c.stalledOnly = true
	rn.Watched().Each(func(stalled bool) {
		var oc objectConditions
		oc.isTrue[stalledIndex] = stalled
		c.add(oc)
	})
}

// Source is what the gauges count of one running operator: the table of
// its custom resources' conditions, or the runner of a watch operator,
// whose objects have Stalled only.
type Source struct {
	Table   *Table
	Watched *run.Runner
}

// Sources lists the sources of an engine's running operators, by
// Operator name.
type Sources func() map[string]Source

// engines are the sources of the engines whose Run runs, which the
// object gauges read.
var engines = struct {
	sync.Mutex
	set map[*Sources]struct{}
}{set: map[*Sources]struct{}{}}

var collectorOnce sync.Once

// Track adds an engine's sources to what the gauges read, registering
// the collector in controller-runtime's registry first if it is not yet;
// the func returned removes them.
func Track(sources Sources) func() {
	collectorOnce.Do(func() {
		metrics.Registry.MustRegister(objectsCollector{})
	})
	key := &sources
	engines.Lock()
	engines.set[key] = struct{}{}
	engines.Unlock()
	return func() {
		engines.Lock()
		delete(engines.set, key)
		engines.Unlock()
	}
}

// objectsCollector computes opkit_objects and
// opkit_oldest_failing_object_age_seconds when scraped, from the running
// operators of every running engine (an operator removed or stopped has
// no series). Engines of one process running operators of the same name
// (tests) add up.
type objectsCollector struct{}

func (objectsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- oldestFailingDesc
}

func (objectsCollector) Collect(ch chan<- prometheus.Metric) {
	sources := map[string][]Source{}
	engines.Lock()
	for list := range engines.set {
		for name, s := range (*list)() {
			sources[name] = append(sources[name], s)
		}
	}
	engines.Unlock()
	now := time.Now()
	for name, srcs := range sources {
		var c objectCounts
		for _, s := range srcs {
			if s.Table != nil {
				s.Table.addTo(&c)
			} else {
				addWatchedTo(&c, s.Watched)
			}
		}
		for i, cond := range gaugedConditions {
			if c.stalledOnly && i != stalledIndex {
				continue
			}
			ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(c.isTrue[i]), name, cond, "True")
			ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(c.objects-c.isTrue[i]), name, cond, "False")
		}
		if c.stalledOnly {
			continue
		}
		age := 0.0
		if !c.failingSince.IsZero() {
			age = max(now.Sub(c.failingSince).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(oldestFailingDesc, prometheus.GaugeValue, age, name)
	}
}
