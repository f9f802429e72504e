package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/tracing"
	"github.com/opkit-dev/opkit/internal/tracing/tracingtest"
)

// traceHandlerEnv makes the test binary a handler that appends what it
// got of the trace ({attempt, env, context}) to $OUT, fails its first
// attempt, and then sets status.deployed.
const traceHandlerEnv = "OPKIT_TEST_TRACE_HANDLER"

type traceRecord struct {
	Attempt int    `json:"attempt"`
	Env     string `json:"env"`     // TRACEPARENT
	Context string `json:"context"` // the binding context's traceparent
}

func testTraceHandler() int {
	var bc struct {
		Attempt     int    `json:"attempt"`
		Traceparent string `json:"traceparent"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&bc); err != nil {
		fmt.Fprintln(os.Stderr, "bad binding context:", err)
		return 2
	}
	line, _ := json.Marshal(traceRecord{Attempt: bc.Attempt, Env: os.Getenv("TRACEPARENT"), Context: bc.Traceparent})
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
	if bc.Attempt == 1 {
		fmt.Fprintln(os.Stderr, "the first attempt fails")
		return 1
	}
	fmt.Println(`{"status": {"deployed": true}}`)
	return 0
}

// TestATraceRunsFromAWebhookDeliveryToWhatItsHandlersWrite: a signed
// delivery carrying a traceparent creates an object through its source's
// object; the object's create handler fails once, then writes status;
// its reconcile writes a child. Every span of the chain (the delivery's
// receipt and handling, the reconciles, both attempts of the run) is in
// the delivery's trace and hangs from it, the handler saw the trace in
// TRACEPARENT and its binding context, and the object, the child, the
// runs' and the delivery's records carry it. The spans go to a real OTLP
// receiver over gRPC.
func TestATraceRunsFromAWebhookDeliveryToWhatItsHandlersWrite(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.Start(t)
	tp := rcv.Provider(t)
	t.Cleanup(tracing.Install(tp))

	env := clustertest.New(t)
	store := newArchive(t)
	hookSecret(t, env, "s3cret")
	out := filepath.Join(t.TempDir(), "trace.jsonl")
	group := "traced-" + env.Namespace + ".example.com"
	yaml := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: traced}
spec:
  resource:
    group: %[2]s
    kind: Deploy
    versions:
    - name: v1
      schema:
        type: object
        properties:
          sha: {type: string}
  children:
  - id: record
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "${self.metadata.name}-record"
      data:
        sha: "${self.spec.sha}"
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: %[1]s, name: hook, key: secret}}
    object:
      metadata:
        name: "pr-${string(payload.issue.number)}"
        namespace: %[1]s
      spec:
        sha: "${payload.comment.body.substring(8)}"
  handlers:
  - name: deploy
    on: [create]
    retry: {maxAttempts: 3, initialDelay: 1s, jitter: 0}
    exec:
      command: [%[3]q]
      env: [{name: %[4]s, value: "1"}, {name: OUT, value: %[5]q}]
`, env.Namespace, group, clustertest.HandlerBinary(t), traceHandlerEnv, out)
	file := filepath.Join(t.TempDir(), "traced.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"}, file)
	url := "http://" + e.HooksAddr() + "/hooks/traced/github"

	const traceID, sender = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"action": "created", "issue": {"number": 7}, "comment": {"body": "/deploy abc1234"}}`
	status, answer := deliver(t, url, delivery{id: "t-1", event: "issue_comment", body: []byte(body), secret: "s3cret",
		header: http.Header{"Traceparent": {"00-" + traceID + "-" + sender + "-01"}}})
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v", status, answer)
	}
	rec := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
	if !strings.Contains(rec.Trace, traceID) {
		t.Errorf("the delivery's record has the trace %q, want one of %s", rec.Trace, traceID)
	}

	deploy := &unstructured.Unstructured{}
	deploy.SetAPIVersion(group + "/v1")
	deploy.SetKind("Deploy")
	eventually(t, 60*time.Second, "the deploy handler's second attempt to succeed", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "pr-7"}, deploy); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		done, _, _ := unstructured.NestedBool(deploy.Object, "status", "deployed")
		return done, nil
	})
	if a := deploy.GetAnnotations()[tracing.Annotation]; !strings.Contains(a, traceID) {
		t.Errorf("the source's object carries %s %q, want the delivery's trace %s", tracing.Annotation, a, traceID)
	}
	child := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: "pr-7-record"}, child); err != nil {
		t.Fatal(err)
	}
	if a := child.Annotations[tracing.Annotation]; !strings.Contains(a, traceID) {
		t.Errorf("the child carries %s %q, want the delivery's trace %s", tracing.Annotation, a, traceID)
	}

	// The handler saw the trace, in its environment and its context.
	for _, r := range readTraceRecords(t, out) {
		if !strings.Contains(r.Env, traceID) || r.Env != r.Context {
			t.Errorf("attempt %d got TRACEPARENT %q and the binding context's traceparent %q, want the same, of trace %s", r.Attempt, r.Env, r.Context, traceID)
		}
	}
	runs, err := archive.ListAll(t.Context(), store, archive.Query{Operator: "traced", Handler: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs of deploy, want 2 (a failure, then its retry)", len(runs))
	}
	for _, r := range runs {
		if !strings.Contains(r.Trace, traceID) {
			t.Errorf("run %s (attempt %d) records the trace %q, want one of %s", r.ID, r.Attempt, r.Trace, traceID)
		}
	}

	// The spans: all of the delivery's trace, each hanging from the
	// sender's span or another of the chain.
	var spans []tracingtest.Span
	eventually(t, 30*time.Second, "the spans of both attempts exported", func(ctx context.Context) (bool, error) {
		if err := tp.ForceFlush(ctx); err != nil {
			return false, err
		}
		spans = rcv.Spans(traceID)
		n := 0
		for _, s := range spans {
			if s.Name == "run deploy" {
				n++
			}
		}
		return n == 2, nil
	})
	ids := map[string]tracingtest.Span{}
	for _, s := range spans {
		ids[s.SpanID] = s
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
		if _, ok := ids[s.ParentSpanID]; !ok && s.ParentSpanID != sender {
			t.Errorf("span %q hangs from %s, neither the sender's span nor one of the chain", s.Name, s.ParentSpanID)
		}
	}
	t.Logf("spans: %v", names)
	for _, want := range []string{"POST /hooks/{operator}/{source}", "handle github", "reconcile Deploy", "run deploy"} {
		if !slices.Contains(names, want) {
			t.Errorf("no span %q in the delivery's trace; got %v", want, names)
		}
	}
	for _, s := range spans {
		if s.Name != "run deploy" {
			continue
		}
		switch s.Attributes["opkit.run.attempt"] {
		case "1":
			if !s.Error || s.Attributes["opkit.run.outcome"] != "Failed" {
				t.Errorf("attempt 1's span: error %v, outcome %q; want in error, Failed", s.Error, s.Attributes["opkit.run.outcome"])
			}
		case "2":
			if s.Error || s.Attributes["opkit.run.outcome"] != "Succeeded" {
				t.Errorf("attempt 2's span: error %v (%s), outcome %q; want Succeeded", s.Error, s.Message, s.Attributes["opkit.run.outcome"])
			}
		default:
			t.Errorf("a run span with attempt %q", s.Attributes["opkit.run.attempt"])
		}
	}
	// The run duration histogram holds the trace id as an exemplar.
	if !durationExemplar(t, "traced", "deploy", traceID) {
		t.Errorf("no bucket of opkit_run_duration_seconds{operator=traced,handler=deploy} has the exemplar trace_id %s", traceID)
	}
	if hook := spans[slices.IndexFunc(spans, func(s tracingtest.Span) bool { return s.Name == "POST /hooks/{operator}/{source}" })]; hook.ParentSpanID != sender || hook.Attributes["http.response.status_code"] != "202" {
		t.Errorf("the delivery's span hangs from %s with status %q; want the sender's %s, 202", hook.ParentSpanID, hook.Attributes["http.response.status_code"], sender)
	}
}

// durationExemplar reports whether a bucket of the run duration histogram
// of operator and handler has the exemplar trace_id traceID.
func durationExemplar(t *testing.T, operator, handler, traceID string) bool {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "opkit_run_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operator"] != operator || labels["handler"] != handler {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" && l.GetValue() == traceID {
						return true
					}
				}
			}
		}
	}
	return false
}

// readTraceRecords reads what the trace handler wrote to out.
func readTraceRecords(t *testing.T, out string) []traceRecord {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var recs []traceRecord
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var r traceRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("the handler ran %d times, want 2", len(recs))
	}
	return recs
}
