package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/gauges"
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
		delivery.RegisterMetrics()
		theMetrics = &engineMetrics{
			apiReachable: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_api_reachable", Help: "1 while the API server answers the engine's /readyz checks, else 0.",
			}),
			archiveWritable: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_archive_writable", Help: "0 while the run archive refuses to record runs, else 1.",
			}),
			leader: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_leader", Help: "1 while this engine acts (it holds the Lease, or runs without leader election), 0 while it is a standby.",
			}),
		}
		theMetrics.apiReachable.Set(1)
		theMetrics.archiveWritable.Set(1)
		metrics.Registry.MustRegister(theMetrics.apiReachable, theMetrics.archiveWritable, theMetrics.leader)
	})
	return theMetrics
}

// gaugeSources are what the object gauges count of the running operators
// (package gauges).
func (e *Engine) gaugeSources() map[string]gauges.Source {
	ops := e.running.all()
	out := make(map[string]gauges.Source, len(ops))
	for _, op := range ops {
		switch {
		case op.conditions != nil:
			out[op.def.Operator.Name] = gauges.Source{Table: op.conditions}
		case op.def.Watch != nil && op.runner != nil:
			out[op.def.Operator.Name] = gauges.Source{Watched: op.runner}
		}
	}
	return out
}
