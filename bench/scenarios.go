package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/tracing/tracingtest"
)

// ceiling: a bare client creating ConfigMaps, QPS unlimited.
func (b *bench) ceiling(ctx context.Context, concurrency int) error {
	n := b.opts.CeilingObjects
	cms := b.c.cs.CoreV1().ConfigMaps(b.c.ns)
	start := time.Now()
	err := inParallel(ctx, n, concurrency, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, configMap(b.c.ns, fmt.Sprintf("ceiling-%05d", i)), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	b.add("ceiling", fmt.Sprintf("client-go, concurrency %d", concurrency), "writes/s", "/s", float64(n)/time.Since(start).Seconds())
	return b.c.cleanUp(ctx)
}

// drain: n Printers created while the controller is stopped; the time from
// the controller's process start (a cold start: its cache empty, its
// start-up work ahead) until every child exists and every status is set.
// Besides the rate it records the writes and the CPU per object, the
// controller's and the API server's (kube-apiserver and etcd, when they
// run on this machine), the start-up (to the first child) and the
// controller's peak memory; with idle > 0 its writes and CPU at steady
// state afterwards.
func (b *bench) drain(ctx context.Context, im impl, n int, idle time.Duration) error {
	ctx, cancel := context.WithCancel(ctx) // ends the tracker's watches
	defer cancel()
	d, err := b.drainOnce(ctx, im, "printer.yaml", "off", "configMap", names("p", n))
	if err != nil {
		return err
	}
	c := d.c
	defer c.stop()
	// Its stats lines come every statsInterval: wait for one that counts
	// the writes the bench has seen.
	time.Sleep(3 * statsInterval)
	s, err := c.stats()
	if err != nil {
		return err
	}
	size := sizeLabel(n) + " objects"
	scenario := drainScenario(n)
	b.add(scenario, im.Name, "objects/s", "/s", float64(n)/d.elapsed.Seconds())
	b.add(scenario, im.Name, "start-up", "ms", float64(d.startUp.Microseconds())/1000)
	b.add(scenario, im.Name, "writes per object", "", float64(s.Writes)/float64(n))
	b.add(scenario, im.Name, "CPU per object", "ms", 1000*s.CPUSecond/float64(n))
	if d.planeCPU >= 0 {
		b.add(scenario, im.Name, "API server CPU per object", "ms", 1000*d.planeCPU/float64(n))
		b.add(scenario, im.Name, "CPU per object, with the API server", "ms", 1000*(s.CPUSecond+d.planeCPU)/float64(n))
	}
	fmt.Fprintf(b.log, "  writes: %v\n", s.WritesBy)
	b.add("memory "+size, im.Name, "peak RSS", "MiB", float64(s.MaxRSS)/(1<<20))
	b.add("memory "+size, im.Name, "peak heap", "MiB", float64(s.HeapPeak)/(1<<20))
	if idle > 0 {
		if err := c.settle(ctx); err != nil {
			return err
		}
		before, after, err := c.sample(ctx, idle)
		if err != nil {
			return err
		}
		window := time.Duration(after.At - before.At)
		b.add("idle", im.Name, "writes/min", "/min", float64(after.Writes-before.Writes)/window.Minutes())
		b.add("idle", im.Name, "CPU", "millicores", 1000*(after.CPUSecond-before.CPUSecond)/window.Seconds())
	}
	c.stop()
	return b.c.cleanUp(ctx)
}

// drainScenario names the drain of n objects: "drain 10k".
func drainScenario(n int) string { return "drain " + sizeLabel(n) }

// drained is what drainOnce measured.
type drained struct {
	c *controller // still running
	// elapsed is the time from the controller's start to the last
	// Printer done; startUp to the first child.
	elapsed, startUp time.Duration
	// planeCPU is the CPU seconds kube-apiserver and etcd used meanwhile,
	// or -1 when they were not found.
	planeCPU float64
}

// drainSettle bounds the wait for a quiet plane before a drain: a busy
// machine may never give one.
const drainSettle = 20 * time.Second

// drainOnce creates the named Printers, waits for the plane to settle,
// then starts the controller and waits until each has its child and a
// doneField in its status.
func (b *bench) drainOnce(ctx context.Context, im impl, def, archive, doneField string, ns []string) (drained, error) {
	d := drained{planeCPU: -1}
	if err := b.c.createPrinters(ctx, ns); err != nil {
		return d, err
	}
	// The creates, and what the drain before left the plane to do, are
	// not this drain's: its rate and its share of the API server's CPU
	// start from a quiet plane.
	if err := b.settle(ctx, drainSettle, fmt.Sprintf("the drain of %d Printers by %s (%s)", len(ns), im.Name, def)); err != nil {
		return d, err
	}
	tr, err := b.c.track(ctx, doneField, false)
	if err != nil {
		return d, err
	}
	cpu0, cpuErr := b.planeSeconds()
	start := time.Now()
	if d.c, err = b.startController(im, def, archive); err != nil {
		return d, err
	}
	stopProfile := b.profileAPIServer(ctx, fmt.Sprintf("%s-%s-%d", im.Name, strings.TrimSuffix(def, ".yaml"), len(ns)))
	last, err := d.c.wait(ctx, tr, ns, true, true, b.timeout(len(ns)))
	stopProfile()
	if err != nil {
		d.c.stop()
		return d, fmt.Errorf("%s: %w", im.Name, err)
	}
	if cpu1, err := b.planeSeconds(); err == nil && cpuErr == nil {
		d.planeCPU = cpu1 - cpu0
	}
	d.elapsed, d.startUp = last.Sub(start), tr.first(ns).Sub(start)
	return d, nil
}

// profileAPIServer writes, with -profile, the API server's CPU profile
// in windows of 2 s (apiserver-D-LABEL-N.pprof, D counting the drains
// profiled, N the windows, from 1) until stop is
// called, which waits for the window under way; go tool pprof takes them
// all at once. An API server that serves no profile (a plane the bench
// did not start, without --profiling) is said once in the log.
func (b *bench) profileAPIServer(ctx context.Context, label string) (stop func()) {
	if b.opts.ProfileDir == "" {
		return func() {}
	}
	b.mu.Lock()
	b.profiles++
	label = fmt.Sprintf("%02d-%s", b.profiles, label)
	b.mu.Unlock()
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 1; ctx.Err() == nil && !stopping.Load(); n++ {
			data, err := b.c.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "2").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(filepath.Join(b.opts.ProfileDir, fmt.Sprintf("apiserver-%s-%d.pprof", label, n)), data, 0o644)
			}
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(b.log, "  the API server's profile: %v\n", err)
				}
				return
			}
		}
	}()
	return func() { stopping.Store(true); <-done }
}

