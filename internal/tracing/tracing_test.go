package tracing_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/opkit-dev/opkit/internal/tracing"
	"github.com/opkit-dev/opkit/internal/tracing/tracingtest"
)

const (
	incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
)

func TestFromEnvIsOffUnlessAnEndpointOrTheExporterIsSet(t *testing.T) {
	for _, c := range []struct {
		env      map[string]string
		on       bool
		protocol string
		err      string
	}{
		{env: nil, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true, protocol: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, protocol: "grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true, protocol: "grpc"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin": opkit exports traces with otlp only`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": opkit speaks OTLP over grpc or http/protobuf`},
	} {
		got, err := tracing.FromEnv(func(k string) string { return c.env[k] })
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.env, err, c.err)
			}
		case err != nil:
			t.Errorf("%v: %v", c.env, err)
		case got.On != c.on || (c.on && got.Protocol != c.protocol):
			t.Errorf("%v: %+v, want on %v over %q", c.env, got, c.on, c.protocol)
		}
	}
}

// TestSetupExportsOverGRPCAndHTTP installs the provider the environment
// names, for each protocol, and finds a span at the receiver, with the
// service named by OTEL_SERVICE_NAME.
func TestSetupExportsOverGRPCAndHTTP(t *testing.T) {
	rcv := tracingtest.Start(t)
	for _, c := range []struct{ protocol, endpoint string }{
		{"grpc", "http://" + rcv.GRPCAddr},
		{"http/protobuf", rcv.HTTPURL},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.endpoint)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", c.protocol)
		t.Setenv("OTEL_SERVICE_NAME", "opkit-test")
		shutdown, cfg, err := tracing.Setup(t.Context(), "v0.0.1-test")
		if err != nil || !cfg.On || cfg.Protocol != c.protocol {
			t.Fatalf("%s: Setup: %+v, %v", c.protocol, cfg, err)
		}
		ctx := tracing.WithRemote(t.Context(), incoming, "")
		_, span := tracing.Tracer().Start(ctx, "over "+c.protocol)
		span.End()
		if err := shutdown(context.WithoutCancel(t.Context())); err != nil {
			t.Fatalf("%s: shutdown: %v", c.protocol, err)
		}
		spans := rcv.Spans(traceID)
		i := slices.IndexFunc(spans, func(s tracingtest.Span) bool { return s.Name == "over "+c.protocol })
		if i < 0 {
			t.Fatalf("%s: no span received; got %+v", c.protocol, spans)
		}
		if s := spans[i]; s.ParentSpanID != "00f067aa0ba902b7" || s.Service != "opkit-test" {
			t.Errorf("%s: the span's parent %s, service %q; want the incoming span 00f067aa0ba902b7, opkit-test", c.protocol, s.ParentSpanID, s.Service)
		}
	}
	// Shut down, nothing more is exported.
	_, span := tracing.Tracer().Start(t.Context(), "after")
	if span.IsRecording() {
		t.Error("a span started after shutdown records")
	}
	span.End()
}

// TestTraceContextPassesThroughWithTracingOff: off, nothing records, yet
// an incoming traceparent reaches a handler's environment, an http
// header and an annotation; a value that does not parse is ignored.
func TestTraceContextPassesThroughWithTracingOff(t *testing.T) {
	ctx, span := tracing.Tracer().Start(tracing.WithRemote(t.Context(), incoming, "vendor=1"), "off")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a span records with tracing off")
	}
	if env := tracing.Env(ctx); !slices.Equal(env, []string{"TRACEPARENT=" + incoming, "TRACESTATE=vendor=1"}) {
		t.Errorf("the handler's environment %v, want the incoming trace context", env)
	}
	h := http.Header{}
	tracing.Inject(ctx, h)
	if h.Get("traceparent") != incoming {
		t.Errorf("the header traceparent %q, want %q", h.Get("traceparent"), incoming)
	}
	a := map[string]string{}
	if !tracing.Annotate(ctx, a) || a[tracing.Annotation] != incoming {
		t.Errorf("annotations %v, want %s: %s", a, tracing.Annotation, incoming)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"} {
		if got := tracing.WithRemote(t.Context(), bad, ""); got != t.Context() {
			t.Errorf("traceparent %q was taken", bad)
		}
	}
	if env := tracing.Env(t.Context()); env != nil {
		t.Errorf("no trace context gives the environment %v, want none", env)
	}
}

// TestADeferredSpanStartsOnlyWhenAsked: a reconcile's span exists once
// something asks for it, from its start, continuing the object's
// annotation when not seen, else a retry's trace.
func TestADeferredSpanStartsOnlyWhenAsked(t *testing.T) {
	rcv := tracingtest.Start(t)
	tp := rcv.Provider(t)
	restore := tracing.Install(tp)
	defer restore()

	parent, adopted := tracing.ObjectParent(t.Context(), incoming, "")
	if adopted != incoming || trace.SpanContextFromContext(parent).TraceID().String() != traceID {
		t.Fatalf("an annotation not seen: adopted %q", adopted)
	}
	if p, adopted := tracing.ObjectParent(t.Context(), incoming, incoming); adopted != "" || p != t.Context() {
		t.Errorf("an annotation seen was adopted again")
	}

	ctx, end := tracing.Defer(t.Context(), parent, "quiet", adopted, nil)
	end() // nothing asked: no span
	ctx2, end2 := tracing.Defer(t.Context(), parent, "busy", adopted, nil)
	time.Sleep(10 * time.Millisecond)
	got := tracing.Ensure(ctx2)
	if tracing.Ensure(ctx2) == nil || tracing.Adopted(ctx2) != incoming || tracing.Adopted(ctx) != incoming {
		t.Fatal("Ensure or Adopted lost the span")
	}
	if tp, _ := tracing.Traceparent(got); !strings.Contains(tp, traceID) {
		t.Errorf("the deferred span's traceparent %q is not in the annotation's trace", tp)
	}
	end2()
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rcv.Spans(traceID) {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"busy"}) {
		t.Errorf("spans exported %v, want only the one asked for", names)
	}
}
