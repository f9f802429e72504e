package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/archive"
)

// runMetrics are the handler metrics, served with controller-runtime's
// (which include each operator's queue depth as workqueue_depth{name=
// "operator-<name>"}).
type runMetrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	retries  *prometheus.CounterVec
	// queued are the runs waiting for a slot; queueWait how long a run
	// waited, from the moment it was due to its start.
	queued    *prometheus.GaugeVec
	queueWait *prometheus.HistogramVec
	// apiReachable is 1 while the API server answers /readyz.
	apiReachable prometheus.Gauge
	// archiveWritable is 0 while the archive refuses to record runs.
	archiveWritable prometheus.Gauge
}

var (
	metricsOnce sync.Once
	theMetrics  *runMetrics
)

// handlerMetrics returns the metrics, registered once per process.
func handlerMetrics() *runMetrics {
	metricsOnce.Do(func() {
		theMetrics = &runMetrics{
			runs: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "opkit_runs_total", Help: "Handler runs by operator, handler and outcome.",
			}, []string{"operator", "handler", "outcome"}),
			duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "opkit_run_duration_seconds", Help: "Duration of handler runs.",
				Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
			}, []string{"operator", "handler"}),
			inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "opkit_runs_in_flight", Help: "Handler runs in progress.",
			}, []string{"operator"}),
			retries: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "opkit_run_retries_total", Help: "Failed runs that were scheduled for a retry.",
			}, []string{"operator", "handler"}),
			queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "opkit_runs_queued", Help: "Handler runs waiting for a free slot.",
			}, []string{"operator"}),
			queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "opkit_run_queue_seconds", Help: "Time from a run coming due to its start.",
				Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900},
			}, []string{"operator"}),
			apiReachable: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "opkit_api_reachable", Help: "1 while the API server answers the engine's /readyz checks, else 0.",
			}),
		}
		theMetrics.archiveWritable = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opkit_archive_writable", Help: "0 while the run archive refuses to record runs, else 1.",
		})
		theMetrics.apiReachable.Set(1)
		theMetrics.archiveWritable.Set(1)
		metrics.Registry.MustRegister(theMetrics.runs, theMetrics.duration, theMetrics.inFlight, theMetrics.retries, theMetrics.queued, theMetrics.queueWait, theMetrics.apiReachable, theMetrics.archiveWritable)
	})
	return theMetrics
}

func (m *runMetrics) observe(operator string, r *archive.Run) {
	m.runs.WithLabelValues(operator, r.Handler, string(r.Outcome)).Inc()
	m.duration.WithLabelValues(operator, r.Handler).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
}
