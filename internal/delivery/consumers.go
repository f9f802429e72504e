package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/ghpoll"
	"github.com/opkit-dev/opkit/internal/source/kafkasrc"
	"github.com/opkit-dev/opkit/internal/source/natsjs"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// The sources the engine reaches out to (a GitHub poll, a NATS JetStream
// consumer, a Kafka consumer group: definition.EventSource.Consumed) are
// consumed while their operator runs, so on the acting replica alone:
// a standby runs no operator, and connects when it takes over. Each
// message is checked and recorded as the hooks listener records a
// delivery (ServeHTTP), then acknowledged at its source:
//
//   - one larger than the source's limit, not JSON, or filtered out is
//     recorded Refused with the reason, and acknowledged (delivering it
//     again would refuse it again);
//   - one accepted is recorded Pending, durably, then acknowledged and
//     queued for its handlers (Queue): from then on its
//     handling survives the engine's end, as a webhook delivery's does;
//   - one whose id the archive holds already (a redelivery after a crash
//     between the record and the acknowledgement, a rebalance) is
//     acknowledged and not handled again;
//   - one the archive cannot record now is not acknowledged: the
//     consumer delivers it again (package source's Consumer contract).
//
// A consumer that cannot reach its source says so in one line of the log
// (and again when it recovers), in /readyz (check "sources") and in
// opkit_source_connected; opkit_source_lag is how many messages its
// source holds that are not recorded yet.

// consumerWatch is how often a consumer's State is read for the log and
// the gauges.
const consumerWatch = 2 * time.Second

// Consumers are the running consumers of one operator.
type Consumers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	list   []*consumed
}

// consumed is one running consumer.
type consumed struct {
	operator string
	src      *definition.EventSource
	c        source.Consumer
	// failed is the failure last logged, "" while it works: a failure is
	// logged once, not on every retry.
	failed string
}

// Stop stops the consumers and waits for them; a nil Consumers has none.
func (cs *Consumers) Stop() {
	if cs == nil {
		return
	}
	cs.cancel()
	cs.wg.Wait()
	for _, c := range cs.list {
		metrics().lag.DeleteLabelValues(c.operator, c.src.Name)
		metrics().connected.DeleteLabelValues(c.operator, c.src.Name)
	}
}

// StartConsumers starts a consumer for each consumed source of d, its
// messages recorded by rc and queued on q, until ctx ends or Stop; nil
// when d has none.
func (rc *Receiver) StartConsumers(ctx context.Context, d *definition.Definition, q *Queue) (*Consumers, error) {
	var srcs []*definition.EventSource
	for _, s := range d.Sources {
		if s.Consumed() {
			srcs = append(srcs, s)
		}
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	cs := &Consumers{cancel: cancel}
	log := rc.Log.WithValues("operator", d.Operator.Name)
	for _, s := range srcs {
		c, err := rc.newConsumer(d, s)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("operator %s: source %s: %w", d.Operator.Name, s.Name, err)
		}
		cs.list = append(cs.list, &consumed{operator: d.Operator.Name, src: s, c: c})
	}
	for _, c := range cs.list {
		sink := rc.sink(d, q, c.src)
		log := log.WithValues("source", c.src.Name, "kind", c.src.Kind)
		cs.wg.Go(func() {
			if err := c.c.Run(ctx, sink); err != nil && ctx.Err() == nil {
				log.Error(err, "the source cannot be consumed")
			}
		})
		cs.wg.Go(func() { c.watch(ctx, log) })
	}
	return cs, nil
}

// newConsumer makes the consumer of a consumed source.
func (rc *Receiver) newConsumer(d *definition.Definition, s *definition.EventSource) (source.Consumer, error) {
	switch s.Kind {
	case definition.KindGitHubPoll:
		return ghpoll.New(s.GitHubPoll, s.PollInterval, d.Operator.Name, s.Name, rc.ReadSecret, rc.Archive)
	case definition.KindKafka:
		return kafkasrc.New(s.Kafka, s.Member, rc.ReadSecret), nil
	case definition.KindNATS:
		return natsjs.New(s.NATS, rc.ReadSecret), nil
	}
	return nil, fmt.Errorf("sources of kind %s are not built yet", s.Kind)
}

// watch logs the consumer's failures and recoveries and sets its gauges,
// until ctx ends.
func (c *consumed) watch(ctx context.Context, log logr.Logger) {
	sleep.Poll(ctx, consumerWatch, func() {
		st := c.c.State()
		m := metrics()
		m.connected.WithLabelValues(c.operator, c.src.Name).Set(boolGauge(st.Connected))
		if st.Lag >= 0 {
			m.lag.WithLabelValues(c.operator, c.src.Name).Set(float64(st.Lag))
		}
		switch {
		case st.Err != nil && st.Err.Error() != c.failed:
			c.failed = st.Err.Error()
			log.Info(fmt.Sprintf("source %s (%s) cannot be consumed: %v; trying again %s", c.src.Name, c.src.Kind, st.Err, retryIn(st.RetryAt)))
		case st.Err == nil && st.Connected && c.failed != "":
			c.failed = ""
			log.Info(fmt.Sprintf("source %s (%s) is consumed again", c.src.Name, c.src.Kind))
		}
	})
}