// startLive starts the controller and waits until it has handled a first
// Printer: its child (a Job for jobs), and with needDone its status.
func (b *bench) startLive(ctx context.Context, tr *tracker, im impl, def, archive string, needDone bool) (*controller, error) {
	c, err := b.startController(im, def, archive)
	if err != nil {
		return nil, err
	}
	if err := b.c.createPrinter(ctx, "probe"); err != nil {
		c.stop()
		return nil, err
	}
	if _, err := c.wait(ctx, tr, []string{"probe"}, true, needDone, 2*time.Minute); err != nil {
		c.stop()
		return nil, fmt.Errorf("%s: %w", im.Name, err)
	}
	return c, nil
}

// live: Printers created at a steady rate against a running controller;
// the latency from the start of each creation to its child and to its
// status.
func (b *bench) live(ctx context.Context, im impl, rate int) error {
	ctx, cancel := context.WithCancel(ctx) // ends the tracker's watches
	defer cancel()
	tr, err := b.c.track(ctx, "configMap", false)
	if err != nil {
		return err
	}
	c, err := b.startLive(ctx, tr, im, "printer.yaml", "off", true)
	if err != nil {
		return err
	}
	defer c.stop()
	if err := b.settle(ctx, time.Minute, fmt.Sprintf("live %s at %d/s", im.Name, rate)); err != nil {
		return err
	}
	ns := names(fmt.Sprintf("r%d", rate), rate*int(b.opts.LiveDuration.Seconds()))
	if err := b.paced(ctx, tr, ns, rate); err != nil {
		return err
	}
	if _, err := c.wait(ctx, tr, ns, true, true, b.timeout(len(ns))); err != nil {
		return fmt.Errorf("%s: %w", im.Name, err)
	}
	toChild, toDone := tr.latencies(ns)
	if b.opts.LiveSlow > 0 {
		tr.listSlow(b.log, ns, b.opts.LiveSlow)
	}
	subject := fmt.Sprintf("%s, %d/s", im.Name, rate)
	b.addLatencies("", "live", subject, "child", toChild, 50, 99)
	b.addLatencies("", "live", subject, "status", toDone, 50, 99)
	c.stop()
	return b.c.cleanUp(ctx)
}

