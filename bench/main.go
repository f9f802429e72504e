// Command bench measures opkit's engine against a hand-written
// controller-runtime operator (package baseline) and against the API
// server's ceiling, on the local control plane, and prints one table of
// figures (median, min and max over the runs) and the engine's targets.
//
//	go run ./bench                 # everything, as make bench does
//	go run ./bench -scenarios drain,idle -runs 1 -objects 2000
//
// The workload is a Printer with one ConfigMap child: create the child
// with a controller ownerReference, then set status.configMap
// (printer.yaml for opkit). Each controller runs as a child process of
// this command, so that its memory and CPU are its own; it reports its API
// writes (counted at its transport), peak heap, peak RSS and CPU time.
// Every measurement starts from an empty namespace.
//
// Scenarios:
//
//	ceiling   a bare client-go creating ConfigMaps, concurrency 1 and 16
//	drain     -cold-objects and -objects Printers created while the
//	          controller is stopped; objects/s from the controller's
//	          process start until every child exists and every status is
//	          set, the start-up (to the first child), and the CPU per
//	          object of the controller and of kube-apiserver + etcd
//	live      Printers created at each -live-rates per second; latency to
//	          the child and to the status, p50 and p99
//	memory    peak RSS and heap at -objects and -memory-objects (whose
//	          drain is measured as the others)
//	idle      API writes per minute and CPU at steady state (-idle)
//	handlers  exec handler overhead over a bare fork/exec; job handler
//	          latency to the Job; drain with an exec handler, archive on
//	          and off; the same drain with the handler in exec.mode Serve,
//	          and with a Python handler in mode Serve, a bare loop and on
//	          opkit's Python SDK (the machine's python3)
//	archive   on each of -archive-stores (SQLite, and PostgreSQL on a
//	          server the bench starts), archives of -archive-sizes runs
//	          filled in bulk (runs/s, size on disk); then runs recorded
//	          per second as the engine records them (-archive-batch),
//	          query p99, and the prune back to the size; a table with a
//	          column per store
//	console   the console's server time per page, p50 and p99, with
//	          -console-objects Printers and the archives of -archive-sizes
//	          runs, on each of -archive-stores
//	watch     a watch operator (watch.yaml) on -watch-objects labelled
//	          Deployments, and a fifth as many unlabelled, against the
//	          baseline's watch: time until each was handled once, peak
//	          memory, writes and CPU at steady state (-watch-steady; a
//	          write to a Deployment, or any in that window, fails the
//	          scenario), and the latency of a new image on a tenth of
//	          them. The Deployments are created once per run for both
//	          subjects (kube-controller-manager takes minutes over them)
//	webhook   -webhook-deliveries signed GitHub deliveries at -webhook-rate
//	          per second to opkit's engine, run in this process, over
//	          loopback (a twentieth forged, a twentieth replays): every
//	          request answered, the time to the answer, the time until each
//	          accepted one is handled, each handled once; opkit alone,
//	          without a baseline
//	plan      -plan-objects Websites (examples/website/operator.yaml, run
//	          by opkit's engine in this process) with their children;
//	          then the engine stops and opkit plan's entry point
//	          (plan.Run) plans a template edit that changes both children
//	          of each: objects planned, wall time, objects/s, children
//	          changed (anything but 2 a Website fails the scenario);
//	          opkit alone, without a baseline
//
// With -json FILE the figures, targets and machine go to FILE as well.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// options are the command's flags.
type options struct {
	Scenarios []string
	Runs      int
	Objects   int
	// ColdObjects is the small drain, where the controller's start-up
	// weighs most; 0 leaves it out.
	ColdObjects    int
	MemoryObjects  int
	MemoryRuns     int
	CeilingObjects int
	LiveRates      []int
	LiveDuration   time.Duration
	// LiveSlow lists, in the progress log, each live Printer whose status
	// took longer than this: when in its run it was created, and its times
	// to child and status. 0: none listed.
	LiveSlow       time.Duration
	Idle           time.Duration
	HandlerObjects int
	JobObjects     int
	ArchiveSizes   []int
	// ArchiveStores are the stores the archive and console scenarios
	// run on; ArchiveBatch the runs each archive measurement records,
	// and then prunes.
	ArchiveStores []store
	ArchiveBatch  int
	// ConsoleObjects are the Printers the console lists; ConsoleRequests
	// the requests per page and archive size.
	ConsoleObjects  int
	ConsoleRequests int
	// WatchObjects are the labelled Deployments of the watch scenario;
	// WatchSteady its steady-state window.
	WatchObjects int
	WatchSteady  time.Duration
	// WebhookDeliveries are the deliveries the webhook scenario sends,
	// WebhookRate per second.
	WebhookDeliveries int
	WebhookRate       int
	// SourceMessages are the messages the sources scenario floods each
	// consumed source with.
	SourceMessages int
	// PlanObjects are the Websites the plan scenario plans.
	PlanObjects int
	ProfileDir  string
	// Subjects are the drains' controllers by name; empty: all.
	Subjects []string
	// Steps, when set, picks the steps of each run that are taken: those
	// whose description (as the log prints it) it matches.
	Steps *regexp.Regexp
}

