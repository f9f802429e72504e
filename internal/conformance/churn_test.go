package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	krand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/source/natsjs/natstest"
	"github.com/opkit-dev/opkit/internal/stack"
)

var (
	flagChurnFor    = flag.Duration("churn.duration", 45*time.Second, "how long TestChurn churns (make churn: an hour); the engine's goroutines, heap and open files are sampled at a sixth, a half and the end, and must be flat from a duration of 30m")
	flagChurnRate   = flag.Float64("churn.rate", 2, "TestChurn's steps a second: a change, a replacement, a webhook delivery or a NATS message")
	flagChurnObjs   = flag.Int("churn.objects", 30, "how many objects TestChurn keeps")
	flagChurnSeed   = flag.Uint64("churn.seed", 0, "TestChurn's seed; 0: one from the clock, logged")
	flagChurnReport = flag.String("churn.report", "", "write TestChurn's samples and counts to this file (make churn)")
)

// The environment variables of TestChurn's engine process and handler.
const (
	// churnEngineEnv names the churn's directory: operator.yaml in;
	// runs.db, ready.<start> and samples.jsonl out.
	churnEngineEnv = "OPKIT_CHURN_ENGINE"
	// churnHandlerEnv, set to 1, makes this binary the churn's handler.
	churnHandlerEnv = "OPKIT_CHURN_HANDLER"
	// churnFlatFrom is the churn from which the samples must be flat:
	// shorter ones are still warming up (the first sample is at a sixth).
	churnFlatFrom = 30 * time.Minute
	// churnFlat is how far the samples may be apart: the largest at most
	// this much over the smallest.
	churnFlat = 0.10
)

// churnOperator is the churn's Operator: Churn objects whose handlers fail
// spec.fails attempts of each change before they succeed (a handler in
// mode Serve, one a process per run, one on delete that holds a
// finalizer), a webhook whose deliveries change the objects and a NATS
// stream, both heard by a Serve handler failing payload.fails attempts.
const churnOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: churn}
spec:
  resource:
    group: churn.conformance.opkit.dev
    kind: Churn
    versions:
    - name: v1
      schema:
        type: object
        properties:
          a: {type: string}
          fails: {type: string}
      statusSchema:
        properties:
          seen: {type: string}
  sources:
  - name: hook
    webhook:
      bearer:
        secretRef: {namespace: NS, name: churn-hook, key: token}
      deliveryHeader: X-Churn-Delivery
    object:
      metadata: {name: "${payload.name}", namespace: NS}
      spec:
        a: "${payload.a}"
        fails: "${payload.fails}"
  - name: msgs
    nats:
      url: NATSURL
      stream: CHURN
      deliverPolicy: All
  handlers:
  - name: note
    "on": [update]
    fields: [spec.a]
    RETRY
    exec: {command: [HANDLER], env: [ENV]}
  - name: track
    "on": [create, update]
    RETRY
    exec: {command: [HANDLER], mode: Serve, processes: 1, env: [ENV]}
  - name: bye
    "on": [delete]
    RETRY
    exec: {command: [HANDLER], env: [ENV]}
  - name: heard
    "on": [event]
    RETRY
    exec: {command: [HANDLER], mode: Serve, processes: 1, env: [ENV]}