// retryIn says when a consumer tries again.
func retryIn(at time.Time) string {
	if at.IsZero() {
		return "soon"
	}
	return "in " + time.Until(at).Round(time.Second).String()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sink records a consumer's messages for d's source src.
func (rc *Receiver) sink(d *definition.Definition, q *Queue, src *definition.EventSource) source.Sink {
	return source.SinkFunc(func(ctx context.Context, m source.Message) error {
		_, _, err := rc.take(ctx, d, q, src, m)
		return err
	})
}

// take records one message of a consumed source and queues it when
// accepted. It returns the record and the status a webhook delivery
// would have been answered with: 202 accepted, 200 filtered out, 413 or
// 400 refused, 409 recorded before (the record is then nil). An error is
// a message not recorded.
func (rc *Receiver) take(ctx context.Context, def *definition.Definition, q *Queue, src *definition.EventSource, m source.Message) (*archive.Delivery, int, error) {
	d := &archive.Delivery{
		Operator: def.Operator.Name, Source: src.Name, ReceivedAt: time.Now().UTC(),
		DeliveryID: m.ID, Event: m.Event, Headers: messageHeaders(m.Headers),
		Payload: m.Body, PayloadBytes: int64(len(m.Body)),
	}
	ctx, span := receiveSpan(ctx, trace.SpanKindConsumer, "receive "+src.Name, d.Headers, messageAttributes(src, d.Operator, m.ID)...)
	defer func() {
		if d.ID != "" {
			recorded(span, d)
		}
		span.End()
	}()
	d.Trace, _ = tracing.Traceparent(ctx)
	if ref := checkMessage(src, m); ref != nil {
		d.Outcome, d.Reason = archive.DeliveryRefused, ref.Reason
		if len(d.Payload) > refusedPayloadCap {
			d.Payload, d.PayloadTruncated = d.Payload[:refusedPayloadCap], true
		}
		if err := rc.Archive.RecordDelivery(ctx, d); err != nil {
			return nil, 0, fmt.Errorf("recording a refused message: %w", err)
		}
		metrics().messages.WithLabelValues(d.Operator, d.Source, "refused").Inc()
		return d, ref.Status, nil
	}
	err := rc.Archive.RecordDelivery(ctx, d)
	switch {
	case errors.Is(err, archive.ErrDuplicateDelivery):
		metrics().messages.WithLabelValues(d.Operator, d.Source, "redelivered").Inc()
		return nil, http.StatusConflict, nil
	case err != nil:
		return nil, 0, fmt.Errorf("recording the message: %w", err)
	}
	metrics().messages.WithLabelValues(d.Operator, d.Source, "accepted").Inc()
	q.Add(*d)
	return d, http.StatusAccepted, nil
}

// Inject hands a message to a running operator's consumed source as its
// consumer would: checked, recorded and queued (see take for the status
// returned). opkit test's send steps use it in place of a GitHub, NATS or
// Kafka.
func (rc *Receiver) Inject(ctx context.Context, operator, sourceName string, m source.Message) (*archive.Delivery, int, error) {
	def, q, _ := rc.Running(operator)
	if def == nil {
		return nil, 0, fmt.Errorf("no operator %q runs here", operator)
	}
	src := def.EventSource(sourceName)
	switch {
	case src == nil:
		return nil, 0, fmt.Errorf("operator %s has no source %q", operator, sourceName)
	case !src.Consumed():
		return nil, 0, fmt.Errorf("operator %s: source %s is a %s source: its deliveries are posted to the hooks listener", operator, sourceName, src.Kind)
	case q == nil:
		return nil, 0, fmt.Errorf("operator %s is starting", operator)
	}
	return rc.take(ctx, def, q, src, m)
}

// checkMessage checks a message as check checks a webhook's
// delivery: nil for one to accept, else why it is refused.
func checkMessage(src *definition.EventSource, m source.Message) *source.Refusal {
	if int64(len(m.Body)) > src.MaxBodyBytes {
		return &source.Refusal{Status: http.StatusRequestEntityTooLarge, Reason: fmt.Sprintf("message of %s is larger than the source's limit of %s", source.Size(int64(len(m.Body))), source.Size(src.MaxBodyBytes))}
	}
	payload, err := source.Payload(m.Body)
	if err != nil {
		var ref *source.Refusal
		if errors.As(err, &ref) {
			return ref
		}
		return &source.Refusal{Status: http.StatusBadRequest, Reason: err.Error()}
	}
	return filter(src, definition.EventVars{Payload: payload, Headers: m.Headers, Event: m.Event, DeliveryID: m.ID, Source: src.Name})
}

// messageHeaders are a message's headers as the archive keeps a
// delivery's, credentials redacted.
func messageHeaders(h map[string]string) map[string][]string {
	if len(h) == 0 {
		return nil
	}
	hh := make(http.Header, len(h))
	for k, v := range h {
		hh[k] = []string{v}
	}
	return archive.RedactHeaders(hh, "")
}

// Failing says, for each consumer that cannot reach its source now, why;
// none for a nil Consumers.
func (cs *Consumers) Failing() []string {
	if cs == nil {
		return nil
	}
	var failing []string
	for _, c := range cs.list {
		if st := c.c.State(); st.Err != nil && !st.Connected {
			failing = append(failing, fmt.Sprintf("operator %s source %s (%s): %v", c.operator, c.src.Name, c.src.Kind, st.Err))
		}
	}
	return failing
}
