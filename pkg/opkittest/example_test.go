package opkittest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

// A test package calls Main from its TestMain, New in each test, and
// RunOperators for the definitions under test. It needs the local control
// plane, so it has no output to check here: testdata/usermodule runs the
// same test in `make test`.
func Example() {
	// func TestMain(m *testing.M) { opkittest.Main(m) }
	test := func(t *testing.T) {
		env := opkittest.New(t)
		eng := env.RunOperators(t, "operator.yaml")
		// ... create a Note named hello in env.Namespace with env.Client ...
		opkittest.Eventually(t, time.Minute, "the Note's ConfigMap exists", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "hello-note"}, &corev1.ConfigMap{})
			return err == nil, client.IgnoreNotFound(err)
		})
		run := eng.WaitRun(t, time.Minute, opkittest.Query{Name: "hello", Handler: "announce", Outcome: opkittest.Succeeded})
		t.Logf("announce ran on %s", run.Trigger)
	}
	_ = test
}

// A stub fails the handler's first run; the retry waits by the engine's
// fake clock, which Advance moves past the retry's delay.
func ExampleEngine_Stub() {
	test := func(t *testing.T) {
		env := opkittest.New(t)
		eng := env.RunOperatorsWith(t, opkittest.EngineOptions{FakeClock: true}, "operator.yaml")
		eng.Stub(t, "note", "announce",
			opkittest.StubResult{Fail: "the channel is down"},
			opkittest.StubResult{Result: map[string]any{"status": map[string]any{"announced": true}}},
		)
		// ... create a Note named hello in env.Namespace ...
		eng.WaitRun(t, time.Minute, opkittest.Query{Name: "hello", Handler: "announce", Outcome: opkittest.Failed})
		eng.Advance(t, time.Minute)
		eng.WaitRun(t, time.Minute, opkittest.Query{Name: "hello", Handler: "announce", Outcome: opkittest.Succeeded})
	}
	_ = test
}

// A GitHub delivery, signed with the source's secret; its handlers on
// event then run.
func ExampleEngine_Send() {
	test := func(t *testing.T) {
		env := opkittest.New(t)
		eng := env.RunOperators(t, "operator.yaml")
		status, answer := eng.Send(t, "deployer", "github", opkittest.Delivery{
			Event:   "issue_comment",
			Payload: map[string]any{"action": "created", "comment": map[string]any{"body": "/deploy abc1234"}},
		})
		if status != http.StatusAccepted {
			t.Fatalf("the delivery was answered %d: %s", status, answer.Reason)
		}
		eng.WaitRun(t, time.Minute, opkittest.Query{Operator: "deployer", Trigger: "event", Outcome: opkittest.Succeeded})
	}
	_ = test
}
