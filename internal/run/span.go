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
// Trace), and a failed run's is its handler record's, which the retry's
// reconcile continues: every attempt of a key is one trace.

// noSpan is the span of a flight that runs nothing (a run that
// succeeded before a crash, found in the archive): it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// runSpan starts the span of run, decided at start, from ctx's span.
func (rn *Runner) runSpan(ctx context.Context, run *archive.Run, start time.Time) trace.Span {
	_, span := tracing.Tracer().Start(ctx, "run "+run.Handler, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))
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

// endRunSpan ends a run's span with its outcome: in error when the run
// failed, gave up or was cancelled. A nil span (a run that succeeded
// before a crash, found in the archive) is none.
func endRunSpan(span trace.Span, run *archive.Run) {
	if span == nil {
		return
	}
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
// f that finished: a failed one's, which its retry continues, or none;
// and the object's annotation its reconcile continued, as seen.
func traced(st *cause.State, f *flight, retry bool) {
	t := st.Trace
	if t == nil {
		t = &cause.Trace{}
	}
	if f.adopted != "" {
		t.Seen = f.adopted
	}
	t.Retry = ""
	if retry {
		t.Retry = f.run.Trace
	}
	if *t == (cause.Trace{}) {
		st.Trace = nil
		return
	}
	st.Trace = t
}

// Traced returns ctx with the span of a reconcile of cr deferred
// (tracing.Defer): started only when the reconcile decides a run or
// writes a child, from the trace the object continues
// (tracing.ObjectParent: its annotation not seen, a failed run's for its
// retry). rn may be nil: an operator without handlers.
func Traced(ctx context.Context, rn *Runner, operator string, cr *unstructured.Unstructured) (context.Context, func()) {
	var seen, retry string
	if rn != nil {
		seen, retry = rn.Traces(cr)
	}
	parent, adopted := tracing.ObjectParent(ctx, cr.GetAnnotations()[tracing.Annotation], seen, retry)
	return tracing.Defer(ctx, parent, "reconcile "+cr.GetKind(), adopted, func() []attribute.KeyValue {
		return tracing.ObjectAttributes(operator, cr)
	})
}

// Traces returns what an object's reconcile continues of its runs'
// traces (cause.Trace): the trace annotation its runs last continued,
// and a failed run's trace, which its retry continues.
func (rn *Runner) Traces(cr *unstructured.Unstructured) (seen, retry string) {
	rn.mem.mu.Lock()
	o, ok := rn.mem.objects[types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}]
	var w *cause.State
	if ok && o.uid == cr.GetUID() {
		w = o.written
	}
	rn.mem.mu.Unlock()
	switch {
	case w != nil && w.Trace != nil:
		return w.Trace.Seen, w.Trace.Retry
	case w != nil || rn.watched:
		return "", ""
	}
	seen, _, _ = unstructured.NestedString(cr.Object, "status", "opkit", "trace", "seen")
	retry, _, _ = unstructured.NestedString(cr.Object, "status", "opkit", "trace", "retry")
	return seen, retry
}
