package delivery

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Receiver is where deliveries come in: the hooks listener's requests
// (ServeHTTP), the consumed sources' messages (Take, through the sinks of
// an operator's Consumers), and a person's redeliveries (Redeliver). It
// checks each against its source, records it in the archive before it is
// answered or acknowledged, and queues it on its operator's Queue.
// Its methods are safe for concurrent use; the zero value with its
// fields set is ready.
type Receiver struct {
	Archive archive.Recorder
	// Deliveries reads the archive's deliveries, for redeliveries; nil
	// when the archive does not (a redelivery is then refused).
	Deliveries archive.DeliveryReader
	// ReadSecret reads a source's Secret key from the API server: a
	// webhook's shared secret behind the receiver's cache, a consumer's
	// credentials at each of its connections.
	ReadSecret func(context.Context, v1alpha1.SecretKeySelector) ([]byte, error)
	// Running finds the running operator a delivery is for: the
	// definition of the operator of that name that runs here and the
	// queue of its deliveries (nil while it starts); a nil definition
	// when none runs here, restarting when it is between a stop and its
	// next start.
	Running func(operator string) (d *definition.Definition, q *Queue, restarting bool)
	Log     logr.Logger

	mu      sync.Mutex
	secrets map[v1alpha1.SecretKeySelector]cachedSecret
	// redeliverMu takes one redelivery at a time: two requests for one
	// delivery must not both pass the check that none is being handled.
	redeliverMu sync.Mutex
}

// deliveryMetrics are the receiver's metrics.
type deliveryMetrics struct {
	// deliveries are the webhook deliveries answered, by the status.
	deliveries *prometheus.CounterVec
	// lag, connected and messages are the consumed sources'.
	lag       *prometheus.GaugeVec
	connected *prometheus.GaugeVec
	messages  *prometheus.CounterVec
}

var (
	metricsOnce sync.Once
	theMetrics  *deliveryMetrics
)

// RegisterMetrics registers the deliveries' and the consumed sources'
// metrics with controller-runtime's registry, once per process.
func RegisterMetrics() { metrics() }

// metrics returns the receiver's metrics, registered once per process.
func metrics() *deliveryMetrics {
	metricsOnce.Do(func() {
		theMetrics = &deliveryMetrics{
			deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "opkit_webhook_deliveries_total", Help: "Webhook deliveries answered by a source, by the status answered: 202 accepted, 200 filtered out, 401, 409, 413, 415, 400 refused, 503 not verifiable or recordable now.",
			}, []string{"operator", "source", "code"}),
			lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "opkit_source_lag", Help: "Messages a consumed source (nats, kafka) holds that the engine has not recorded yet.",
			}, []string{"operator", "source"}),
			connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "opkit_source_connected", Help: "1 while a consumed source (githubPoll, nats, kafka) is reached, else 0.",
			}, []string{"operator", "source"}),
			messages: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "opkit_source_messages_total", Help: "Messages of a consumed source, by outcome: accepted (recorded Pending), refused (recorded Refused: too large, not JSON, filtered out), redelivered (recorded before: not handled again).",
			}, []string{"operator", "source", "outcome"}),
		}
		ctrlmetrics.Registry.MustRegister(theMetrics.deliveries, theMetrics.lag, theMetrics.connected, theMetrics.messages)
	})
	return theMetrics
}
