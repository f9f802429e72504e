// Package runner runs test scenarios (package scenario) against a
// Kubernetes API: the engine of `opkit test`.
//
// # Contract
//
//   - Each scenario runs in a namespace of its own, made for it, with an
//     engine of its own that acts in that namespace only
//     (engine.Options.Namespace), its own archive (SQLite in a temporary
//     directory), its own stubs and, when it has an advance step, its own
//     fake clock. Scenarios therefore run in parallel (Options.Parallel)
//     without seeing each other, even when they run the same operators.
//   - Steps run in order; the first that fails ends the scenario. An expect
//     step is polled (every 100ms) until it holds or its timeout passes, in
//     real time; every other step acts once.
//   - An apply, patch or delete step with Refused passes when the API
//     server's checks refuse its request (400, 403 or 422) with a message
//     containing Refused.Message, and fails when it is accepted; without
//     Refused, a refusal fails the step, with the API server's message.
//   - A failure says which step (file:line), what was expected, what was
//     found (for an object, each field that differs), and lists the
//     scenario's handler runs, with the logs of those that did not succeed
//     and of those the step named.
//   - At the end of a scenario, passed or failed, the custom resources it
//     left are deleted while its engine still runs (its delete handlers
//     run, stubbed or not), for up to 10s; then the engine stops, opkit's
//     finalizers left on them are removed, and the namespace is deleted
//     without waiting.
//   - Run never passes user data through a shell; exec handlers run as the
//     engine runs them.
package runner

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/scenario"
	"github.com/opkit-dev/opkit/internal/stack"
)

// Options configures Run.
type Options struct {
	// Config is the client configuration of the cluster. Required.
	Config *rest.Config
	// Parallel is how many scenarios run at once. Defaults to 1.
	Parallel int
	// Match, when set, selects the scenarios whose name it matches.
	Match *regexp.Regexp
	// Verbose reports every step as it runs, not only failures.
	Verbose bool
	// Out receives the report. Required.
	Out io.Writer
	// JobTolerations are added to the pods of job handlers (the dev
	// node's, on the local control plane).
	JobTolerations []corev1.Toleration
	// TimeoutScale multiplies every expect step's timeout, for a loaded
	// machine; below 1 counts as 1.
	TimeoutScale float64
}

// Result is how one scenario ended.
type Result struct {
	Scenario *scenario.Scenario
	// Skipped: Options.Match did not select it.
	Skipped  bool
	Duration time.Duration
	// Failure is why it failed ("" when it passed): the failing step,
	// what was expected and found, and the runs involved.
	Failure string
	// Output is what -v printed of it.
	Output string
}

// Passed reports whether the scenario ran and passed.
func (r *Result) Passed() bool { return !r.Skipped && r.Failure == "" }

// Run runs the scenarios and reports each on Options.Out as it ends, in
// the style of go test. It returns every result, in the scenarios' order.
func Run(ctx context.Context, opts Options, scenarios []*scenario.Scenario) ([]*Result, error) {
	if opts.Parallel < 1 {
		opts.Parallel = 1
	}
	cl, err := newCluster(opts.Config)
	if err != nil {
		return nil, err
	}
	results := make([]*Result, len(scenarios))
	slots := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	var out sync.Mutex
	for i, sc := range scenarios {
		results[i] = &Result{Scenario: sc}
		if opts.Match != nil && !opts.Match.MatchString(sc.Name) {
			results[i].Skipped = true
			continue
		}
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				results[i].Failure = "not run: " + ctx.Err().Error()
				return
			}
			defer func() { <-slots }()
			res := results[i]
			start := time.Now()
			r := &scenarioRun{opts: opts, cl: cl, sc: sc}
			res.Failure = r.run(ctx)
			res.Duration = time.Since(start)
			res.Output = r.log.String()
			out.Lock()
			defer out.Unlock()
			report(opts.Out, res, opts.Verbose)
		})
	}
	wg.Wait()
	return results, nil
}

// cluster is what the scenarios share: clients and the kinds the API
// serves.
type cluster struct {
	config *rest.Config
	client client.Client
	mapper *restmapper.DeferredDiscoveryRESTMapper
	disc   discovery.CachedDiscoveryInterface
}

func newCluster(cfg *rest.Config) (*cluster, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = -1, 0 // the API server's fairness protects it
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(disc)
	c, err := client.New(cfg, client.Options{Mapper: mapper})
	if err != nil {
		return nil, err
	}
	return &cluster{config: cfg, client: c, mapper: mapper, disc: disc}, nil
}

// scenarioRun is one scenario as it runs.
type scenarioRun struct {
	opts Options
	cl   *cluster
	sc   *scenario.Scenario

	ns     string
	defs   []*definition.Definition
	eng    *engine.Engine
	store  archive.Store
	clock  *clocktesting.FakeClock // nil without an advance step
	stubs  *engine.Stubs
	log    strings.Builder
	named  []archive.Query // the runs a failing step named, whose logs the report shows
	client client.Client
}