// paced creates the Printers at rate per second, each creation in its own
// goroutine so that a slow one does not hold back the pace.
func (b *bench) paced(ctx context.Context, tr *tracker, ns []string, rate int) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(ns))
	for _, name := range ns {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		wg.Go(func() {
			tr.markCreated(name, time.Now())
			if err := b.c.createPrinter(ctx, name); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// percentile returns the p-th percentile of ds in milliseconds.
func percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return float64(s[i].Microseconds()) / 1000
}

// execOverhead: the exec executor running /bin/echo against a bare
// fork/exec of the same command.
func (b *bench) execOverhead(ctx context.Context) error {
	const runs = 300
	result := `{"status": {"touched": true}}`
	ex := &executor.Exec{Action: v1alpha1.ExecAction{Command: []string{"/bin/echo", result}}}
	input := []byte(`{"trigger":"create","object":{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"p","namespace":"bench"},"spec":{"text":"hello"}}}`)
	var bare, full []time.Duration
	// The CPU a fork/exec costs, the child's and the parent's, from the
	// kernel's accounts: what a process per run adds to a drain that is
	// bound by the machine's CPU, whatever the engine does around it.
	cpu0 := processCPU()
	for range runs {
		t0 := time.Now()
		if out, err := exec.CommandContext(ctx, "/bin/echo", result).Output(); err != nil || len(out) == 0 {
			return fmt.Errorf("bare exec: %q: %w", out, err)
		}
		bare = append(bare, time.Since(t0))
	}
	b.add("handlers", "exec, /bin/echo", "bare fork/exec CPU", "ms", float64((processCPU()-cpu0).Microseconds())/1000/runs)
	for i := range runs {
		t0 := time.Now()
		res, err := ex.Run(ctx, executor.Request{
			RunID: archive.NewID(time.Now()), Handler: "touch", Trigger: "create", Key: fmt.Sprintf("u/%d/touch", i),
			Attempt: 1, Input: input, Timeout: 10 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("exec executor: %w", err)
		}
		if res.Status["touched"] != true {
			return fmt.Errorf("exec executor: result %+v, want status.touched", res)
		}
		full = append(full, time.Since(t0))
	}
	b.add("handlers", "exec, /bin/echo", "bare fork/exec p50", "ms", percentile(bare, 50))
	b.add("handlers", "exec, /bin/echo", "executor p50", "ms", percentile(full, 50))
	b.add("handlers", "exec, /bin/echo", "overhead p50", "ms", percentile(full, 50)-percentile(bare, 50))
	return nil
}

// handlerDrain: n Printers with an exec handler drained by im (opkit, or
// opkit-b for an A/B comparison) with the archive on, or off; the time
// until every handler run set its status.
func (b *bench) handlerDrain(ctx context.Context, im impl, n int, archiveOn bool) error {
	path, subject := "off", im.Name+", archive off"
	if archiveOn {
		path, subject = tempArchive(b.workDir), im.Name+", archive on (SQLite)"
	}
	return b.handlerDrainOf(ctx, im, "printer-exec.yaml", subject, path, n)
}

// noHandlerSubject is the handlers drain's Printers without a handler
// (printer.yaml: the child and the status only), drained beside the
// others: what each handler drain's rate and API server CPU are measured
// against, in the same run and on the same plane.
const noHandlerSubject = "opkit, no handler"

// noHandlerDrain: handlerDrain's n Printers drained by opkit without a
// handler, the archive off (it records nothing without one).
func (b *bench) noHandlerDrain(ctx context.Context, n int) error {
	return b.handlerDrainOf(ctx, opkitDefaults, "printer.yaml", noHandlerSubject, "off", n)
}

// httpHandlerDrain: handlerDrain's Printers with an HTTP handler instead,
// which a server in the bench's process answers as /bin/echo does: a run
// without a process of its own, the archive on.
func (b *bench) httpHandlerDrain(ctx context.Context, n int) error {
	var served atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			served.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status": {"touched": true}}`)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	// The controller, a child process, inherits it.
	if err := os.Setenv(handlerURLEnv, "http://"+ln.Addr().String()); err != nil {
		return err
	}
	if err := b.handlerDrainOf(ctx, opkitDefaults, httpWorkload, "opkit, http handler", tempArchive(b.workDir), n); err != nil {
		return err
	}
	if got := served.Load(); got < int64(n) {
		return fmt.Errorf("the HTTP handler answered %d runs for %d Printers", got, n)
	}
	return nil
}

// tracedSubject is the handlers drain with tracing on: the engine
// exports its spans over OTLP gRPC to a receiver in the bench's process.
const tracedSubject = "opkit, archive on, tracing on"

// tracedHandlerDrain: handlerDrain's Printers (an exec handler, the
// archive on) with tracing on, every span exported to a receiver here.
func (b *bench) tracedHandlerDrain(ctx context.Context, n int) error {
	rcv, stop, err := tracingtest.Listen()
	if err != nil {
		return err
	}
	defer stop()
	// The controller, a child process, inherits them.
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + rcv.GRPCAddr, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	defer func() {
		for k := range env {
			_ = os.Unsetenv(k)
		}
	}()
	if err := b.handlerDrainOf(ctx, opkitDefaults, "printer-exec.yaml", tracedSubject, tempArchive(b.workDir), n); err != nil {
		return err
	}
	// A run is a span, and so is each reconcile that decided one.
	if got := rcv.Count(); got < n {
		return fmt.Errorf("tracing on: the receiver got %d spans for %d Printers' runs", got, n)
	}
	return nil
}

// serveSubject is the handlers drain with printer-exec.yaml's handler in
// exec.mode Serve (opkitServe), the archive on; runnersSubject the same
// handler in a runner (opkitRunners).
const (
	serveSubject   = "opkit, exec mode Serve"
	runnersSubject = "opkit, exec mode Serve, in a runner"
)

// handlerDrainOf drains n Printers of the workload def with a handler,
// as subject.
func (b *bench) handlerDrainOf(ctx context.Context, im impl, def, subject, path string, n int) error {
	return b.handlerDrainWith(ctx, im, def, subject, path, n, nil)
}

// handlerDrainWith is handlerDrainOf, calling also, when not nil, once
// every Printer is done and before the controller stops: to measure what
// runs beside it (its handlers' processes).
func (b *bench) handlerDrainWith(ctx context.Context, im impl, def, subject, path string, n int, also func() error) error {
	ctx, cancel := context.WithCancel(ctx) // ends the tracker's watches
	defer cancel()
	done := "touched" // the handler's result sets it
	if def == "printer.yaml" {
		done = "configMap" // no handler: the status names the child
	}
	d, err := b.drainOnce(ctx, im, def, path, done, names("h", n))
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	defer d.c.stop()
	time.Sleep(3 * statsInterval) // a stats line that counts the last writes
	s, err := d.c.stats()
	if err != nil {
		return err
	}
	b.add("handlers drain", subject, "objects/s", "/s", float64(n)/d.elapsed.Seconds())
	// Without the start-up (the engine's, a runner's agent connecting):
	// from the first Printer handled to the last.
	if d.elapsed > d.startUp {
		b.add("handlers drain", subject, "objects/s after the first", "/s", float64(n-1)/(d.elapsed-d.startUp).Seconds())
	}
	b.add("handlers drain", subject, "writes per object", "", float64(s.Writes)/float64(n))
	b.add("handlers drain", subject, "CPU per object", "ms", 1000*s.CPUSecond/float64(n))
	if d.planeCPU >= 0 {
		b.add("handlers drain", subject, "API server CPU per object", "ms", 1000*d.planeCPU/float64(n))
	}
	fmt.Fprintf(b.log, "  writes: %v\n", s.WritesBy)
	if also != nil {
		if err := also(); err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
	}
	d.c.stop()
	return b.c.cleanUp(ctx)
}

// peerDrain: the n Printers of handlerDrain drained by a peer (peers.go),
// which does the same work: child, handler, status. Its CPU counts the
// handlers it forked, and its writes are those it reports.
func (b *bench) peerDrain(ctx context.Context, im impl, n int) error {
	ctx, cancel := context.WithCancel(ctx) // ends the tracker's watches
	defer cancel()
	d, err := b.drainOnce(ctx, im, "printer-exec.yaml", "off", "touched", names("h", n))
	if err != nil {
		return err
	}
	defer d.c.stop()
	time.Sleep(3 * statsInterval) // a stats line that counts the last writes
	s, err := d.c.stats()
	if err != nil {
		return err
	}
	b.add("handlers drain", im.Name, "objects/s", "/s", float64(n)/d.elapsed.Seconds())
	b.add("handlers drain", im.Name, "writes per object", "", float64(s.Writes)/float64(n))
	b.add("handlers drain", im.Name, "CPU per object, with its handlers", "ms", 1000*s.CPUSecond/float64(n))
	b.add("handlers drain", im.Name, "peak RSS", "MiB", float64(s.MaxRSS)/(1<<20))
	fmt.Fprintf(b.log, "  writes: %v\n", s.WritesBy)
	d.c.stop()
	return b.c.cleanUp(ctx)
}

// jobLatency: Printers with a job handler created one at a time; the time
// from the start of each creation until its Job exists.
func (b *bench) jobLatency(ctx context.Context, n int) error {
	ctx, cancel := context.WithCancel(ctx) // ends the tracker's watches
	defer cancel()
	tr, err := b.c.track(ctx, "configMap", true)
	if err != nil {
		return err
	}
	c, err := b.startLive(ctx, tr, opkitDefaults, "printer-job.yaml", tempArchive(b.workDir), false)
	if err != nil {
		return fmt.Errorf("job handler: %w", err)
	}
	defer c.stop()
	ns := names("j", n)
	if err := b.paced(ctx, tr, ns, 5); err != nil {
		return err
	}
	if _, err := c.wait(ctx, tr, ns, true, false, time.Minute); err != nil {
		return fmt.Errorf("job handler: %w", err)
	}
	toJob, _ := tr.latencies(ns)
	b.addLatencies("", "handlers", "job", "change to Job created", toJob, 50, 99)
	c.stop()
	return b.c.cleanUp(ctx)
}

// sizeLabel writes 10000 as 10k, 1000000 as 1M, 300 as 300.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"text": "hello from " + name}}
}
