package run

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// The run metrics are registered in controller-runtime's registry
// (metrics.Registry), once per process, and served with the engine's
// other metrics. docs/metrics.md describes each one.

// runMetrics are the handler metrics.
type runMetrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	retries  *prometheus.CounterVec
	// queued are the runs waiting for a slot; queueWait how long a run
	// waited, from the moment it was due to its start.
	queued    *prometheus.GaugeVec
	queueWait *prometheus.HistogramVec
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
		}
		metrics.Registry.MustRegister(theMetrics.runs, theMetrics.duration, theMetrics.inFlight, theMetrics.retries, theMetrics.queued, theMetrics.queueWait)
	})
	return theMetrics
}

// RegisterMetrics registers the run metrics, if they are not yet, so that
// they are served before the first run.
func RegisterMetrics() { handlerMetrics() }

// forOperator makes the operator's run gauges show 0 before its first
// run, rather than nothing.
func (m *runMetrics) forOperator(operator string) {
	m.inFlight.WithLabelValues(operator)
	m.queued.WithLabelValues(operator)
}

// observe counts a run that ended, its duration with the run's trace id
// as exemplar when its trace is sampled (served to a scraper that asks
// for OpenMetrics).
func (m *runMetrics) observe(operator string, r *archive.Run) {
	m.runs.WithLabelValues(operator, r.Handler, string(r.Outcome)).Inc()
	h, d := m.duration.WithLabelValues(operator, r.Handler), r.FinishedAt.Sub(r.StartedAt).Seconds()
	if r.Trace != "" {
		if sc := tracing.Parse(r.Trace); sc.IsSampled() {
			if eo, ok := h.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(d, prometheus.Labels{"trace_id": sc.TraceID().String()})
				return
			}
		}
	}
	h.Observe(d)
}

// Observe counts a run that ended outside a Runner (an admission call)
// in the run metrics.
func Observe(r *archive.Run) { handlerMetrics().observe(r.Operator, r) }
