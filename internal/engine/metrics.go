package engine

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

// The metrics are registered in controller-runtime's registry
// (metrics.Registry), once per process, and served with controller-
// runtime's own (which include each operator's queue depth as
// workqueue_depth{name="operator-<name>"}) on Options.MetricsAddr
// (health.go). docs/metrics.md describes each one.

// engineMetrics are the engine's own metrics; the run metrics are
// package run's.
type engineMetrics struct {
	// apiReachable is 1 while the API server answers /readyz.
	apiReachable prometheus.Gauge
	// archiveWritable is 0 while the archive refuses to record runs.
	archiveWritable prometheus.Gauge
	// deliveries are the webhook deliveries answered, by the status.
	deliveries *prometheus.CounterVec
	// leader is 1 while this engine acts (leader.go).
	leader prometheus.Gauge
}

var (
	metricsOnce sync.Once
	theMetrics  *engineMetrics
)

// handlerMetrics returns the engine's metrics, registered once per
// process with the run metrics.
func handlerMetrics() *engineMetrics {
	metricsOnce.Do(func() {
		run.RegisterMetrics()
		theMetrics = &engineMetrics{
			apiReachable: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_api_reachable", Help: "1 while the API server answers the engine's /readyz checks, else 0.",
			}),
			archiveWritable: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_archive_writable", Help: "0 while the run archive refuses to record runs, else 1.",
			}),
			deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "opkit_webhook_deliveries_total", Help: "Webhook deliveries answered by a source, by the status answered: 202 accepted, 200 filtered out, 401, 409, 413, 415, 400 refused, 503 not verifiable or recordable now.",
			}, []string{"operator", "source", "code"}),
			leader: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_leader", Help: "1 while this engine acts (it holds the Lease, or runs without leader election), 0 while it is a standby.",
			}),
		}
		theMetrics.apiReachable.Set(1)
		theMetrics.archiveWritable.Set(1)
		metrics.Registry.MustRegister(theMetrics.apiReachable, theMetrics.archiveWritable, theMetrics.deliveries, theMetrics.leader)
	})
	return theMetrics
}

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

// conditionTable holds the conditions of one operator's custom resources
// as its reconciler last read them (from the cache, at the start of each
// reconcile). Every status write is a watch event that reconciles the
// object again, so the table follows the conditions the engine writes, one
// watch event behind, and holds those a previous engine wrote from the
// first reconcile on; the reconciler forgets an object once it is gone.
// The gauges are summed from it when scraped: O(1) per reconcile and a
// small record per object. Counting from the cache at each scrape instead
// would decode every custom resource (the cache keeps them packed,
// cache.go) every 15 or 30 seconds.
type conditionTable struct {
	mu      sync.Mutex
	objects map[types.NamespacedName]objectConditions
}

func newConditionTable() *conditionTable {
	return &conditionTable{objects: map[types.NamespacedName]objectConditions{}}
}

// record keeps the object's conditions.
func (t *conditionTable) record(cr *unstructured.Unstructured) {
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
func (t *conditionTable) Forget(key types.NamespacedName) {
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
func (t *conditionTable) addTo(c *objectCounts) {
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
	rn.EachWatched(func(stalled bool) {
		var oc objectConditions
		oc.isTrue[stalledIndex] = stalled
		c.add(oc)
	})
}

// engines are the engines whose Run runs, which the object gauges read.
var engines = struct {
	sync.Mutex
	set map[*Engine]struct{}
}{set: map[*Engine]struct{}{}}

var collectorOnce sync.Once

// trackEngine adds e to the engines the gauges read, registering the
// metrics first if they are not yet; the func returned removes it.
func trackEngine(e *Engine) func() {
	collectorOnce.Do(func() {
		handlerMetrics()
		metrics.Registry.MustRegister(objectsCollector{})
	})
	engines.Lock()
	engines.set[e] = struct{}{}
	engines.Unlock()
	return func() {
		engines.Lock()
		delete(engines.set, e)
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
	type source struct {
		table  *conditionTable
		runner *run.Runner // of a watch operator
	}
	sources := map[string][]source{}
	engines.Lock()
	for e := range engines.set {
		e.mu.Lock()
		for name, op := range e.running {
			switch {
			case op.conditions != nil:
				sources[name] = append(sources[name], source{table: op.conditions})
			case op.def.Watch != nil && op.runner != nil:
				sources[name] = append(sources[name], source{runner: op.runner})
			}
		}
		e.mu.Unlock()
	}
	engines.Unlock()
	now := time.Now()
	for name, srcs := range sources {
		var c objectCounts
		for _, s := range srcs {
			if s.table != nil {
				s.table.addTo(&c)
			} else {
				addWatchedTo(&c, s.runner)
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