`

// sample is what the churn's engine process says of itself, after a
// garbage collection, once the churn is quiet.
type sample struct {
	At         time.Duration `json:"at"` // since the churn began (set by the test)
	Goroutines int           `json:"goroutines"`
	// Heap is the live heap after a collection (/gc/heap/live:bytes).
	Heap int64 `json:"heap"`
	// Events is the part of Heap that client-go's Events recorder holds
	// (estimated from the heap profile): it keeps each Event it posted
	// for 6 to 12 minutes, to merge the repeats that follow into a
	// series, so the heap holds the last minutes' Events by design, more
	// or fewer as a sample falls in that window (and a stack's start
	// begins an empty one). The flatness asked is of Heap less Events.
	Events int64 `json:"events"`
	// FDs are the process's open files (pipes and sockets included).
	FDs int `json:"fds"`
	// RSS is the resident memory, for the report (not required flat:
	// the runtime returns memory to the system lazily).
	RSS int64 `json:"rss"`
	// Archive is the size of runs.db with its write-ahead log (set by
	// the test); Runs the runs it holds then.
	Archive int64 `json:"archive"`
	Runs    int   `json:"runs"`
}

// TestChurn is the long soak beside the model's (make churn): objects
// created, changed and deleted, webhook deliveries and NATS messages
// arriving, handlers failing and retried, the engine's stack stopped and
// started again in its process now and then, for -churn.duration; the
// engine process's goroutines, live heap and open files are sampled at a
// sixth, a half and the end, each time once the churn is quiet, and must
// stay within 10% of each other (from 30 minutes on; shorter churns check
// that everything converges). Everything converges at each sample:
// every object's last change handled, every delivery handled, nothing
// given up.
func TestChurn(t *testing.T) {
	env := clustertest.New(t)
	seed := *flagChurnSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("churn seed %d for %s at %.1f steps/s over %d objects", seed, *flagChurnFor, *flagChurnRate, *flagChurnObjs)
	c := &churn{
		t: t, env: env, r: rand.New(rand.NewPCG(seed, 0)),
		dir: t.TempDir(), ns: "churn-" + krand.String(6), live: map[string]bool{},
	}
	c.setUp()
	defer c.stop()
	began := time.Now()
	restartEvery := max(*flagChurnFor/7, 10*time.Second)
	nextRestart := began.Add(restartEvery)
	var samples []sample
	for _, at := range []time.Duration{*flagChurnFor / 6, *flagChurnFor / 2, *flagChurnFor} {
		for time.Since(began) < at {
			if time.Now().After(nextRestart) {
				c.restart()
				nextRestart = time.Now().Add(restartEvery)
			}
			c.step()
			time.Sleep(time.Duration(float64(time.Second) / *flagChurnRate))
		}
		s := c.sample()
		s.At = time.Since(began).Round(time.Second)
		samples = append(samples, s)
		t.Logf("at %s: %d goroutines, heap %d KiB (Events recorder %d KiB), %d files, RSS %d MiB; archive %d KiB, %d runs", s.At, s.Goroutines, s.Heap>>10, s.Events>>10, s.FDs, s.RSS>>20, s.Archive>>10, s.Runs)
	}
	c.stop()
	report := c.report(samples)
	t.Log(report)
	profiles := sync.OnceValue(c.keepProfiles) // copied once, said where
	if *flagChurnReport != "" {
		if err := os.WriteFile(*flagChurnReport, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("the engine's heap profiles at each sample: %s", profiles())
	}
	if *flagChurnFor >= churnFlatFrom {
		for _, m := range []struct {
			what string
			of   func(sample) int64
		}{
			{"goroutines", func(s sample) int64 { return int64(s.Goroutines) }},
			{"live heap less the Events recorder's", func(s sample) int64 { return s.Heap - s.Events }},
			{"open files", func(s sample) int64 { return int64(s.FDs) }},
		} {
			vs := make([]int64, len(samples))
			for i, s := range samples {
				vs[i] = m.of(s)
			}
			if lo, hi := slices.Min(vs), slices.Max(vs); float64(hi) > float64(lo)*(1+churnFlat) {
				t.Errorf("the engine's %s grew: %v at %v (more than %.0f%% apart); its heap profiles at each sample: %s", m.what, vs, sampleTimes(samples), churnFlat*100, profiles())
			}
		}
	}
}

// keepProfiles copies the engine's heap profiles (heap.<n>.pprof, one a
// sample) beside the report, or to the test's log directory, and says
// where: go tool pprof -base churn-heap.1.pprof churn-heap.3.pprof shows
// what grew.
func (c *churn) keepProfiles() string {
	to := filepath.Dir(*flagChurnReport)
	if *flagChurnReport == "" {
		to = c.t.ArtifactDir()
	}
	profiles, _ := filepath.Glob(filepath.Join(c.dir, "heap.*.pprof"))
	for _, p := range profiles {
		data, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(to, "churn-"+filepath.Base(p)), data, 0o644)
		}
		if err != nil {
			return err.Error()
		}
	}
	return filepath.Join(to, "churn-heap.*.pprof")
}

func sampleTimes(ss []sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.At
	}
	return out
}

// churn is TestChurn's driver: the engine process it started and what it
// has done to the cluster.
type churn struct {
	t   testing.TB
	env *clustertest.Env
	r   *rand.Rand
	dir string
	ns  string

	nats *natstest.Server
	proc *exec.Cmd
	// waited is closed once proc ended; starts counts the stack's starts
	// in it, hooks is the current start's hooks listener.
	waited chan struct{}
	starts int
	hooks  string
	store  archive.Store

	live              map[string]bool // the objects that should exist
	objects, values   int             // names and values given so far
	posted, published int             // webhook deliveries, NATS messages
	changes, replaced int
}

func (c *churn) setUp() {
	t := c.t
	ctx := t.Context()
	c.nats = natstest.Start(t, natstest.Options{Stream: "CHURN", Subjects: []string{"churn.>"}})
	handler := strconv.Quote(clustertest.HandlerBinary(t))
	def := strings.NewReplacer("NS", c.ns, "NATSURL", c.nats.URL(), "HANDLER", handler, "ENV", fmt.Sprintf("{name: %s, value: \"1\"}", churnHandlerEnv),
		"RETRY", "retry: {maxAttempts: 4, initialDelay: 100ms, maxDelay: 1s, factor: 2, jitter: 0}").Replace(churnOperator)
	if err := os.WriteFile(filepath.Join(c.dir, "operator.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "churn-hook"}, StringData: map[string]string{"token": "churn-token"}},
	} {
		if err := c.env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.Create(filepath.Join(c.dir, "engine.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	c.proc = exec.Command(os.Args[0])
	c.proc.Env = append(os.Environ(), churnEngineEnv+"="+c.dir, namespaceEnv+"="+c.ns, "KUBECONFIG="+clustertest.Cluster(t).KubeconfigPath())
	c.proc.Stdout, c.proc.Stderr = log, log
	c.proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.proc.Start(); err != nil {
		t.Fatal(err)
	}
	c.waited = make(chan struct{})
	go func() { _ = c.proc.Wait(); close(c.waited) }()
	c.ready()
	store, err := archive.OpenSQLite(context.WithoutCancel(ctx), filepath.Join(c.dir, "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.store = store
	t.Cleanup(func() { _ = store.Close() })
	for range *flagChurnObjs {
		c.create()
	}
}

// ready waits for the engine's next start to have applied the definition.
func (c *churn) ready() {
	c.starts++
	file := filepath.Join(c.dir, "ready."+strconv.Itoa(c.starts))
	clustertest.Eventually(c.t, 2*time.Minute, "the churn's engine applies its definition", func(context.Context) (bool, error) {
		select {
		case <-c.waited:
			return false, fmt.Errorf("the engine process ended: %s", engineLogTail(c.dir))
		default:
		}
		addr, err := os.ReadFile(file)
		c.hooks = string(addr)
		return err == nil, nil
	})
}

// restart stops the engine's stack and starts it again, in its process.
func (c *churn) restart() {
	if err := c.proc.Process.Signal(syscall.SIGUSR2); err != nil {
		c.t.Fatal(err)
	}
	c.ready()
}

// stop ends the engine process, once, and fails the test if it raced,
// panicked or did not stop within a minute of SIGTERM.
func (c *churn) stop() {
	if c.proc == nil {
		return
	}
	proc := c.proc
	c.proc = nil
	_ = proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.waited:
	case <-time.After(clustertest.Scaled(time.Minute)):
		_ = proc.Process.Kill()
		<-c.waited
		c.t.Errorf("the churn's engine did not stop within %s of SIGTERM", clustertest.Scaled(time.Minute))
	}
	if !proc.ProcessState.Success() {
		c.t.Errorf("the churn's engine exited %v: %s", proc.ProcessState, engineLogTail(c.dir))
	}
	data, _ := os.ReadFile(filepath.Join(c.dir, "engine.log"))
	if failure := engineFailure(string(data)); failure != "" {
		c.t.Errorf("the churn's engine: %s", failure)
	}
}

// step does one thing a cluster's users and senders do.
func (c *churn) step() {
	switch p := c.r.Float64(); {
	case p < 0.35:
		c.change(c.pick())
	case p < 0.50:
		c.replace()
	case p < 0.75:
		c.post(c.pick())
	default:
		c.publish()
	}
}

func (c *churn) pick() string {
	names := make([]string, 0, len(c.live))
	for name := range c.live {
		names = append(names, name)
	}
	slices.Sort(names)
	return names[c.r.IntN(len(names))]
}

// spec is a new value of a and how many attempts of its handlers fail.
func (c *churn) spec() map[string]any {
	c.values++
	return map[string]any{"a": "v" + strconv.Itoa(c.values), "fails": strconv.Itoa(c.r.IntN(3))}
}

func (c *churn) object(name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("churn.conformance.opkit.dev/v1")
	obj.SetKind("Churn")
	obj.SetNamespace(c.ns)
	obj.SetName(name)
	return obj
}

func (c *churn) create() {
	c.objects++
	obj := c.object("obj-" + strconv.Itoa(c.objects))
	obj.Object["spec"] = c.spec()
	if err := c.env.Client.Create(c.t.Context(), obj); err != nil {
		c.t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
	c.live[obj.GetName()] = true
}

func (c *churn) change(name string) {
	c.changes++
	patch, _ := json.Marshal(map[string]any{"spec": c.spec()})
	if err := c.env.Client.Patch(c.t.Context(), c.object(name), client.RawPatch(types.MergePatchType, patch)); err != nil {
		c.t.Fatalf("changing %s: %v", name, err)
	}
}

// replace deletes an object (its delete handler runs before it goes) and
// creates another of a new name: names are never used again, so a
// delivery for one deleted never makes it anew.
func (c *churn) replace() {
	c.replaced++
	name := c.pick()
	delete(c.live, name)
	if err := c.env.Client.Delete(c.t.Context(), c.object(name)); err != nil {
		c.t.Fatalf("deleting %s: %v", name, err)
	}
	c.create()
}

// post delivers a webhook delivery changing name through the source's
// object.
func (c *churn) post(name string) {
	c.posted++
	spec := c.spec()
	body, _ := json.Marshal(map[string]any{"name": name, "a": spec["a"], "fails": spec["fails"]})
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodPost, "http://"+c.hooks+"/hooks/churn/hook", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer churn-token")
	req.Header.Set("X-Churn-Delivery", "c"+strconv.Itoa(c.posted))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("posting delivery %d: %v", c.posted, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("delivery %d: answered %d %s", c.posted, resp.StatusCode, answer)
	}
}

func (c *churn) publish() {
	c.published++
	body, _ := json.Marshal(map[string]any{"n": c.published, "fails": strconv.Itoa(c.r.IntN(3))})
	c.nats.PublishMsgs(&nats.Msg{Subject: "churn.events", Data: body})
}

// sample waits until the churn is quiet, makes sure each Serve handler
// has its process (a stack just started has none yet), then asks the
// engine process for a sample.
func (c *churn) sample() sample {
	c.quiet()
	c.change(c.pick())
	c.post(c.pick())
	c.publish()
	c.quiet()
	// The listener's side of an idle keep-alive connection is an open
	// file of the engine's that comes and goes with the test's client.
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(time.Second)
	file := filepath.Join(c.dir, "samples.jsonl")
	before := countLines(file)
	if err := c.proc.Process.Signal(syscall.SIGUSR1); err != nil {
		c.t.Fatal(err)
	}
	var s sample
	clustertest.Eventually(c.t, time.Minute, "the engine's sample", func(context.Context) (bool, error) {
		data, _ := os.ReadFile(file)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(data) == 0 || len(lines) <= before {
			return false, nil
		}
		return true, json.Unmarshal([]byte(lines[len(lines)-1]), &s)
	})
	for _, f := range []string{"runs.db", "runs.db-wal"} {
		if fi, err := os.Stat(filepath.Join(c.dir, f)); err == nil {
			s.Archive += fi.Size()
		}
	}
	counts, err := c.store.Counts(c.t.Context(), time.Time{})
	if err != nil {
		c.t.Fatal(err)
	}
	s.Runs = counts["churn"].Runs
	return s
}

func countLines(file string) int {
	data, _ := os.ReadFile(file)
	return bytes.Count(data, []byte("\n"))
}

// quiet waits until the churn has converged: every object there should
// be is, with its last change handled (status.seen its spec.a and
// observedGeneration its generation), none being deleted, no run running,
// every delivery recorded and handled; and fails the test if a run gave
// up.
func (c *churn) quiet() {
	ctx := c.t.Context()
	calm := 0
	clustertest.Eventually(c.t, 5*time.Minute, "the churn converges", func(context.Context) (bool, error) {
		busy, err := c.busy(ctx)
		if err != nil || busy != "" {
			calm = 0
			return false, err
		}
		calm++
		return calm >= 3, nil // the same three polls in a row: no retry was waiting
	})
	gaveUp, err := c.store.List(ctx, archive.Query{Operator: "churn", Outcome: archive.GaveUp, Limit: 1})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(gaveUp.Runs) > 0 {
		r := gaveUp.Runs[0]
		c.t.Fatalf("run %s of %s (%s) gave up: %s", r.ID, r.Handler, r.Name, r.Error)
	}
}

// busy says what the churn still waits for; "" when nothing.
func (c *churn) busy(ctx context.Context) (string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("churn.conformance.opkit.dev/v1")
	list.SetKind("ChurnList")
	if err := c.env.Client.List(ctx, list, client.InNamespace(c.ns)); err != nil {
		return "", err
	}
	there := map[string]bool{}
	for _, obj := range list.Items {
		there[obj.GetName()] = true
		a, _, _ := unstructured.NestedString(obj.Object, "spec", "a")
		seen, _, _ := unstructured.NestedString(obj.Object, "status", "seen")
		observed, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
		switch {
		case obj.GetDeletionTimestamp() != nil:
			return obj.GetName() + " being deleted", nil
		case seen != a || observed != obj.GetGeneration():
			return fmt.Sprintf("%s: seen %q of %q, generation %d observed %d", obj.GetName(), seen, a, obj.GetGeneration(), observed), nil
		}
	}
	for name := range c.live {
		if !there[name] {
			return "", fmt.Errorf("%s is gone", name)
		}
	}
	running, err := c.store.List(ctx, archive.Query{Operator: "churn", Outcome: archive.Running, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(running.Runs) > 0 {
		return "run " + running.Runs[0].ID + " running", nil
	}
	pending, err := c.store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "churn", Outcome: archive.DeliveryPending, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(pending.Deliveries) > 0 {
		return "delivery " + pending.Deliveries[0].DeliveryID + " pending", nil
	}
	if c.published > 0 {
		// Messages are recorded as the consumer reads them: the last
		// one's record says they all were (the stream is read in order).
		last, err := c.store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "churn", Source: "msgs", Limit: 1})
		if err != nil {
			return "", err
		}
		if want := "CHURN:" + strconv.Itoa(c.published); len(last.Deliveries) == 0 || last.Deliveries[0].DeliveryID != want {
			return "message " + want + " not recorded", nil
		}
	}
	return "", nil
}

// report says what the churn did and its samples.
func (c *churn) report(samples []sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "churn for %s: %d objects kept; %d changes, %d replaced, %d webhook deliveries, %d NATS messages; %d stack restarts\n",
		*flagChurnFor, *flagChurnObjs, c.changes, c.replaced, c.posted, c.published, c.starts-1)
	counts, err := c.store.Counts(context.WithoutCancel(c.t.Context()), time.Time{})
	if err == nil {
		fmt.Fprintf(&b, "runs: %d, of which failed (and retried): %d\n", counts["churn"].Runs, counts["churn"].Failed)
	}
	b.WriteString("at        goroutines  live heap KiB  of it Events KiB  heap less Events KiB  open files  RSS MiB  archive KiB  runs\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%-9s %10d  %13d  %16d  %20d  %10d  %7d  %11d  %d\n", s.At, s.Goroutines, s.Heap>>10, s.Events>>10, (s.Heap-s.Events)>>10, s.FDs, s.RSS>>20, s.Archive>>10, s.Runs)
	}
	return b.String()
}

// runChurnEngine is TestChurn's engine process: the stack of dir's
// operator.yaml, started again on SIGUSR2, sampled on SIGUSR1 (a line
// appended to samples.jsonl), stopped on SIGTERM. Each start writes
// ready.<n>, n counting the starts, holding its hooks address.
func runChurnEngine(dir, namespace string) int {
	// A heap sample every 16 KiB allocated, not the default 512 KiB: the
	// growth the samples look for is a few hundred KiB, and the profiles
	// must show where it is.
	runtime.MemProfileRate = 16 << 10
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "churn engine:", err)
		return 1
	}
	cfg, defs, err := engineSetUp(dir)
	if err != nil {
		return fail(err)
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2)
	for start := 1; ; start++ {
		again, err := churnStart(cfg, defs, dir, namespace, start, signals)
		if err != nil {
			return fail(err)
		}
		if !again {
			return 0
		}
	}
}

// churnStart starts the engine's stack, once, and runs it until a signal:
// SIGUSR1 samples the process, SIGUSR2 stops the stack to start it
// again (again true), SIGTERM stops it for good.
func churnStart(cfg *rest.Config, defs []*definition.Definition, dir, namespace string, start int, signals <-chan os.Signal) (again bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := engine.Options{Config: cfg, Namespace: namespace}
	stack.ListenOnLoopback(&opts, defs...)
	s, err := stack.Start(ctx, stack.Options{Engine: opts, Archive: filepath.Join(dir, "runs.db")})
	if err != nil {
		return false, err
	}
	defer func() {
		if stopErr := s.Stop(); stopErr != nil && !errors.Is(stopErr, context.Canceled) && err == nil {
			err = fmt.Errorf("stopping start %d: %w", start, stopErr)
		}
	}()
	if err := s.Apply(ctx, defs...); err != nil {
		return false, err
	}
	if err := writeReady(filepath.Join(dir, "ready."+strconv.Itoa(start)), s.Engine.HooksAddr()); err != nil {
		return false, err
	}
	for {
		select {
		case <-s.Done():
			return false, fmt.Errorf("the stack stopped: %w", s.Err())
		case sig := <-signals:
			switch sig {
			case syscall.SIGUSR1:
				if err := writeSample(filepath.Join(dir, "samples.jsonl")); err != nil {
					return false, err
				}
			case syscall.SIGUSR2:
				return true, nil
			default:
				return false, nil
			}
		}
	}
}

// writeSample appends this process's sample to file, after two garbage
// collections (the second frees what the first's finalizers let go).
func writeSample(file string) error {
	runtime.GC()
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	s := sample{Goroutines: runtime.NumGoroutine(), Heap: int64(live[0].Value.Uint64()), Events: heapOf("k8s.io/client-go/tools/events."), FDs: len(fds)}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				s.RSS = kb << 10
			}
		}
	}
	// Beside it, the heap's profile, heap.<n>.pprof, n counting the
	// samples: what grew between two of them.
	profile, err := os.Create(filepath.Join(filepath.Dir(file), fmt.Sprintf("heap.%d.pprof", countLines(file)+1)))
	if err != nil {
		return err
	}
	if err := errors.Join(pprof.WriteHeapProfile(profile), profile.Close()); err != nil {
		return err
	}
	line, _ := json.Marshal(s)
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// heapOf estimates the live bytes allocated under functions whose name
// begins with prefix, from the heap profile as the last collection left
// it (scaled as pprof scales a sampled profile).
func heapOf(prefix string) int64 {
	var records []runtime.MemProfileRecord
	n, ok := runtime.MemProfile(nil, true)
	for !ok {
		records = make([]runtime.MemProfileRecord, n+64)
		n, ok = runtime.MemProfile(records, true)
	}
	var total float64
	for _, r := range records[:n] {
		count, size := r.InUseObjects(), r.InUseBytes()
		if count == 0 || !calledFrom(r.Stack(), prefix) {
			continue
		}
		scale := 1.0
		if rate := runtime.MemProfileRate; rate > 1 {
			scale = 1 / (1 - math.Exp(-float64(size)/float64(count)/float64(rate)))
		}
		total += float64(size) * scale
	}
	return int64(total)
}

// calledFrom reports whether a function of stack has a name beginning
// with prefix.
func calledFrom(stack []uintptr, prefix string) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// churnContext is what the churn's handler reads of its binding context.
type churnContext struct {
	Handler string `json:"handler"`
	Attempt int    `json:"attempt"`
	Object  struct {
		Spec struct {
			A     string `json:"a"`
			Fails string `json:"fails"`
		} `json:"spec"`
	} `json:"object"`
	Event struct {
		Payload struct {
			Fails string `json:"fails"`
		} `json:"payload"`
	} `json:"event"`
}

// runChurnHandler is every handler of the churn, in either mode: a run
// fails while its attempt is at most the fails of its object's spec (or
// of its delivery's payload), then succeeds; track's success records the
// spec's a as status.seen.
func runChurnHandler() int {
	dec := json.NewDecoder(os.Stdin)
	serve := os.Getenv("OPKIT_MODE") == "Serve"
	for {
		var ctx churnContext
		if err := dec.Decode(&ctx); err != nil {
			if serve && errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "churn handler: reading the binding context:", err)
			return 2
		}
		fails := ctx.Object.Spec.Fails
		if ctx.Handler == "heard" {
			fails = ctx.Event.Payload.Fails
		}
		n, _ := strconv.Atoi(fails)
		fmt.Fprintf(os.Stderr, "%s attempt %d of a spec failing %d\n", ctx.Handler, ctx.Attempt, n)
		code := 0
		switch {
		case ctx.Attempt <= n:
			fmt.Printf(`{"error": {"message": "failure %d of %d"}}`+"\n", ctx.Attempt, n)
			code = 1
		case ctx.Handler == "track":
			out, _ := json.Marshal(map[string]any{"status": map[string]any{"seen": ctx.Object.Spec.A}})
			fmt.Println(string(out))
		default:
			fmt.Println()
		}
		if !serve {
			return code
		}
	}
}
