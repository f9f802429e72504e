// Package tracing gives opkit's spans to OpenTelemetry and carries W3C
// trace context across the engine's boundaries: from what comes in (a
// webhook's traceparent header, a CloudEvent's traceparent extension, a
// message's headers) through the archive's records and the objects the
// engine writes (the Annotation), to the handlers (TRACEPARENT and
// TRACESTATE in their environment, a Serve line's binding context, an
// http handler's header).
//
// Contracts:
//   - Setup reads the standard OTEL_* environment once and installs the
//     process's tracer provider; tracing is off unless an OTLP endpoint
//     or OTEL_TRACES_EXPORTER=otlp is set. Off, a span costs a
//     non-recording value and no export, and an incoming trace context
//     still passes through to the handlers and the objects written.
//   - Every span opkit makes comes from Tracer, and its attributes are
//     set only while it records (Recording).
//   - A reconcile's span is Deferred: it starts, at the reconcile's
//     start, only once something asks for it (Ensure: a run decided, a
//     child written), so that a reconcile that changes nothing exports
//     nothing.
//   - Trace context read from outside is only ever parsed as W3C trace
//     context: a value that does not parse is ignored, never an error.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Scope is the instrumentation scope of opkit's spans.
const Scope = "github.com/opkit-dev/opkit"

// Annotation is set on the objects the engine writes (a source's object,
// a custom resource's children) to the traceparent of the span that
// wrote them: a controller that reads the object, opkit's own next
// reconcile included, continues or links that trace.
const Annotation = "opkit.dev/traceparent"

// Env names of the trace context a handler gets, as OpenTelemetry's
// environment carriers name them.
const (
	EnvTraceparent = "TRACEPARENT"
	EnvTracestate  = "TRACESTATE"
)

// current is the tracer of the provider installed last (Install); until
// then a no-op one, whose spans carry their parent's context and record
// nothing. The process's global provider (otel.SetTracerProvider) is
// left to the libraries: one of its tracers keeps the first provider
// ever installed, and tests install several.
var current atomic.Pointer[trace.Tracer]

func init() {
	t := noop.NewTracerProvider().Tracer(Scope)
	current.Store(&t)
}

// Tracer is the tracer of every opkit span.
func Tracer() trace.Tracer { return *current.Load() }

var propagator = propagation.TraceContext{}

// Config is what the OTEL_* environment asks for.
type Config struct {
	// On: spans are exported.
	On bool
	// Protocol is grpc or http/protobuf.
	Protocol string
}

// FromEnv reads the tracing configuration from getenv: on when
// OTEL_TRACES_EXPORTER is otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set and OTEL_TRACES_EXPORTER is not none; off when OTEL_SDK_DISABLED is
// true. The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL's, else
// OTEL_EXPORTER_OTLP_PROTOCOL's, else http/protobuf, as the specification
// says.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "none":
		return c, nil
	case "otlp":
		c.On = true
	case "":
		c.On = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: opkit exports traces with otlp only (or none)", exporter)
	}
	c.Protocol = "http/protobuf"
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			c.Protocol = v
			if v != "grpc" && v != "http/protobuf" {
				return c, fmt.Errorf("%s=%q: opkit speaks OTLP over grpc or http/protobuf", name, v)
			}
			break
		}
	}
	return c, nil
}

// Setup installs the tracer provider the process's environment asks for
// (FromEnv), naming the service opkit unless OTEL_SERVICE_NAME names it;
// the exporter reads its endpoint, headers, certificates and timeout
// from the same environment, and the provider its sampler
// (OTEL_TRACES_SAMPLER) and batching (OTEL_BSP_*). shutdown flushes what
// is left to export: call it once the engine stopped. Off, Setup
// installs nothing and shutdown does nothing.
func Setup(ctx context.Context, version string) (shutdown func(context.Context) error, c Config, err error) {
	none := func(context.Context) error { return nil }
	if c, err = FromEnv(os.Getenv); err != nil || !c.On {
		return none, c, err
	}
	var exp sdktrace.SpanExporter
	if c.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return none, c, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "opkit")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// WithFromEnv comes after the defaults: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return none, c, fmt.Errorf("tracing: the resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	restore := Install(tp)
	return func(ctx context.Context) error {
		restore() // spans started after this are not exported
		return tp.Shutdown(ctx)
	}, c, nil
}

// Install makes opkit's spans tp's until restore is called (Setup's, or
// a test's provider).
func Install(tp trace.TracerProvider) (restore func()) {
	t := tp.Tracer(Scope)
	before := current.Swap(&t)
	return func() { current.CompareAndSwap(&t, before) }
}

