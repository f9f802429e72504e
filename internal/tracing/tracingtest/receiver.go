// Package tracingtest is an OpenTelemetry collector for tests and the
// bench: it
// receives spans over OTLP, gRPC and HTTP (protobuf), with the
// protocol's own service definitions, and keeps them to be asserted on.
// Used by tests and the bench only.
package tracingtest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a span received, flattened.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attributes                    map[string]string // values as text
	Events                        []string
	Links                         []string // the linked spans' trace ids
	Error                         bool     // status code Error
	Message                       string   // the status's
	Service                       string   // the resource's service.name
}

// Receiver receives spans on GRPCAddr (host:port) and at HTTPURL
// (/v1/traces), until the test ends.
type Receiver struct {
	GRPCAddr string
	HTTPURL  string

	mu    sync.Mutex
	spans []Span
	collectorpb.UnimplementedTraceServiceServer
}

// Start starts a receiver on loopback, stopped when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r, stop, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

// Listen starts a receiver on loopback, until stop (a benchmark's).
func Listen() (r *Receiver, stop func(), err error) {
	r = &Receiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	r.GRPCAddr = lis.Addr().String()
	hs := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	r.HTTPURL = hs.URL
	return r, func() { srv.Stop(); hs.Close() }, nil
}

// Count is how many spans were received.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// Export is the OTLP gRPC service's method.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP's /v1/traces, protobuf-encoded.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "OTLP/HTTP protobuf is POSTed to /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := text(attrs(rs.GetResource().GetAttributes())["service.name"])
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Attributes: map[string]string{}, Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Message: s.GetStatus().GetMessage(), Service: service,
				}
				for k, v := range attrs(s.GetAttributes()) {
					sp.Attributes[k] = text(v)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId()))
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	out := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue()
	}
	return out
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case nil:
		return ""
	default:
		b, _ := proto.Marshal(v)
		return string(b)
	}
}

// Spans returns the spans received so far, of the trace traceID (hex),
// or all with "".
func (r *Receiver) Spans(traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(r.spans), func(s Span) bool { return traceID != "" && s.TraceID != traceID })
}

// Provider is a tracer provider exporting to r over gRPC, in batches
// sent every 50 ms; it is shut down when the test ends.
func (r *Receiver) Provider(t testing.TB) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracegrpc.New(t.Context(), otlptracegrpc.WithEndpoint(r.GRPCAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	return tp
}
