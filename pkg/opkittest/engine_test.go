package opkittest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

func TestMain(m *testing.M) { opkittest.Main(m) }

// within bounds every wait: generous, for a loaded machine; a passing
// test takes seconds.
const within = time.Minute

// object returns a custom resource of the test operators' group.
func object(env *opkittest.Env, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "opkittest.example.com/v1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": env.Namespace},
		"spec":       spec,
	}}
}

func create(t *testing.T, env *opkittest.Env, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// runs lists the runs q selects, newest first, failing the test on error.
func runs(t *testing.T, eng *opkittest.Engine, q opkittest.Query) []opkittest.Run {
	t.Helper()
	rs, err := eng.Runs(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func logOf(t *testing.T, eng *opkittest.Engine, run opkittest.Run) string {
	t.Helper()
	log, err := eng.Log(t.Context(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

func TestAStubbedHandlerFailsThenSucceedsAndBothRunsAreArchived(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperators(t, "testdata/printer.yaml")
	eng.Stub(t, "printer", "print",
		opkittest.StubResult{Fail: "out of paper", Log: "tray 1 is empty"},
		opkittest.StubResult{Result: map[string]any{"status": map[string]any{"printed": true}}, Log: "printed by the stub"},
	)
	printer := object(env, "Printer", "hello", map[string]any{"text": "hi"})
	create(t, env, printer)

	eng.WaitRun(t, within, opkittest.Query{Name: "hello", Handler: "print", Outcome: opkittest.Succeeded})
	rs := runs(t, eng, opkittest.Query{Name: "hello", Handler: "print"})
	if len(rs) != 2 {
		t.Fatalf("%d runs of print, want 2: %+v", len(rs), rs)
	}
	failed, succeeded := rs[1], rs[0] // newest first
	if failed.Outcome != opkittest.Failed || failed.Attempt != 1 || failed.Error != "out of paper" || failed.Trigger != "create" {
		t.Errorf("first run: %s attempt %d %q on %s; want Failed, attempt 1, the stub's error, on create", failed.Outcome, failed.Attempt, failed.Error, failed.Trigger)
	}
	if succeeded.Attempt != 2 || succeeded.Key != failed.Key {
		t.Errorf("second run: attempt %d, key %s; want attempt 2 of the first's key %s", succeeded.Attempt, succeeded.Key, failed.Key)
	}
	if log := logOf(t, eng, failed); !strings.Contains(log, "tray 1 is empty") {
		t.Errorf("the failed run's log %q, want the stub's line", log)
	}
	if log := logOf(t, eng, succeeded); !strings.Contains(log, "printed by the stub") || strings.Contains(log, "for real") {
		t.Errorf("the succeeded run's log %q, want the stub's line and not the action's", log)
	}
	opkittest.Eventually(t, within, "the stub's result patches the status", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(printer), printer); err != nil {
			return false, err
		}
		printed, _, _ := unstructured.NestedBool(printer.Object, "status", "printed")
		return printed, nil
	})
}

func TestRetryRunsAGivenUpHandlerAgainAndUnstubGivesItsActionBack(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperators(t, "testdata/printer.yaml")
	eng.Stub(t, "printer", "print", opkittest.StubResult{Fail: "jammed", Permanent: true})
	printer := object(env, "Printer", "stuck", map[string]any{"text": "hi"})
	create(t, env, printer)
	gaveUp := eng.WaitRun(t, within, opkittest.Query{Name: "stuck", Handler: "print", Outcome: opkittest.GaveUp})
	if gaveUp.Attempt != 1 || gaveUp.Error != "jammed" {
		t.Errorf("the permanent failure: attempt %d, %q; want attempt 1, the stub's error", gaveUp.Attempt, gaveUp.Error)
	}

	eng.Stub(t, "printer", "print") // every run succeeds
	env.Retry(t, printer)
	eng.WaitRun(t, within, opkittest.Query{Name: "stuck", Handler: "print", Outcome: opkittest.Succeeded})

	eng.Unstub(t, "printer", "print")
	// A merge patch: the engine writes the Printer's status meanwhile, and
	// an update of the object read before would conflict with it.
	if err := env.Client.Patch(t.Context(), printer, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"text":"bye"}}`))); err != nil {
		t.Fatal(err)
	}
	update := eng.WaitRun(t, within, opkittest.Query{Name: "stuck", Handler: "print", Trigger: "update", Outcome: opkittest.Succeeded})
	if log := logOf(t, eng, update); !strings.Contains(log, "printed for real") {
		t.Errorf("the run after Unstub logged %q, want the action's line", log)
	}
}

func TestAdvanceRunsAnEverySlotAtOnce(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperatorsWith(t, opkittest.EngineOptions{FakeClock: true}, "testdata/ticker.yaml")
	create(t, env, object(env, "Ticker", "clock", nil))
	// The object is seen (its first reconcile ran) once its Ready
	// condition is written; before that, a step of the clock could reach
	// no object.
	ticker := object(env, "Ticker", "clock", nil)
	opkittest.Eventually(t, within, "the Ticker is reconciled", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ticker), ticker); err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(ticker.Object, "status", "conditions")
		return len(conditions) > 0, nil
	})
	if rs := runs(t, eng, opkittest.Query{Name: "clock"}); len(rs) > 0 {
		t.Fatalf("runs before the clock moved: %+v", rs)
	}

	stepped := time.Now()
	eng.Advance(t, time.Hour)
	if now := eng.Now(); now.Before(stepped.Add(time.Hour)) {
		t.Errorf("the engine's clock shows %s after Advance(1h) at %s", now, stepped)
	}
	run := eng.WaitRun(t, within, opkittest.Query{Name: "clock", Handler: "tick", Trigger: "schedule", Outcome: opkittest.Succeeded})
	t.Logf("the slot ran %s after Advance", time.Since(stepped).Round(10*time.Millisecond))
	if rs := runs(t, eng, opkittest.Query{Name: "clock", Handler: "tick"}); len(rs) != 1 {
		t.Errorf("%d runs of tick after one hour, want 1: %+v", len(rs), rs)
	}
	if log := logOf(t, eng, run); !strings.Contains(log, "tick") {
		t.Errorf("the scheduled run's log %q, want the handler's line", log)
	}
}

func TestSendDeliversASignedEventThatRunsTheEventHandler(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperators(t, "testdata/hooked.yaml")

	status, answer := eng.Send(t, "hooked", "github", opkittest.Delivery{
		Event:   "push",
		ID:      "delivery-1-" + env.Namespace,
		Payload: map[string]any{"ref": "refs/heads/main", "marker": "sent by " + t.Name()},
	})
	if status != 202 || answer.Outcome != "Pending" || answer.Delivery == "" {
		t.Fatalf("answered %d %+v, want 202, Pending, with the archive's id", status, answer)
	}
	run := eng.WaitRun(t, within, opkittest.Query{Operator: "hooked", Handler: "log", Trigger: "event", Outcome: opkittest.Succeeded})
	if log := logOf(t, eng, run); !strings.Contains(log, "sent by "+t.Name()) || !strings.Contains(log, "delivery-1-"+env.Namespace) {
		t.Errorf("the event run's log %q, want the delivery's payload and id", log)
	}

	// The sender's id again: a replay. An event the filter does not
	// want: filtered out, answered 200.
	if status, answer := eng.Send(t, "hooked", "github", opkittest.Delivery{Event: "push", ID: "delivery-1-" + env.Namespace}); status != 409 || answer.Outcome != "Refused" {
		t.Errorf("a replay answered %d %+v, want 409, Refused", status, answer)
	}
	if status, answer := eng.Send(t, "hooked", "github", opkittest.Delivery{Event: "issues"}); status != 200 || answer.Outcome != "Refused" || !strings.Contains(answer.Reason, "filtered out") {
		t.Errorf("a filtered-out event answered %d %+v, want 200, Refused, filtered out", status, answer)
	}
	if rs := runs(t, eng, opkittest.Query{Operator: "hooked"}); len(rs) != 1 {
		t.Errorf("%d runs, want 1 (the refused deliveries run nothing): %+v", len(rs), rs)
	}
}

func TestParallelTestsEachSeeOnlyTheirOwnRuns(t *testing.T) {
	// Two tests run the same operator, each on an object of the same
	// name in its own namespace; once both ran, each engine's archive
	// holds the runs of its own namespace only. They wait for each other,
	// so they need -parallel 2 or more (the default is GOMAXPROCS).
	var handled sync.WaitGroup
	handled.Add(2)
	both := make(chan struct{})
	go func() { handled.Wait(); close(both) }()
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var once sync.Once
			done := func() { once.Do(handled.Done) }
			defer done() // also when the test fails: the other stops waiting
			env := opkittest.New(t)
			eng := env.RunOperators(t, "testdata/printer.yaml")
			create(t, env, object(env, "Printer", "same", map[string]any{"text": name}))
			eng.WaitRun(t, within, opkittest.Query{Name: "same", Handler: "print", Outcome: opkittest.Succeeded})
			done()
			select {
			case <-both:
			case <-time.After(within):
				t.Fatal("the other parallel test did not run its handler (is -parallel 1?)")
			}
			// What an engine acting in every namespace would have run by
			// now, given a moment more.
			deadline := time.Now().Add(time.Second)
			for {
				for _, r := range runs(t, eng, opkittest.Query{}) {
					if r.Namespace != env.Namespace {
						t.Fatalf("the engine of %s ran %s for %s", env.Namespace, r.Handler, r.Object())
					}
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if rs := runs(t, eng, opkittest.Query{Name: "same"}); len(rs) != 1 {
				t.Errorf("%d runs for the Printer named same, want 1: %+v", len(rs), rs)
			}
		})
	}
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends
// the goroutine, as a failed test's would.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestAClusterScopedOperatorRunsOnlyWithAllNamespaces(t *testing.T) {
	env := opkittest.New(t)
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.RunOperators(rec, "testdata/globe.yaml")
	}()
	<-done
	if !strings.Contains(rec.fatal, "cluster-scoped") || !strings.Contains(rec.fatal, "AllNamespaces: true") {
		t.Fatalf("RunOperators of a cluster-scoped operator: %q; want it refused, saying what to do", rec.fatal)
	}

	eng := env.RunOperatorsWith(t, opkittest.EngineOptions{AllNamespaces: true}, "testdata/globe.yaml")
	globe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "opkittest.example.com/v1",
		"kind":       "Globe",
		"metadata":   map[string]any{"name": env.Namespace}, // unique in the cluster
	}}
	create(t, env, globe)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), globe) })
	eng.WaitRun(t, within, opkittest.Query{Name: env.Namespace, Handler: "spin", Outcome: opkittest.Succeeded})
}
