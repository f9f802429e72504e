package delivery

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// A delivery's trace: its receipt is a span (a webhook's a server span,
// a consumed message's a consumer span) that continues the sender's
// traceparent (a webhook's header, a CloudEvent's traceparent extension,
// a message's header), and the delivery's record keeps that span's
// traceparent (archive.Delivery.Trace). Its handling, by this engine or
// the next after a restart, is a span continuing it: the source's
// object is written with it (tracing.Annotation), and the handlers' runs
// are its children.

// receiveSpan starts the span of a delivery's receipt, from the sender's
// trace context in h, and returns ctx with it.
func receiveSpan(ctx context.Context, kind trace.SpanKind, name string, h map[string][]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := tracing.Tracer().Start(tracing.FromHeaders(ctx, h), name, trace.WithSpanKind(kind))
	if span.IsRecording() {
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// hookAttributes are a webhook delivery's span's attributes.
func hookAttributes(r *http.Request, operator, src string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", "/hooks/{operator}/{source}"),
		attribute.String("url.path", r.URL.Path),
		attribute.String("opkit.operator", operator),
		attribute.String("opkit.source", src),
	}
}

// messageAttributes are a consumed message's span's attributes.
func messageAttributes(src *definition.EventSource, operator, id string) []attribute.KeyValue {
	system := map[string]string{definition.KindNATS: "nats", definition.KindKafka: "kafka"}[src.Kind]
	attrs := []attribute.KeyValue{
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("opkit.operator", operator),
		attribute.String("opkit.source", src.Name),
	}
	if system != "" {
		attrs = append(attrs, attribute.String("messaging.system", system))
	}
	if id != "" {
		attrs = append(attrs, attribute.String("messaging.message.id", id))
	}
	return attrs
}

// recorded notes on span how the delivery was recorded.
func recorded(span trace.Span, d *archive.Delivery) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("opkit.delivery.id", d.ID), attribute.String("opkit.delivery.outcome", string(d.Outcome)))
	if d.Outcome == archive.DeliveryRefused {
		span.SetAttributes(attribute.String("opkit.delivery.reason", d.Reason))
	}
}

// eventTrace gives a CloudEvent of a request its own span when it
// carries a traceparent extension (ce-traceparent in binary mode): a
// child of the sender's trace, linked to the request's span, whose
// traceparent d then records. It returns what ends that span.
func eventTrace(ctx context.Context, ev source.CloudEvent, d *archive.Delivery) func() {
	parent := tracing.WithRemote(ctx, ev.Attributes["traceparent"], ev.Attributes["tracestate"])
	if parent == ctx {
		return func() {}
	}
	_, span := tracing.Tracer().Start(parent, "receive "+d.Source, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.LinkFromContext(ctx)))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opkit.source", d.Source), attribute.String("cloudevents.event_id", ev.DeliveryID), attribute.String("cloudevents.event_type", ev.Type))
	}
	d.Trace, _ = tracing.Traceparent(trace.ContextWithSpan(ctx, span))
	return func() {
		if d.ID != "" {
			recorded(span, d)
		}
		span.End()
	}
}

// handleSpan starts the span of a delivery's handling, continuing its
// receipt's (d.Trace).
func handleSpan(ctx context.Context, d *archive.Delivery) (context.Context, trace.Span) {
	ctx, span := tracing.Tracer().Start(tracing.WithRemote(ctx, d.Trace, ""), "handle "+d.Source, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("opkit.operator", d.Operator),
			attribute.String("opkit.source", d.Source),
			attribute.String("opkit.delivery.id", d.ID),
		)
	}
	return ctx, span
}
