package opkittest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/scenario/runner"
	"github.com/opkit-dev/opkit/internal/stack"
)

// Run is one handler run as the archive records it.
type Run = archive.Run

// Query selects runs; zero fields do not filter. Limit and Cursor are
// ignored by Engine.Runs, which reads every page.
type Query = archive.Query

// Outcome is how a run ended, or Running.
type Outcome = archive.Outcome

// The outcomes of a run.
const (
	Running   = archive.Running
	Succeeded = archive.Succeeded
	Failed    = archive.Failed
	GaveUp    = archive.GaveUp
	Cancelled = archive.Cancelled
	Skipped   = archive.Skipped
)

// Engine is an opkit engine running for one test, with its archive.
type Engine struct {
	env   *Env
	eng   *engine.Engine
	defs  []*definition.Definition
	store *archive.SQLite
	stubs *engine.Stubs
	clock *clocktesting.FakeClock // nil: the real clock
	stop  func()
}

// EngineOptions configures [Env.RunOperatorsWith]. The zero value is what
// [Env.RunOperators] runs with.
type EngineOptions struct {
	// FakeClock runs the engine on a fake clock, which starts at the real
	// time and moves only when [Engine.Advance] moves it: schedules,
	// requeues (requeueAfter) and the retry delays of failed runs come due
	// when the test says, not after real time. Timeouts, leases and the
	// times a run's start and end are recorded with keep real time.
	// Defaults to false: the real clock.
	FakeClock bool
	// AllNamespaces makes the engine act in every namespace, as `opkit
	// run` does, instead of the test's namespace alone. It is for an
	// operator whose custom resource or watched kind is cluster-scoped,
	// which an engine of one namespace refuses. Such an engine acts on
	// every object of its operators' kinds, those of other tests too: a
	// test using it must not run in parallel with another test running
	// the same operators. Defaults to false: Env.Namespace only.
	AllNamespaces bool
}

// RunOperators starts an engine on the plane with a fresh archive (SQLite
// in t.TempDir) and applies the operator definitions in files, as `opkit
// run` would: each file may hold several, separated by "---". It returns
// once every definition is applied (its CRD established, its controller
// started), and stops the engine when the test ends, before the test's
// namespace is deleted. Exec handlers run in their definition file's
// directory; the pods of job handlers tolerate the plane's dev node. A
// definition that does not load, compile or apply fails the test with the
// reason.
//
// The engine acts in env.Namespace alone (engines of parallel tests never
// act on each other's objects): it sees no custom resource, child or
// related object elsewhere, a watch (spec.watch) watches env.Namespace
// whatever namespaces its definition names, and an operator whose custom
// resource or watched kind is cluster-scoped is refused (see
// EngineOptions.AllNamespaces). It listens for webhook deliveries (Send)
// on a free port of 127.0.0.1 when a definition has sources.
//
// It is RunOperatorsWith with the zero EngineOptions.
func (env *Env) RunOperators(t testing.TB, files ...string) *Engine {
	t.Helper()
	return env.RunOperatorsWith(t, EngineOptions{}, files...)
}