// logf adds a line to the scenario's verbose output.
func (r *scenarioRun) logf(format string, args ...any) {
	fmt.Fprintf(&r.log, "    "+format+"\n", args...)
}

// run runs the scenario and returns why it failed, or "".
func (r *scenarioRun) run(ctx context.Context) string {
	stop, err := r.setUp(ctx)
	defer r.tearDown(stop)
	if err != nil {
		return fmt.Sprintf("%s:%d: setting up: %v", r.sc.File, r.sc.Line, err)
	}
	for i := range r.sc.Steps {
		step := &r.sc.Steps[i]
		start := time.Now()
		r.named = nil
		err := r.step(ctx, step)
		r.logf("%s:%d: %s (%s)%s", r.sc.File, step.Line, describe(step), time.Since(start).Round(time.Millisecond), okOrFail(err))
		if err != nil {
			return r.failure(step, err)
		}
	}
	return ""
}

func okOrFail(err error) string {
	if err != nil {
		return ": FAIL"
	}
	return ""
}

// setUp makes the namespace, starts the engine and applies the
// definitions; stop stops what it started.
func (r *scenarioRun) setUp(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	r.ns = namespaceName(r.sc.Name)
	r.client = r.cl.client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: map[string]string{"opkit.dev/test": "scenario"}}}
	if err := r.client.Create(ctx, ns); err != nil {
		return stop, fmt.Errorf("creating the namespace %s: %w", r.ns, err)
	}
	r.logf("namespace %s", r.ns)
	r.defs, err = definition.CompileFiles(r.sc.Operators...)
	if err == nil {
		err = definition.Clashes(r.defs)
	}
	if err != nil {
		return stop, err
	}
	dir, err := os.MkdirTemp("", "opkit-test-")
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	var clk clock.Clock = clock.RealClock{}
	for _, s := range r.sc.Steps {
		if s.Advance != nil {
			r.clock = clocktesting.NewFakeClock(time.Now())
			clk = r.clock
			break
		}
	}
	r.stubs = &engine.Stubs{}
	eopts := engine.Options{
		Config: r.cl.config, Namespace: r.ns, Clock: clk, Stubs: r.stubs, JobTolerations: r.opts.JobTolerations,
		// The scenario's send steps play a consumed source's messages.
		ConsumeNothing: true,
	}
	// The plane's API server calls the admission handlers on loopback;
	// their certificates are kept in the scenario's namespace.
	stack.ListenOnLoopback(&eopts, r.defs...)
	// The engine outlives ctx's cancellation until stop: the cleanup runs
	// the delete handlers first.
	s, err := stack.Start(context.WithoutCancel(ctx), stack.Options{Engine: eopts, Archive: filepath.Join(dir, "runs.db")})
	if err != nil {
		return stop, err
	}
	r.eng, r.store = s.Engine, s.Archive
	var once sync.Once
	stopEngine := func() {
		once.Do(func() {
			if err := s.Stop(); err != nil {
				r.logf("the engine stopped: %v", err)
			}
		})
	}
	stops = append([]func(){stopEngine}, stops...)
	if err := s.Apply(ctx, r.defs...); err != nil {
		return stop, err
	}
	stopAll := stop
	return func() {
		CleanUp(r.client, r.defs, r.ns, 10*time.Second, stopEngine)
		stopAll()
	}, nil
}

// tearDown deletes what the scenario left and stops its engine.
func (r *scenarioRun) tearDown(stop func()) {
	if stop != nil {
		stop()
	}
	if r.ns != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
		if err := r.cl.client.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			r.logf("deleting the namespace %s: %v", r.ns, err)
		}
	}
}

// namespaceName is a new namespace's name for a scenario: its name, made a
// DNS label, and a random suffix.
func namespaceName(name string) string {
	var b strings.Builder
	b.WriteString("test-")
	dash := false
	for _, c := range strings.ToLower(name) {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		switch {
		case ok:
			b.WriteRune(c)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	s := strings.TrimRight(b.String(), "-") + "-"
	for range 5 {
		s += string(letters[rand.IntN(len(letters))])
	}
	return s
}

// errStep is a step that failed with a report of its own: expected,
// found.
type errStep struct {
	what     string // the step's check, e.g. "Pod hello-print matches"
	expected string
	found    string
}

func (e *errStep) Error() string {
	msg := e.what
	if e.expected != "" {
		msg += "\n  expected: " + indent(e.expected)
	}
	if e.found != "" {
		msg += "\n  found:    " + indent(e.found)
	}
	return msg
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n            ")
}
