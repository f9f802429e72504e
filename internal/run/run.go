// Package run owns "a cause becomes an archived run": the one place where
// a handler's run is prepared, waits for a slot, is recorded, executes,
// and ends with its outcome archived, posted and recorded in the object's
// handler state.
//
//	sources of change            cause            run                     executor
//	(custom resource reconcile, ---> Decide ---> Runner.Step/Start ---> exec | http | job
//	 watch, calendar, delivery                    slot, archive.Insert      (or a stub)
//	 queue)                                              |
//	                                                     v
//	                              archive.Finish, status, Events, metrics <--- Outcome
//
// A Runner serves one operator. Its drivers (internal/converge, watch,
// calendar, delivery) call it through these, and nothing here calls back
// into them:
//
//   - an object's step: Step decides and prepares its next run, recording
//     the end of the last (the run a person's request asks for among
//     them); StepWriting is Step for a caller that writes the object's
//     status first, which it then reports (Written, or StatusRefused);
//     StepCarrying is Step for a watched object's driver, whose handler
//     record goes with the end of a run the step records, and
//     Pending.Carry has it go with the start of the run a step decided;
//     Launch starts the run prepared once that write is made, so that it
//     sees it, or LaunchWaiting, whose caller waits a little for the run's
//     end and steps again, so that one write records both the step and a
//     short run's end (Waitable says whether it would wait);
//   - a run for the operator itself: RunForOperator (a schedule's slot, a
//     run now, a delivery's handler);
//   - the whole operator's pause: PauseOperator, OperatorPaused,
//     WaitResumed;
//   - waking objects to be stepped again: Wakes, Wake, WakeAll;
//   - watched objects' handler records, loaded from and kept in the
//     archive: Watched;
//   - its life: Wait for the runs in flight (and the logs of runs whose
//     end no step recorded written), HasDelete.
//
// Runs execute in their own goroutines, one at a time per object, at most
// Config.MaxConcurrentRuns at once per operator. The reconcile that follows
// a run's end (or the one that waited for it) records its outcome, so that every write to an object is
// made by its one reconcile worker.
//
// Guarantees: nothing runs that is not recorded in the archive first (a
// run the archive refuses did not run, and counts no attempt); a run
// whose key the archive shows succeeded is not run again; a run cut off by
// the operator's stop is recorded Cancelled and runs again, with its key,
// at the next start. A run's log reaches the archive as it is written;
// what it writes in its last moments goes with its end's record, and is
// written on its own if that record does not come. Secrets reach no binding context (children and
// related Secrets lose their data) and so no archive.
package run

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// Config is what a Runner runs with.
type Config struct {
	// Def is the operator's definition. Required.
	Def *definition.Definition
	// Archive records the runs. Required.
	Archive archive.Recorder
	// Client writes a result's status and clears the retry annotation of
	// a custom resource; nil for objects never written.
	Client client.Client
	// Events posts the runs' Events. Required.
	Events events.EventRecorder
	// Execs are the handlers' executors, by handler name. Required for
	// every handler.
	Execs map[string]executor.Executor
	// Stubs replace handlers' actions (engine Options.Stubs); nil for none.
	Stubs *Stubs
	// Memory is the operator's per-object memory. Defaults to a new one,
	// read-only for watched objects.
	Memory *Memory
	// MaxConcurrentRuns bounds the runs executing at once. Defaults to 16.
	MaxConcurrentRuns int
	// ConsoleURL is the console's base URL, named in Events; "" for none.
	ConsoleURL string
	// RunEvents posts HandlerStarted and HandlerSucceeded for each run.
	// Defaults to false: a run's Events are its failures (HandlerFailed,
	// HandlerGaveUp) and those its result asks for, which is what a person
	// reads in kubectl describe; a success is in the archive, the
	// object's status (status.opkit.lastRun) and the console, without two
	// API writes a run.
	RunEvents bool
	// RunFinished is called with each run recorded as ended; nil for none.
	RunFinished func(archive.Run)
	// Clock times retries, schedules and requeues. Defaults to the real
	// clock. Steps wakes the waits on it when a test steps it; nil for
	// none.
	Clock clock.Clock
	Steps *ClockSteps
	// Namespace is the engine's one namespace; "" for all.
	Namespace string
	// Log is tagged with the operator by New.
	Log logr.Logger
}

// Runner runs one operator's handlers.
type Runner struct {
	def     *definition.Definition
	archive archive.Recorder
	client  client.Client
	events  events.EventRecorder
	execs   map[string]executor.Executor
	stubs   *Stubs
	mem     *Memory
	// watched: the objects are watched, not owned: their state is the
	// archive's, and nothing is written to them.
	watched bool
	// started is when the runner started: cause.Input.Started.
	started   time.Time
	wake      chan event.GenericEvent
	slots     chan struct{}   // bounds the runs executing at once
	ctx       context.Context // the operator's; ending it cancels the runs
	log       logr.Logger     // tagged with the operator
	metrics   *runMetrics
	console   string
	finished  func(archive.Run)
	clock     clock.Clock
	steps     *ClockSteps
	namespace string
	runEvents bool // Config.RunEvents
	running   sync.WaitGroup
	held      heldLogs // the log tails of ended runs whose end is not recorded
	// paused is the operator's own pause (pause.go).
	paused operatorPause
}