// RunOperatorsWith is RunOperators with options: a fake clock, or an
// engine for every namespace.
func (env *Env) RunOperatorsWith(t testing.TB, opts EngineOptions, files ...string) *Engine {
	t.Helper()
	defs, err := definition.CompileFiles(files...)
	if err != nil {
		t.Fatalf("opkittest: %v", err)
	}
	eopts := engine.Options{
		Config:         env.Config,
		Namespace:      env.Namespace,
		Stubs:          &engine.Stubs{},
		JobTolerations: []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	if opts.AllNamespaces {
		eopts.Namespace = ""
	}
	for _, d := range defs {
		for _, w := range d.Warnings {
			t.Logf("opkittest: warning: %v", w)
		}
		if eopts.Namespace != "" && d.Owns() && d.Operator.Spec.Resource.Scope == v1alpha1.ClusterScoped {
			t.Fatalf("opkittest: %s: operator %s: its %s is cluster-scoped, and the engine acts in the test's namespace only: run it with RunOperatorsWith(t, opkittest.EngineOptions{AllNamespaces: true}, ...), in a test that does not run in parallel with another running it", d.Source, d.Operator.Name, d.GVK.Kind)
		}
	}
	stack.ListenOnLoopback(&eopts, defs...)
	var clk *clocktesting.FakeClock
	if opts.FakeClock {
		clk = clocktesting.NewFakeClock(time.Now())
		eopts.Clock = clk
	}
	// The archive is the test's: it stays readable once the engine
	// stopped, until the test's end.
	store, err := archive.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatalf("opkittest: opening the archive: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() }) // runs after the engine stopped
	s, err := stack.Start(context.WithoutCancel(t.Context()), stack.Options{Engine: eopts, Store: store})
	if err != nil {
		t.Fatalf("opkittest: creating the engine: %v", err)
	}
	var once sync.Once
	var stopped atomic.Bool
	stop := func() {
		stopped.Store(true)
		once.Do(func() {
			if err := s.Stop(); err != nil {
				t.Errorf("opkittest: engine: %v", err)
			}
		})
	}
	// At the test's end, before its namespace goes: the custom resources
	// are deleted while the engine runs (delete handlers run), then
	// finalizers it could not remove are, so that the namespace goes.
	t.Cleanup(func() {
		within := 10 * time.Second
		if stopped.Load() { // Stop was called: no delete handler can run
			within = 0
		}
		runner.CleanUp(env.Client, defs, env.Namespace, within, stop)
	})
	if err := s.Apply(t.Context(), defs...); err != nil {
		t.Fatalf("opkittest: %v", err)
	}
	return &Engine{env: env, eng: s.Engine, defs: defs, store: store, stubs: eopts.Stubs, clock: clk, stop: stop}
}

// Stop stops the engine and waits until it stopped; the archive stays
// readable. The test's end does it too: call it to test what happens while
// no engine runs.
func (e *Engine) Stop() { e.stop() }

// Runs returns the archived runs that q selects, newest first.
func (e *Engine) Runs(ctx context.Context, q Query) ([]Run, error) {
	runs, err := archive.ListAll(ctx, e.store, q)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return runs, nil
}

// WaitRun waits until the archive has a run that q selects and returns the
// newest one; it fails the test when within, scaled (Scaled), passes
// first, listing the runs of q's operator, handler and object with other
// outcomes.
func (e *Engine) WaitRun(t testing.TB, within time.Duration, q Query) Run {
	t.Helper()
	var found Run
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, Scaled(within), true, func(ctx context.Context) (bool, error) {
		runs, err := e.Runs(ctx, q)
		if err != nil || len(runs) == 0 {
			return false, err
		}
		found = runs[0]
		return true, nil
	})
	if err != nil {
		others := q
		others.Outcome, others.Failed = "", false
		runs, _ := e.Runs(context.WithoutCancel(t.Context()), others)
		t.Fatalf("opkittest: no run %s within %s: %v; runs without the outcome filter: %s", describe(q), scaledText(within), err, summary(runs))
	}
	return found
}

// Log returns a run's log, as much as the archive kept.
func (e *Engine) Log(ctx context.Context, id string) (string, error) {
	l, err := e.store.Logs(ctx, id, 0)
	if err != nil {
		return "", fmt.Errorf("reading the log of run %s: %w", id, err)
	}
	return string(l.Data), nil
}

// describe names the fields q filters on.
func describe(q Query) string {
	s := fmt.Sprintf("%+v", struct {
		Operator, Handler, Namespace, Name, Trigger string
		Outcome                                     Outcome
		Failed                                      bool
	}{q.Operator, q.Handler, q.Namespace, q.Name, q.Trigger, q.Outcome, q.Failed})
	return s
}

// summary lists runs one per line: handler, object, trigger, outcome, error.
func summary(runs []Run) string {
	if len(runs) == 0 {
		return "none"
	}
	s := ""
	for _, r := range runs {
		s += fmt.Sprintf("\n  %s %s %s/%s %s attempt %d: %s %s", r.Operator, r.Handler, r.Namespace, r.Name, r.Trigger, r.Attempt, r.Outcome, r.Error)
	}
	return s
}
