package usermodule_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

// A stub fails the first announcement; its retry waits a second by the
// engine's fake clock, which only Advance moves.
func TestAFailedAnnouncementIsRetriedWhenTheClockMoves(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperatorsWith(t, opkittest.EngineOptions{FakeClock: true}, "operator.yaml")
	eng.Stub(t, "note", "announce",
		opkittest.StubResult{Fail: "the channel is down"},
		opkittest.StubResult{Log: "announced by the stub"},
	)
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "usermodule.example.com/v1",
		"kind":       "Note",
		"metadata":   map[string]any{"name": "retried", "namespace": env.Namespace},
		"spec":       map[string]any{"text": "hello again"},
	}}
	if err := env.Client.Create(t.Context(), note); err != nil {
		t.Fatal(err)
	}
	q := opkittest.Query{Namespace: env.Namespace, Name: "retried", Handler: "announce"}

	failed := eng.WaitRun(t, time.Minute, opkittest.Query{Namespace: q.Namespace, Name: q.Name, Handler: q.Handler, Outcome: opkittest.Failed})
	if failed.Error != "the channel is down" || failed.NextRetryAt.IsZero() {
		t.Fatalf("the first run: %q, next retry at %s; want the stub's error and a retry", failed.Error, failed.NextRetryAt)
	}
	eng.Advance(t, time.Minute) // past the retry's delay (1s by default)

	q.Outcome = opkittest.Succeeded
	run := eng.WaitRun(t, time.Minute, q)
	if run.Attempt != 2 {
		t.Errorf("the run after Advance is attempt %d, want 2", run.Attempt)
	}
	log, err := eng.Log(t.Context(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "announced by the stub") || strings.Contains(log, "a new note") {
		t.Errorf("the stubbed run's log %q, want the stub's line and not the handler's", log)
	}
}