// Traceparent returns the W3C trace context of ctx's span, "" when it
// has none.
func Traceparent(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// WithRemote returns ctx with the remote span context traceparent and
// tracestate name, as the parent of the spans started from it; ctx as
// it is when traceparent does not parse.
func WithRemote(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	out := propagator.Extract(ctx, c)
	if !trace.SpanContextFromContext(out).IsRemote() {
		return ctx
	}
	return out
}

// Parse returns the span context of a traceparent, not valid when it
// does not parse.
func Parse(traceparent string) trace.SpanContext {
	return trace.SpanContextFromContext(WithRemote(context.Background(), traceparent, ""))
}

// FromHeaders returns ctx with the trace context of h (by lower-case or
// canonical name: traceparent, tracestate) as its remote parent.
func FromHeaders(ctx context.Context, h map[string][]string) context.Context {
	first := func(name string) string {
		for _, k := range []string{name, http.CanonicalHeaderKey(name)} {
			if v := h[k]; len(v) > 0 {
				return v[0]
			}
		}
		return ""
	}
	return WithRemote(ctx, first("traceparent"), first("tracestate"))
}

// Inject sets the traceparent and tracestate headers of ctx's span on h.
func Inject(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Env is the environment a handler gets of ctx's span: TRACEPARENT and
// TRACESTATE, nothing when ctx has none.
func Env(ctx context.Context) []string {
	tp, ts := Traceparent(ctx)
	if tp == "" {
		return nil
	}
	env := []string{EnvTraceparent + "=" + tp}
	if ts != "" {
		env = append(env, EnvTracestate+"="+ts)
	}
	return env
}

// Annotate sets the Annotation of annotations to ctx's traceparent, and
// reports whether it did (ctx has a span context).
func Annotate(ctx context.Context, annotations map[string]string) bool {
	tp, _ := Traceparent(ctx)
	if tp == "" || annotations == nil {
		return false
	}
	annotations[Annotation] = tp
	return true
}

// Fail marks span as failed with message, when it records.
func Fail(span trace.Span, message string) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, message)
	}
}

// ObjectParent chooses what an object's reconcile continues: the trace
// of annotation (the object's Annotation) when it is not seen (a write
// made it since the object's runs last continued it), else ctx's own. It
// returns the context to start the reconcile's span from, and the
// annotation it continues ("" when none).
func ObjectParent(ctx context.Context, annotation, seen string) (parent context.Context, adopted string) {
	if annotation != "" && annotation != seen {
		if p := WithRemote(ctx, annotation, ""); p != ctx {
			return p, annotation
		}
	}
	return ctx, ""
}

// ObjectAttributes are the attributes of a span about obj, of operator.
func ObjectAttributes(operator string, obj interface {
	GetNamespace() string
	GetName() string
	GetUID() types.UID
	GetObjectKind() schema.ObjectKind
}) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("opkit.operator", operator),
		attribute.String("opkit.object.kind", obj.GetObjectKind().GroupVersionKind().Kind),
		attribute.String("opkit.object.name", obj.GetName()),
		attribute.String("opkit.object.uid", string(obj.GetUID())),
	}
	if ns := obj.GetNamespace(); ns != "" {
		attrs = append(attrs, attribute.String("k8s.namespace.name", ns))
	}
	return attrs
}

// deferred is a span to be started once asked for (Ensure).
type deferred struct {
	mu     sync.Mutex
	parent context.Context
	name   string
	start  time.Time
	attrs  func() []attribute.KeyValue
	span   trace.Span // nil until asked for
	// adopted is the traceparent the span continues from an object's
	// Annotation: what its state records as seen.
	adopted string
}

type deferredKey struct{}

// Defer returns ctx holding a span named name, started at now from
// parent's span context only once Ensure asks for it, with the
// attributes attrs returns (called only when the span records), and
// end, which ends it if it was started. adopted is the object's
// Annotation parent continues from, "" when none (Adopted returns it).
func Defer(ctx, parent context.Context, name, adopted string, attrs func() []attribute.KeyValue) (context.Context, func()) {
	d := &deferred{parent: parent, name: name, start: time.Now(), attrs: attrs, adopted: adopted}
	return context.WithValue(ctx, deferredKey{}, d), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.span != nil {
			d.span.End()
		}
	}
}

// Ensure returns ctx with its deferred span started (once), the parent
// of the spans and writes that follow; ctx as it is without one.
func Ensure(ctx context.Context) context.Context {
	d, _ := ctx.Value(deferredKey{}).(*deferred)
	if d == nil {
		return ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.span == nil {
		_, d.span = Tracer().Start(d.parent, d.name, trace.WithTimestamp(d.start))
		if d.span.IsRecording() && d.attrs != nil {
			d.span.SetAttributes(d.attrs()...)
		}
	}
	return trace.ContextWithSpan(ctx, d.span)
}

// Adopted is the object's Annotation the deferred span of ctx continues
// from, "" when none.
func Adopted(ctx context.Context) string {
	if d, _ := ctx.Value(deferredKey{}).(*deferred); d != nil {
		return d.adopted
	}
	return ""
}