// New returns a runner whose runs last until ctx ends.
func New(ctx context.Context, cfg Config) *Runner {
	if cfg.MaxConcurrentRuns == 0 {
		cfg.MaxConcurrentRuns = 16
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Steps == nil {
		cfg.Steps = &ClockSteps{}
	}
	if cfg.Memory == nil {
		cfg.Memory = NewMemory(cfg.Def.Watch != nil)
	}
	rn := &Runner{
		def: cfg.Def, archive: cfg.Archive, client: cfg.Client, events: cfg.Events, execs: cfg.Execs, stubs: cfg.Stubs, mem: cfg.Memory,
		watched: cfg.Def.Watch != nil, started: time.Now(), wake: make(chan event.GenericEvent, 1024),
		slots: make(chan struct{}, cfg.MaxConcurrentRuns), ctx: ctx, log: cfg.Log.WithValues("operator", cfg.Def.Operator.Name),
		metrics: handlerMetrics(), console: strings.TrimSuffix(cfg.ConsoleURL, "/"), finished: cfg.RunFinished,
		clock: cfg.Clock, steps: cfg.Steps, namespace: cfg.Namespace, runEvents: cfg.RunEvents,
	}
	rn.metrics.forOperator(cfg.Def.Operator.Name)
	// An operator restarted while paused starts paused: no object runs
	// before the Operator's reconcile reads its annotations again.
	annotations := cfg.Def.Operator.GetAnnotations()
	value, paused := annotations[v1alpha1.PauseAnnotation]
	rn.paused.set(value, paused, annotations[v1alpha1.ResumedAnnotation])
	return rn
}

// Wakes are the objects whose run ended, or that a driver woke: each is
// to be reconciled (a controller's source.Channel).
func (rn *Runner) Wakes() <-chan event.GenericEvent { return rn.wake }

// Wake reconciles an object again, through Wakes.
func (rn *Runner) Wake(cr *unstructured.Unstructured) {
	select {
	case rn.wake <- event.GenericEvent{Object: cr}:
	case <-rn.ctx.Done():
	}
}

// WakeAll reconciles every object the runner knows.
func (rn *Runner) WakeAll() {
	rn.mem.mu.Lock()
	objs := make([]*unstructured.Unstructured, 0, len(rn.mem.objects))
	for key := range rn.mem.objects {
		u := &unstructured.Unstructured{}
		u.SetNamespace(key.Namespace)
		u.SetName(key.Name)
		objs = append(objs, u)
	}
	rn.mem.mu.Unlock()
	for _, u := range objs {
		rn.Wake(u)
	}
}

// Wait waits for the runs' goroutines; the operator's context, once done,
// cancels the runs. Then the logs of runs that ended, but whose end no
// worker recorded before the operator stopped, are written whole: the
// next engine finds those runs Running, and cancels them.
func (rn *Runner) Wait() {
	rn.running.Wait()
	rn.held.release()
}

// HasDelete reports whether any handler runs on delete, and so whether
// opkit holds a finalizer. A nil runner has none.
func (rn *Runner) HasDelete() bool {
	return rn != nil && HasDeleteHandler(rn.def)
}

// HasDeleteHandler reports whether a definition has a handler that runs
// on delete, and so whether its objects carry opkit's finalizer.
func HasDeleteHandler(d *definition.Definition) bool {
	return slices.ContainsFunc(d.Handlers, func(h *definition.Handler) bool { return h.Fires(v1alpha1.OnDelete) })
}

// executor returns what runs the handler now: its stub, if one is set,
// else its action's executor.
func (rn *Runner) executor(handler string) executor.Executor {
	if ex := rn.stubs.Get(rn.def.Operator.Name, handler); ex != nil {
		return ex
	}
	return rn.execs[handler]
}

// runAction is the action of a run's Events. It names the run: the events
// library folds Events that share type, reason and action into one series
// showing the first message, which would hide the later runs' ids.
func runAction(id string) string { return "Run " + id }

// Ref names a run in an Event: its id, and its console page when the
// console's URL is known.
func Ref(console, id string) string {
	if console == "" {
		return id
	}
	return id + " (" + console + "/runs/" + id + ")"
}

func (rn *Runner) runRef(id string) string { return Ref(rn.console, id) }

// periodic reports whether a trigger comes back by itself (schedule,
// requeue), as opposed to a change of the object.
func periodic(trigger string) bool {
	return trigger == v1alpha1.OnSchedule || trigger == v1alpha1.TriggerRequeue
}

// Workers is how many workers reconcile an operator's objects: workers,
// and maxRuns/2 more when it has handlers and its reconciles wait for the
// runs they start (runWait > 0): a worker waiting for a run reconciles
// nothing else meanwhile, and the others keep the run slots busy.
func Workers(workers, maxRuns int, runWait time.Duration, handlers bool) int {
	if handlers && runWait > 0 {
		return workers + maxRuns/2
	}
	return workers
}