var allScenarios = []string{"ceiling", "drain", "live", "memory", "idle", "handlers", "archive", "console", "watch", "webhook", "sources", "plan"}

// benchNamespace is where every scenario works; watch.yaml names it.
const benchNamespace = "bench"

func defaultOptions() options {
	return options{
		Scenarios: allScenarios, Runs: 3, Objects: 10_000, ColdObjects: 2_000, MemoryObjects: 50_000, MemoryRuns: 3, CeilingObjects: 5_000,
		LiveRates: []int{100, 500}, LiveDuration: 10 * time.Second, Idle: 30 * time.Second,
		HandlerObjects: 1_000, JobObjects: 15, ArchiveSizes: []int{100_000, 1_000_000}, ArchiveStores: allStores, ArchiveBatch: 10_000,
		ConsoleObjects: 1_000, ConsoleRequests: 200, WatchObjects: 500, WatchSteady: time.Minute,
		WebhookDeliveries: 1_000, WebhookRate: 100, SourceMessages: 10_000, PlanObjects: 10_000,
	}
}

// bench is one run of the suite.
type bench struct {
	opts       options
	c          *cluster
	kubeconfig string
	workDir    string
	log        io.Writer

	mu      sync.Mutex
	figures []*figure
	// notes say what the figures cannot: a scenario without a baseline.
	notes []string
	// profiles counts the drains profileAPIServer profiled: their files'
	// prefix.
	profiles int

	// The archive and console scenarios' archives by store and size,
	// filled once; their runs start at runBase and follow one another by
	// a second. pg is the PostgreSQL server of their PostgreSQL
	// archives, started on first use.
	archives map[archiveKey]*filled
	runBase  time.Time
	pg       *pgtest.Server
	// plane reads the CPU time of the API server and etcd; nil when
	// they do not run on this machine (see planeCPU).
	plane *planeCPU
	// peersReady are the peers prepared for this run (see peers), nil
	// until the first scenario with peers asks.
	peersReady *[]impl
	// pythonReady are the Python handlers' drains prepared for this run
	// (see pythonHandlers), nil until the handlers scenario asks.
	pythonReady *[]pythonHandler
}

