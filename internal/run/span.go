package run

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// A run's span covers it from its decision (queued) to its record: its
// events are the slot taken, the start recorded, the executor's end, and
// the status written when a reconcile's patch carries its result. Its
// context is the executor's: the handler continues its trace
// (package tracing). The span's traceparent is the run's record's (its
// Trace) and its binding context's (traceContext); a failed run's is
// also its handler record's, which the span of the handler's next
// attempt continues (retrySpan): every attempt after a failure is in its
// trace.

// retrySpan starts the span of run, decided at start by the reconcile
// of ctx: in the trace of its handler's failed attempt (retry, a
// traceparent; "" for none), linked to the reconcile's span; else a
// child of the reconcile's.
func (rn *Runner) retrySpan(ctx context.Context, run *archive.Run, start time.Time, retry string) trace.Span {
	ctx = tracing.Ensure(ctx)
	if p := tracing.WithRemote(ctx, retry, ""); p != ctx {
		return rn.runSpan(p, run, start, trace.LinkFromContext(ctx))
	}
	return rn.runSpan(ctx, run, start)
}

// noSpan is the span of a flight that runs nothing (a run that
// succeeded before a crash, found in the archive): it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// runSpan starts the span of run, decided at start, from ctx's span,
// linked to links.
func (rn *Runner) runSpan(ctx context.Context, run *archive.Run, start time.Time, links ...trace.Link) trace.Span {
	_, span := tracing.Tracer().Start(ctx, "run "+run.Handler, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...))
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("opkit.operator", run.Operator),
			attribute.String("opkit.handler", run.Handler),
			attribute.String("opkit.trigger", run.Trigger),
			attribute.String("opkit.run.id", run.ID),
			attribute.String("opkit.run.key", run.Key),
			attribute.Int("opkit.run.attempt", run.Attempt),
			attribute.String("opkit.action", run.Action),
			attribute.String("opkit.object.kind", run.Kind),
			attribute.String("opkit.object.name", run.Name),
		}
		if run.Namespace != "" {
			attrs = append(attrs, attribute.String("k8s.namespace.name", run.Namespace))
		}
		span.SetAttributes(attrs...)
	}
	run.Trace, _ = tracing.Traceparent(trace.ContextWithSpan(ctx, span))
	return span
}

// traceContext is the W3C trace context a run's binding context gives
// its handler: its span's (run.Trace, set by runSpan), and the span's
// tracestate.
func traceContext(span trace.Span, run *archive.Run) (traceparent, tracestate string) {
	return run.Trace, span.SpanContext().TraceState().String()
}

// endRunSpan ends a run's span with its outcome: in error when the run
// failed, gave up or was cancelled.
func endRunSpan(span trace.Span, run *archive.Run) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opkit.run.outcome", string(run.Outcome)))
		switch run.Outcome {
		case archive.Failed, archive.GaveUp, archive.Cancelled:
			span.SetStatus(codes.Error, run.Error)
		}
	}
	span.End()
}

// traced records, in the object's handler records, the trace of the run
// f that finished: in its handler's, a failed one's, which its retry
// continues, or none; in the object's, the annotation its reconcile
// continued, as seen.
func traced(st *cause.State, f *flight, retry bool) {
	if f.adopted != "" {
		st.Trace = &cause.Trace{Seen: f.adopted}
	}
	name := f.cause.Handler.Name
	switch hs := st.Handlers[name]; {
	case retry:
		st.Of(name).Trace = f.run.Trace
	case hs != nil:
		hs.Trace = ""
	}
}

// Traced returns ctx with the span of a reconcile of cr deferred
// (tracing.Defer): started only when the reconcile decides a run or
// writes a child, from the trace the object continues
// (tracing.ObjectParent: its annotation, not seen). A retry's run is in
// its failed attempt's trace, whatever its reconcile's (start). rn may be
// nil: an operator without handlers.
func Traced(ctx context.Context, rn *Runner, operator string, cr *unstructured.Unstructured) (context.Context, func()) {
	var seen string
	if rn != nil {
		seen = rn.seen(cr)
	}
	parent, adopted := tracing.ObjectParent(ctx, cr.GetAnnotations()[tracing.Annotation], seen)
	return tracing.Defer(ctx, parent, "reconcile "+cr.GetKind(), adopted, func() []attribute.KeyValue {
		return tracing.ObjectAttributes(operator, cr)
	})
}

// seen is the trace annotation the object's runs last continued
// (cause.Trace).
func (rn *Runner) seen(cr *unstructured.Unstructured) string {
	rn.mem.mu.Lock()
	o, ok := rn.mem.objects[types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}]
	var w *cause.State
	if ok && o.uid == cr.GetUID() {
		w = o.written
	}
	rn.mem.mu.Unlock()
	switch {
	case w != nil && w.Trace != nil:
		return w.Trace.Seen
	case w != nil || rn.watched:
		return ""
	}
	seen, _, _ := unstructured.NestedString(cr.Object, "status", "opkit", "trace", "seen")
	return seen
}