func main() {
	if os.Getenv(roleEnv) == "controller" {
		if err := controllerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
			os.Exit(1)
		}
		return
	}
	if os.Getenv(roleEnv) == agentRole {
		os.Exit(agentMain())
	}
	if os.Getenv(roleEnv) == peerRole {
		if err := peerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		return
	}
	if err := benchMain(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func benchMain(args []string, stdout, stderr io.Writer) (err error) {
	opts := defaultOptions()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "the scenarios to run, comma-separated")
	fs.IntVar(&opts.Runs, "runs", opts.Runs, "runs of each measurement; figures are their median, min and max")
	fs.IntVar(&opts.Objects, "objects", opts.Objects, "Printers in drain (and the first memory point)")
	fs.IntVar(&opts.ColdObjects, "cold-objects", opts.ColdObjects, "Printers in the small drain, where start-up weighs most (0: none)")
	fs.IntVar(&opts.MemoryObjects, "memory-objects", opts.MemoryObjects, "Printers at the second memory point")
	fs.IntVar(&opts.MemoryRuns, "memory-runs", opts.MemoryRuns, "runs of the second memory point (each drains -memory-objects Printers twice)")
	fs.IntVar(&opts.CeilingObjects, "ceiling-objects", opts.CeilingObjects, "ConfigMaps the bare client creates")
	rates := fs.String("live-rates", "100,500", "creation rates of live, per second, comma-separated")
	fs.DurationVar(&opts.LiveDuration, "live-duration", opts.LiveDuration, "how long live creates at each rate")
	fs.DurationVar(&opts.LiveSlow, "live-slow", 0, "list each live Printer whose status took longer than this, to see when in the run the tail falls (0: none)")
	fs.DurationVar(&opts.Idle, "idle", opts.Idle, "the steady-state window of idle")
	fs.IntVar(&opts.HandlerObjects, "handler-objects", opts.HandlerObjects, "Printers in the drain with an exec handler")
	fs.IntVar(&opts.JobObjects, "job-objects", opts.JobObjects, "Printers with a job handler (at most 16: their Jobs never finish)")
	fs.IntVar(&opts.ConsoleObjects, "console-objects", opts.ConsoleObjects, "Printers the console lists")
	fs.IntVar(&opts.ConsoleRequests, "console-requests", opts.ConsoleRequests, "console requests per page and archive size")
	fs.IntVar(&opts.WatchObjects, "watch-objects", opts.WatchObjects, "labelled Deployments the watch scenario watches (and a fifth as many unlabelled)")
	fs.DurationVar(&opts.WatchSteady, "watch-steady", opts.WatchSteady, "the steady-state window of the watch scenario")
	fs.IntVar(&opts.WebhookDeliveries, "webhook-deliveries", opts.WebhookDeliveries, "deliveries the webhook scenario sends")
	fs.IntVar(&opts.WebhookRate, "webhook-rate", opts.WebhookRate, "deliveries per second the webhook scenario sends")
	fs.IntVar(&opts.SourceMessages, "source-messages", opts.SourceMessages, "messages the sources scenario floods each consumed source (NATS, Kafka) with")
	fs.IntVar(&opts.PlanObjects, "plan-objects", opts.PlanObjects, "Websites the plan scenario makes, then plans a change of")
	sizes := fs.String("archive-sizes", "100000,1000000", "archive sizes in runs, comma-separated")
	fs.IntVar(&opts.ArchiveBatch, "archive-batch", opts.ArchiveBatch, "runs each archive measurement records, then prunes")
	stores := fs.String("archive-stores", "sqlite,postgres", "the archive stores of the archive and console scenarios, comma-separated: sqlite, postgres (a server the bench starts)")
	fs.IntVar(&opkitDefaults.Workers, "opkit-workers", 0, "opkit's concurrent reconciles (0: the engine's default)")
	subjects := fs.String("subjects", "", "the controllers of drain, live and watch (which then leaves out the peers), comma-separated, measured in that order in the first run, each later run starting with the next: opkit, opkit-serve (the watch's), opkit-b, baseline-1, baseline-8 (default: all)")
	fs.StringVar(&opkitB.Exe, "opkit-b", "", "a bench binary built at another commit: its opkit drains beside this one's, as opkit-b, for an A/B comparison in one run")
	fs.StringVar(&opts.ProfileDir, "profile", "", "write each controller's CPU and heap profiles to this directory (and an execution trace of its first 3 s, NAME-trace-PID.pprof, for go tool trace), and the API server's CPU profile during each drain (apiserver-SUBJECT-N.pprof, 2 s each; a plane the bench starts serves them)")
	steps := fs.String("steps", "", "take only the steps whose description, as the log prints it after \"run N/M: \", this regular expression matches (e.g. 'without a handler|archive true$'), to measure a few settings side by side quickly")
	jsonPath := fs.String("json", "", "also write the figures as JSON to this file")
	preparePeers := fs.Bool("prepare-peers", false, "only prepare the peers (python3-kubernetes installed, shell-operator built into the cache), then exit: what make test does before its tests, so that no build runs beside them")
	kubeconfig := fs.String("kubeconfig", "", "use this cluster instead of starting a local control plane")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts.Scenarios = strings.Split(*scenarios, ",")
	if *steps != "" {
		re, err := regexp.Compile(*steps)
		if err != nil {
			return fmt.Errorf("-steps: %w", err)
		}
		opts.Steps = re
	}
	if *subjects != "" {
		opts.Subjects = strings.Split(*subjects, ",")
		for _, s := range opts.Subjects {
			if !slices.Contains([]string{opkitDefaults.Name, opkitServe.Name, opkitB.Name, baseline1.Name, baseline8.Name}, s) {
				return fmt.Errorf("unknown subject %q; the subjects are opkit, opkit-serve (the watch's), opkit-b, baseline-1 and baseline-8", s)
			}
		}
	}
	for _, s := range opts.Scenarios {
		if !slices.Contains(allScenarios, s) {
			return fmt.Errorf("unknown scenario %q; the scenarios are %s", s, strings.Join(allScenarios, ", "))
		}
	}
	if opts.LiveRates, err = ints(*rates); err != nil {
		return fmt.Errorf("-live-rates: %w", err)
	}
	if opts.ArchiveSizes, err = ints(*sizes); err != nil {
		return fmt.Errorf("-archive-sizes: %w", err)
	}
	if opts.ArchiveStores, err = storeList(*stores); err != nil {
		return fmt.Errorf("-archive-stores: %w", err)
	}
	if opts.Runs < 1 || opts.Objects < 1 || opts.WatchObjects < 1 || opts.WebhookDeliveries < 1 || opts.WebhookRate < 1 || opts.SourceMessages < 1 || opts.ArchiveBatch < 1 || opts.PlanObjects < 1 || opts.JobObjects > 16 {
		return errors.New("-runs, -objects, -watch-objects, -webhook-deliveries, -webhook-rate, -source-messages, -archive-batch and -plan-objects must be at least 1, and -job-objects at most 16")
	}

	if opts.ProfileDir != "" {
		if err := os.MkdirAll(opts.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *preparePeers {
		b := &bench{log: stderr}
		ready, err := b.peers(ctx)
		for _, n := range b.notes {
			fmt.Fprintln(stderr, n)
		}
		if err == nil {
			fmt.Fprintf(stderr, "%d of 2 peers ready\n", len(ready))
		}
		return err
	}
	workDir, err := os.MkdirTemp("", "opkit-bench-")
	if err != nil {
		return err
	}
	// The controllers' logs are kept when the suite fails: its error
	// names them.
	defer func() {
		if err == nil {
			_ = os.RemoveAll(workDir)
		} else {
			fmt.Fprintf(stderr, "bench: the controllers' logs are kept in %s\n", workDir)
		}
	}()
	m := machine()
	if *kubeconfig == "" {
		fmt.Fprintln(stderr, "starting the local control plane")
		var flags []string
		if opts.ProfileDir != "" {
			// The drains' API server profiles (profileAPIServer).
			flags = append(flags, "--profiling=true")
		}
		plane, err := devcluster.Start(ctx, devcluster.Options{Log: stderr, APIServerFlags: flags})
		if err != nil {
			return err
		}
		defer plane.Stop()
		*kubeconfig = plane.KubeconfigPath()
		m.Kubernetes = devcluster.KubernetesVersion
	}
	b, err := newBench(ctx, opts, *kubeconfig, workDir, stderr)
	if err != nil {
		return err
	}
	// What was measured is reported also when a step failed or the suite
	// was interrupted.
	runErr := b.run(ctx)
	b.derive()
	b.closeArchives()
	b.print(stdout)
	if *jsonPath != "" {
		report := map[string]any{"machine": m, "options": opts, "figures": b.figures, "targets": b.targets()}
		if len(b.notes) > 0 {
			report["notes"] = b.notes
		}
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return runErr
}

func newBench(ctx context.Context, opts options, kubeconfig, workDir string, log io.Writer) (*bench, error) {
	cfg, err := loadConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := newCluster(cfg, benchNamespace)
	if err != nil {
		return nil, err
	}
	if err := c.installCRD(ctx); err != nil {
		return nil, fmt.Errorf("installing the Printer CRD: %w", err)
	}
	if err := c.cleanUp(ctx); err != nil {
		return nil, err
	}
	b := &bench{
		opts: opts, c: c, kubeconfig: kubeconfig, workDir: workDir, log: log,
		archives: map[archiveKey]*filled{}, runBase: time.Now().Add(-10 * 365 * 24 * time.Hour),
	}
	if b.plane, err = findPlaneCPU(cfg.Host); err != nil {
		b.note(fmt.Sprintf("drain: the API server's CPU is not measured: %v", err))
	}
	return b, nil
}

// settle waits, up to most, until kube-apiserver and etcd use less than
// a third of a core for two seconds running: the work a scenario leaves
// them (the garbage collector's deletions, the watch cache's compaction)
// then does not fall on the next subject's latencies, nor on its share
// of their CPU. On a remote plane it waits for nothing. A plane still
// busy after most is noted, naming what was about to be measured.
func (b *bench) settle(ctx context.Context, most time.Duration, what string) error {
	if b.plane == nil {
		return nil
	}
	defer func(start time.Time) {
		if time.Since(start) >= most {
			b.note(fmt.Sprintf("%s: started on a plane still busy after %s (kube-apiserver and etcd above a third of a core)", what, most))
		}
	}(time.Now())
	const window, quiet = time.Second, 1.0 / 3
	last, err := b.planeSeconds()
	if err != nil {
		return nil // the processes are gone: the scenario will say why
	}
	calm, deadline := 0, time.Now().Add(most)
	for calm < 2 && time.Now().Before(deadline) {
		if !sleep.For(ctx, window) {
			return ctx.Err()
		}
		now, err := b.planeSeconds()
		if err != nil {
			return nil
		}
		if (now-last)/window.Seconds() < quiet {
			calm++
		} else {
			calm = 0
		}
		last = now
	}
	return nil
}

// planeSeconds returns the CPU time kube-apiserver and etcd have used.
func (b *bench) planeSeconds() (float64, error) {
	if b.plane == nil {
		return 0, errors.New("the API server's processes are not known")
	}
	return b.plane.seconds()
}

// drainSubjects are the controllers the drains and live measure: opkit, opkit-b
// when given, and the baselines; -subjects keeps some of them.
func (b *bench) drainSubjects() []impl {
	return b.chosen(opkitDefaults, opkitB, baseline1, baseline8)
}

// chosen is those of all that -subjects names, in its order (a subject
// measured after another may find the plane busier or quieter: the
// first run keeps this order, each later one starts with the next
// subject, inTurn), or all of them; opkit-b only when given.
func (b *bench) chosen(all ...impl) []impl {
	var out []impl
	given := func(im impl) bool { return im != opkitB || opkitB.Exe != "" }
	if len(b.opts.Subjects) == 0 {
		for _, im := range all {
			if given(im) {
				out = append(out, im)
			}
		}
		return out
	}
	for _, name := range b.opts.Subjects {
		if i := slices.IndexFunc(all, func(im impl) bool { return im.Name == name }); i >= 0 && given(all[i]) {
			out = append(out, all[i])
		}
	}
	return out
}

// watchSubjects are the controllers the watch scenario measures: opkit,
// opkit-b when given, the baseline with 8 workers and the peers; -subjects
// keeps some of them, and leaves the peers out.
func (b *bench) watchSubjects(ctx context.Context) ([]impl, error) {
	out := b.chosen(opkitDefaults, opkitServe, opkitB, baseline8)
	if len(b.opts.Subjects) > 0 {
		return out, nil
	}
	peers, err := b.peers(ctx)
	return append(out, peers...), err
}

// drainSizes are the drains' sizes: the cold start's, then -objects.
func (b *bench) drainSizes() []int {
	if n := b.opts.ColdObjects; n > 0 && n != b.opts.Objects {
		return []int{n, b.opts.Objects}
	}
	return []int{b.opts.Objects}
}

// storeList reads -archive-stores.
func storeList(s string) ([]store, error) {
	var out []store
	for _, f := range strings.Split(s, ",") {
		st := store(strings.TrimSpace(f))
		if st == "" || slices.Contains(out, st) {
			continue
		}
		if !slices.Contains(allStores, st) {
			return nil, fmt.Errorf("unknown store %q; the stores are sqlite and postgres", st)
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, errors.New("no store given; the stores are sqlite and postgres")
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// machineInfo describes where the figures were measured.
type machineInfo struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpuModel,omitempty"`
	MemoryGiB  int    `json:"memoryGiB,omitempty"`
	Go         string `json:"go"`
	Kubernetes string `json:"kubernetes,omitempty"`
	Date       string `json:"date"`
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Format(time.DateOnly)}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		m.MemoryGiB = int((si.Totalram*uint64(si.Unit) + 1<<29) >> 30)
	}
	return m
}
