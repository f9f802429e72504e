package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// FinalizerName is the finalizer opkit holds on the custom resources of an
// operator with delete handlers: opkit.dev/<operator>, shortened with a
// hash when the Operator's name is too long for a finalizer.
func FinalizerName(operator string) string {
	if len(operator) <= 63 {
		return "opkit.dev/" + operator
	}
	sum := sha256.Sum256([]byte(operator))
	return "opkit.dev/" + operator[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}

// flight is a run in progress for one object.
type flight struct {
	cause  *cause.Cause   // why it runs; Due is when it was decided, it starts when a slot is free
	spec   map[string]any // the object's spec when the run started
	run    *archive.Run   // its ID is "" when the archive showed the key had succeeded
	done   bool
	result *executor.Result
	err    error
}

// runner runs one operator's handlers. Runs execute in their own
// goroutines, one at a time per object; the reconcile that follows a run's
// end records its outcome, so that every write to an object is made by its
// one reconcile worker.
type runner struct {
	def     *definition.Definition
	archive archive.Recorder
	client  client.Client
	reader  client.Reader
	events  events.EventRecorder
	execs   map[string]executor.Executor
	// watched: the objects are watched, not owned (watch.go): their state
	// is the archive's, and nothing is written to them.
	watched bool
	// started is when the runner started: cause.Input.Started.
	started time.Time
	wake    chan event.GenericEvent
	slots   chan struct{}   // bounds the runs executing at once
	ctx     context.Context // the operator's; ending it cancels the runs
	log     logr.Logger     // tagged with the operator
	metrics *runMetrics
	console string // the console's base URL, or ""
	// finished is Options.RunFinished.
	finished func(archive.Run)
	// clock is Options.Clock, steps its ClockStepped (clock.go).
	clock clock.Clock
	steps *clockSteps
	// stubs is Options.Stubs (stubs.go); namespace Options.Namespace.
	stubs     *Stubs
	namespace string
	// writes is the reconciler's memory of its writes (ownwrites.go); nil
	// for watched objects and calendars, which are never written.
	writes *ownWrites

	mu      sync.Mutex
	objects map[types.NamespacedName]*objectState
	running sync.WaitGroup
}

// objectState is what the runner keeps of one object between its
// reconciles; forget drops it when the object is gone.
type objectState struct {
	uid types.UID
	// written is the handler state the object's last step wrote. The cache
	// may not show that write yet when the object is reconciled again; the
	// state is only ever written by that step, so the memory is the newer,
	// and a scheduled or finished run is not repeated.
	written *cause.State
	// flight is the object's run, from its start until its end is recorded.
	flight *flight
	// For a watched object (watch.go): persisted is the state as the
	// archive holds it, last the object's JSON as last seen (its delete
	// handlers' object once it is gone; nil without delete handlers).
	persisted []byte
	last      []byte
}

// object returns the runner's record of an object, new if it has none or
// had one for an object of the same name that is gone. Call with rn.mu
// held.
func (rn *runner) object(cr *unstructured.Unstructured) *objectState {
	key := types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}
	o := rn.objects[key]
	if o == nil || o.uid != cr.GetUID() {
		o = &objectState{uid: cr.GetUID()}
		rn.objects[key] = o
	}
	return o
}

// state returns the object's handler state: what this runner last wrote
// for it, else what its status holds.
func (rn *runner) state(cr *unstructured.Unstructured) *cause.State {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if w := rn.object(cr).written; w != nil {
		return w.Clone()
	}
	if rn.watched {
		return &cause.State{Handlers: map[string]*cause.HandlerState{}} // new: its record is the archive's
	}
	return cause.Read(cr)
}

// remember records the state a step is about to write.
func (rn *runner) remember(cr *unstructured.Unstructured, st *cause.State) {
	rn.mu.Lock()
	rn.object(cr).written = st.Clone()
	rn.mu.Unlock()
}

// forget drops what the runner keeps of an object that is gone.
func (rn *runner) forget(key types.NamespacedName) {
	rn.mu.Lock()
	delete(rn.objects, key)
	rn.mu.Unlock()
}

func newRunner(ctx context.Context, d *definition.Definition, e *Engine, rec events.EventRecorder) (*runner, error) {
	rn := &runner{
		def: d, archive: e.opts.Archive, client: e.client, reader: e.mgr.GetAPIReader(), events: rec, ctx: ctx, metrics: handlerMetrics(),
		console: strings.TrimSuffix(e.opts.ConsoleURL, "/"), log: e.mgr.GetLogger().WithValues("operator", d.Operator.Name),
		execs: map[string]executor.Executor{}, wake: make(chan event.GenericEvent, 1024),
		slots:    make(chan struct{}, e.opts.MaxConcurrentRuns),
		objects:  map[types.NamespacedName]*objectState{},
		finished: e.opts.RunFinished,
		watched:  d.Watch != nil,
		started:  time.Now(),
		clock:    e.opts.Clock, steps: &e.clockSteps, stubs: e.opts.Stubs, namespace: e.opts.Namespace,
	}
	rn.metrics.forOperator(d.Operator.Name)
	execs := executor.Registry{
		"exec": func(h *definition.Handler) executor.Executor {
			return &executor.Exec{Action: *h.Exec, Secret: rn.secretValue, Credentials: e.credentials}
		},
		"http": func(h *definition.Handler) executor.Executor {
			return &executor.HTTP{Action: *h.HTTP, Secret: rn.secretValue}
		},
		"job": func(h *definition.Handler) executor.Executor {
			return &executor.Job{
				Action: *h.Job, Client: e.clientset, Tolerations: e.opts.JobTolerations,
				Labels: map[string]string{definition.OperatorLabel: d.Operator.Name},
			}
		},
	}
	for _, h := range d.Handlers {
		ex, err := execs.For(h)
		if err != nil {
			return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
		rn.execs[h.Name] = ex
	}
	return rn, nil
}

// hasDelete reports whether any handler runs on delete, and so whether
// opkit holds a finalizer.
func (rn *runner) hasDelete() bool {
	return rn != nil && hasDeleteHandler(rn.def)
}

// hasDeleteHandler reports whether a definition has a handler that runs
// on delete, and so whether its objects carry opkit's finalizer.
func hasDeleteHandler(d *definition.Definition) bool {
	return slices.ContainsFunc(d.Handlers, func(h *definition.Handler) bool { return h.Fires(v1alpha1.OnDelete) })
}

// secretValue reads a Secret key from the API (Secrets are not cached).
func (rn *runner) secretValue(ctx context.Context, namespace, name, key string) (string, error) {
	var s corev1.Secret
	if err := rn.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return "", err
	}
	v, ok := s.Data[key]
	if !ok {
		return "", fmt.Errorf("no key %q", key)
	}
	return strings.TrimSpace(string(v)), nil
}

// stepResult is what one reconcile's handler step decided.
type stepResult struct {
	state   *cause.State
	stalled string        // why the object is Stalled; "" when it is not
	busy    bool          // a run is in flight or due
	paused  bool          // handlers are paused: none starts
	requeue time.Duration // when to look again; 0 for never
	// wrote: the step wrote to the object (a result's status, the retry
	// annotation cleared); cr is then the object as the write left it.
	wrote bool
	// start is the run the step decided, which the caller launches once
	// its own write of the object is made (runner.launch); nil for none.
	start *pendingRun
}

// step records a finished run, then starts the next due handler, if any.
// It writes the handlers' status patches and events itself; the caller
// writes the returned state into status.opkit.
//
// vars.Self is the object as handlers get it. For a watched object, cr is
// a copy whose generation is its count of observed changes, and create
// and update are about its projection (cause.Projection).
func (rn *runner) step(ctx context.Context, cr *unstructured.Unstructured, vars definition.Vars) (*stepResult, error) {
	st := rn.state(cr)
	res := &stepResult{state: st}
	defer rn.remember(cr, st)
	var subject map[string]any // nil: the spec
	if rn.watched {
		subject = cause.Projection(vars.Self, rn.def.Handlers)
		g := cause.Observe(st, subject, cr.GetDeletionTimestamp() != nil, time.Now())
		view := &unstructured.Unstructured{Object: maps.Clone(cr.Object)}
		md, _ := cr.Object["metadata"].(map[string]any)
		view.Object["metadata"] = maps.Clone(md)
		view.SetGeneration(g)
		cr = view
	}

	if v, ok := cr.GetAnnotations()[v1alpha1.RetryAnnotation]; ok && rn.watched && v != st.RetrySeen && !failing(st) {
		st.RetrySeen = v // a value set before anything failed asks for nothing
	}
	if v, ok := cr.GetAnnotations()[v1alpha1.RetryAnnotation]; ok && (!rn.watched || v != st.RetrySeen) {
		for _, hs := range st.Handlers {
			hs.Attempt, hs.Target, hs.NextRetryAt, hs.Stalled, hs.LastError = 0, 0, "", false, ""
		}
		if rn.watched {
			st.RetrySeen = v // the annotation is the object owner's to remove
		} else {
			patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RetryAnnotation + `":null}}}`)
			if err := rn.client.Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return nil, fmt.Errorf("clearing %s: %w", v1alpha1.RetryAnnotation, err)
			}
			rn.writes.record(cr.DeepCopy())
			res.wrote = true
		}
		rn.events.Eventf(cr, nil, corev1.EventTypeNormal, "RetryRequested", "Retry", "failed attempts cleared; handlers run again")
	}

	rn.mu.Lock()
	o := rn.object(cr)
	f := o.flight
	done := f != nil && f.done
	if done {
		o.flight = nil
	}
	rn.mu.Unlock()
	if f != nil && !done {
		res.busy = true
		res.stalled = cause.Stalled(rn.def.Handlers, cr, st)
		return res, nil // its end wakes this object again
	}
	if f != nil && errors.Is(f.err, errNotRecorded) {
		// Nothing ran: no attempt is counted, and the handler runs once
		// the archive records runs again.
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", "Run", "handler %s did not run: %v; it runs once the archive records runs again", f.cause.Handler.Name, f.err)
		res.requeue = notRecordedRetry
		return res, nil
	}
	if f != nil {
		var wrote bool
		res.requeue, wrote = rn.finish(ctx, cr, f, st)
		res.wrote = res.wrote || wrote
	}

	now := rn.clock.Now()
	in := cause.Input{Handlers: rn.def.Handlers, Object: cr, State: st, Now: now, Started: rn.started, Related: vars.Related, Subject: subject,
		Visit: visitOf(rn.def.States, readState(vars.Self))} // vars.Self: a new object's initial state too (states.go)
	_, in.Paused = cr.GetAnnotations()[v1alpha1.PauseAnnotation]
	in.When = rn.whenValues(cr, vars)
	d := cause.Decide(in)
	*st = *d.State // the records the decision updated (passed, resumed, seen false)
	res.stalled = d.Stalled
	if in.Paused {
		// Removing the annotation is an update that wakes the object.
		res.paused, res.requeue = true, 0
		return res, nil
	}
	if d.Wait > 0 && (res.requeue == 0 || d.Wait < res.requeue) {
		res.requeue = d.Wait
	}
	if d.Cause != nil {
		res.busy = true
		var err error
		if res.start, err = rn.start(ctx, cr, d.Cause, vars, subject); err != nil {
			return nil, err
		}
		return res, nil
	}
	if cr.GetDeletionTimestamp() == nil {
		// No create or update handler has the generation still to do.
		if subject == nil {
			subject = cause.Spec(cr)
		}
		st.AdvanceHandled(rn.def.Handlers, cr.GetGeneration(), subject)
	}
	return res, nil
}

// failing reports whether a handler has failed attempts or has given up.
func failing(st *cause.State) bool {
	for _, hs := range st.Handlers {
		if hs.Attempt > 0 || hs.Stalled {
			return true
		}
	}
	return false
}

// whenValues evaluates the when conditions: by handler, those that can be
// known now (what a condition reads exists).
func (rn *runner) whenValues(cr *unstructured.Unstructured, vars definition.Vars) map[string]bool {
	var out map[string]bool
	for _, h := range rn.def.Handlers {
		if h.When == nil {
			continue
		}
		holds, err := h.WhenHolds(vars)
		switch {
		case err == nil:
			if out == nil {
				out = map[string]bool{}
			}
			out[h.Name] = holds
		case errors.Is(err, definition.ErrChildMissing):
			// Not known yet: nothing changes.
		default:
			rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "WhenFailed", "Evaluate", "handler %s: %v", h.Name, err)
		}
	}
	return out
}

// pendingRun is a run a step decided, its flight registered, not yet
// started: launch starts it.
type pendingRun struct {
	f     *flight
	obj   *unstructured.Unstructured // the object, as read (Events and the wake are about it)
	input bindingContext
	req   executor.Request
	alog  *archiveLog
	now   time.Time // when it was decided, in real time
}

// start prepares the run of cause c: its flight is registered, so that
// the object is busy, and the caller launches it once its own writes are
// made. It returns nil when the archive shows the run succeeded before a
// crash kept the engine from recording it: it is not run again, and its
// end is recorded by the next step. subject is what create and update are
// about (nil: the spec).
func (rn *runner) start(ctx context.Context, cr *unstructured.Unstructured, c *cause.Cause, vars definition.Vars, subject map[string]any) (*pendingRun, error) {
	// now is real time (c.Due is Options.Clock's): the run's id and the
	// wait for a slot.
	h, g, now := c.Handler, c.Generation, time.Now()
	if subject == nil {
		subject = cause.Spec(cr)
	}
	f := &flight{cause: c, spec: subject}
	switch c.Trigger {
	case v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnEnter, v1alpha1.OnExit:
		ok, err := rn.archive.Succeeded(ctx, c.Key)
		if err != nil {
			return nil, err
		}
		if ok {
			f.done, f.result = true, &executor.Result{}
			f.run = &archive.Run{Trigger: c.Trigger, Generation: g, Attempt: c.Attempt, Key: c.Key}
			rn.mu.Lock()
			rn.object(cr).flight = f
			rn.mu.Unlock()
			rn.wakeUp(cr)
			return nil, nil
		}
	}
	trigger, key, attempt := c.Trigger, c.Key, c.Attempt
	f.run = &archive.Run{
		ID: archive.NewID(now), Operator: rn.def.Operator.Name, Handler: h.Name, Action: h.Action(), Trigger: trigger,
		APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Namespace: cr.GetNamespace(), Name: cr.GetName(), UID: string(cr.GetUID()), Generation: g,
		Key: key, Attempt: attempt, Diff: c.Diff, StartedAt: now.UTC(), Outcome: archive.Running,
	}
	rn.mu.Lock()
	rn.object(cr).flight = f
	rn.mu.Unlock()
	p := &pendingRun{f: f, obj: cr.DeepCopy(), now: now}
	p.input = bindingContext{
		Operator: rn.def.Operator.Name, Handler: h.Name, Trigger: trigger, RunID: f.run.ID, IdempotencyKey: key,
		Attempt: attempt, Old: c.Old, Diff: c.Diff, Children: redactSecrets(vars.Children), Related: redactRelatedSecrets(vars.Related),
	}
	p.alog = &archiveLog{ctx: rn.ctx, store: rn.archive, id: f.run.ID}
	p.req = executor.Request{
		RunID: f.run.ID, Handler: h.Name, Trigger: trigger, Key: key, Attempt: attempt, Timeout: h.Timeout,
		Log:    p.alog,
		Object: &executor.ObjectRef{APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Namespace: cr.GetNamespace(), Name: cr.GetName(), UID: cr.GetUID()},
	}
	if rn.watched {
		p.req.Object.UID = "" // a watched object owns nothing of opkit's: its Jobs outlive it
	}
	return p, nil
}

// launch starts a run start prepared, with self as its binding context's
// object: the object as the caller's writes left it, so that the run sees
// every write opkit made before it started (read-your-writes). A nil run
// launches nothing.
func (rn *runner) launch(p *pendingRun, self map[string]any) {
	if p == nil {
		return
	}
	f, run, h := p.f, p.f.run, p.f.cause.Handler
	p.input.Object = self
	input, err := json.Marshal(p.input)
	if err != nil {
		// Nothing ran: the step records the failure as the run's.
		rn.mu.Lock()
		f.done, f.err = true, &executor.Failure{Message: fmt.Sprintf("encoding the binding context: %v", err), Permanent: true}
		rn.mu.Unlock()
		rn.wakeUp(p.obj)
		return
	}
	req := p.req
	req.Input = input
	operator, trigger, attempt, now, woken, alog := rn.def.Operator.Name, run.Trigger, run.Attempt, p.now, p.obj, p.alog
	rn.metrics.queued.WithLabelValues(operator).Inc()
	log := rn.log.WithValues("namespace", woken.GetNamespace(), "name", woken.GetName(), "handler", h.Name, "run", run.ID)
	rn.running.Add(1)
	go func() {
		defer rn.running.Done()
		var res *executor.Result
		var err error
		// The run waits for a slot unrecorded: the archive holds runs that
		// started, with their own duration; the wait is a metric.
		recorded := false
		select {
		case rn.slots <- struct{}{}:
			rn.metrics.queued.WithLabelValues(operator).Dec()
			started := time.Now()
			rn.metrics.queueWait.WithLabelValues(operator).Observe(started.Sub(now).Seconds())
			run.StartedAt = started.UTC()
			if ierr := rn.archive.Insert(rn.ctx, run); ierr != nil {
				err = fmt.Errorf("%w: %w", errNotRecorded, ierr) // nothing runs that is not recorded
			} else {
				recorded = true
				if !periodic(trigger) {
					// A periodic run may well find nothing to do (skipped):
					// its end says what matters.
					rn.events.Eventf(woken, nil, corev1.EventTypeNormal, "HandlerStarted", runAction(run.ID), "handler %s (%s, attempt %d): run %s", h.Name, trigger, attempt, rn.runRef(run.ID))
				}
				rn.metrics.inFlight.WithLabelValues(operator).Inc()
				res, err = rn.executor(h.Name).Run(rn.ctx, req)
				rn.metrics.inFlight.WithLabelValues(operator).Dec()
			}
			<-rn.slots
		case <-rn.ctx.Done():
			rn.metrics.queued.WithLabelValues(operator).Dec()
		}
		alog.Flush()
		if rn.ctx.Err() != nil {
			// The operator stopped or changed: the run is cancelled, and the
			// next engine runs it again with the same key.
			if recorded {
				run.Outcome, run.FinishedAt, run.Error = archive.Cancelled, time.Now().UTC(), "the operator stopped during the run"
				if err := rn.archive.Finish(context.WithoutCancel(rn.ctx), run); err != nil {
					log.Error(err, "recording the cancelled run; the next engine marks it Cancelled")
				}
			}
			return
		}
		rn.mu.Lock()
		f.done, f.result, f.err = true, res, err
		rn.mu.Unlock()
		rn.wakeUp(woken)
	}()
}

func (rn *runner) wakeUp(cr *unstructured.Unstructured) {
	select {
	case rn.wake <- event.GenericEvent{Object: cr}:
	case <-rn.ctx.Done():
	}
}

// finish records a finished run: the result's status patch and events, the
// handler's record, the archive's, and returns when to look again, and
// whether it wrote the result's status (cr is then the object as the
// write left it).
func (rn *runner) finish(ctx context.Context, cr *unstructured.Unstructured, f *flight, st *cause.State) (requeue time.Duration, wrote bool) {
	run, h := f.run, f.cause.Handler
	now := rn.clock.Now().UTC() // what the retry and the requeue count from
	failure := runFailure(f.result, f.err)
	if failure == nil && f.result.Refuse != "" {
		failure = refuseOutsideEvent(run.Trigger)
	}
	if failure == nil && f.result.Admission() {
		failure = &executor.Failure{Message: "the result has fields of an admission answer (allowed, message, patch, warnings), which only a handler on validate or mutate gives", Permanent: true}
	}
	if failure == nil && len(f.result.Status) > 0 && rn.watched {
		failure = &executor.Failure{Message: "the result sets status, but opkit never writes to a watched object: post events or write to objects of your own instead", Permanent: true}
	}
	if failure == nil && len(f.result.Status) > 0 {
		patch, _ := json.Marshal(map[string]any{"status": f.result.Status})
		if err := rn.client.Status().Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err != nil {
			failure = &executor.Failure{Message: fmt.Sprintf("the API refused the result's status patch: %v", apiMessage(err))}
		} else {
			rn.writes.record(cr.DeepCopy())
			wrote = true
			run.Writes = append(run.Writes, "status: "+strings.Join(slices.Sorted(maps.Keys(f.result.Status)), ", "))
		}
	}
	if failure == nil {
		for _, e := range f.result.Events {
			rn.events.Eventf(cr, nil, e.Type, e.Reason, runAction(run.ID), "%s", e.Message)
			run.Writes = append(run.Writes, "event "+e.Type+" "+e.Reason)
		}
	}
	if failure == nil {
		run.Outcome = archive.Succeeded
		if f.result.Skipped {
			run.Outcome = archive.Skipped
		}
		requeue = f.result.RequeueDuration()
		st.Succeeded(rn.def.Handlers, f.cause, f.spec, requeue, now)
		if run.Trigger == v1alpha1.OnDelete {
			requeue = 0
		}
	} else {
		run.Error = failure.Message
		gaveUp, retryAt := st.Failed(f.cause, failure.Message, failure.Permanent, now)
		if gaveUp {
			run.Outcome = archive.GaveUp
		} else {
			run.Outcome = archive.Failed
			requeue = retryAt.Sub(now)
			run.NextRetryAt = retryAt
			rn.metrics.retries.WithLabelValues(rn.def.Operator.Name, h.Name).Inc()
		}
	}
	if run.ID == "" {
		return requeue, wrote // it had succeeded before a crash: nothing ran now
	}
	run.FinishedAt = time.Now().UTC()
	if err := rn.archive.Finish(ctx, run); err != nil {
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", runAction(run.ID), "run %s ended %s, which the archive could not record (%v); it is recorded once the archive can", run.ID, run.Outcome, err)
	}
	if rn.finished != nil {
		rn.finished(*run)
	}
	rn.metrics.observe(rn.def.Operator.Name, run)
	lr := &cause.LastRun{ID: run.ID, Handler: h.Name, Trigger: run.Trigger, Outcome: string(run.Outcome), Message: truncate(run.Error), Attempt: run.Attempt}
	if !run.NextRetryAt.IsZero() {
		lr.NextRetryAt = run.NextRetryAt.Format(time.RFC3339)
	}
	st.LastRun = lr
	switch run.Outcome {
	case archive.Skipped:
		// Nothing was done: no Event, and the archive keeps the last one.
	case archive.Succeeded:
		rn.events.Eventf(cr, nil, corev1.EventTypeNormal, "HandlerSucceeded", runAction(run.ID), "handler %s succeeded: run %s", h.Name, rn.runRef(run.ID))
	case archive.Failed:
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "HandlerFailed", runAction(run.ID), "handler %s failed (attempt %d of %d, next in %s): %s: run %s", h.Name, run.Attempt, h.Retry.MaxAttempts, requeue.Round(time.Second), truncate(run.Error), rn.runRef(run.ID))
	default:
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "HandlerGaveUp", runAction(run.ID), "handler %s gave up after %d attempts: %s: run %s", h.Name, run.Attempt, truncate(run.Error), rn.runRef(run.ID))
	}
	return requeue, wrote
}

// runFailure is how a run failed: its executor's error, or the error its
// result reports; nil when it succeeded.
func runFailure(res *executor.Result, err error) *executor.Failure {
	switch {
	case err != nil:
		return executor.AsFailure(err)
	case res.Error != nil:
		return &executor.Failure{Message: res.Error.Message, Permanent: res.Error.Permanent}
	}
	return nil
}

// errNotRecorded fails a run the archive could not record: it did not run.
var errNotRecorded = errors.New("the archive could not record the run")

// notRecordedRetry is how soon a run the archive could not record is tried
// again.
const notRecordedRetry = 5 * time.Second

// periodic reports whether a trigger comes back by itself (schedule,
// requeue), as opposed to a change of the object.
func periodic(trigger string) bool {
	return trigger == v1alpha1.OnSchedule || trigger == v1alpha1.TriggerRequeue
}

// runAction is the action of a run's Events. It names the run: the events
// library folds Events that share type, reason and action into one series
// showing the first message, which would hide the later runs' ids.
func runAction(id string) string { return "Run " + id }

// runRef names a run in an Event: its id, and its console page when the
// console's URL is known.
func (rn *runner) runRef(id string) string {
	if rn.console == "" {
		return id
	}
	return id + " (" + rn.console + "/runs/" + id + ")"
}

// wait waits for the runs' goroutines; the operator's context, once done,
// cancels the runs.
func (rn *runner) wait() { rn.running.Wait() }

// bindingContext is the input of every handler. docs/handlers.md and its
// JSON Schema describe it.
type bindingContext struct {
	Operator       string                    `json:"operator"`
	Handler        string                    `json:"handler"`
	Trigger        string                    `json:"trigger"`
	RunID          string                    `json:"runId"`
	IdempotencyKey string                    `json:"idempotencyKey"`
	Attempt        int                       `json:"attempt"`
	Object         map[string]any            `json:"object"`
	Old            map[string]any            `json:"old"`
	Diff           []archive.Change          `json:"diff"`
	Children       map[string]map[string]any `json:"children"`
	Related        map[string]any            `json:"related,omitempty"`
	// Schedule is the slot of an operator-wide schedule's run.
	Schedule *scheduleContext `json:"schedule,omitempty"`
	// Event is the delivery of a run on event.
	Event *eventContext `json:"event,omitempty"`
}

// redactSecrets drops the values of Secret children: handlers get their
// names, never their data, and so nothing of them reaches the archive.
func redactSecrets(children map[string]map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(children))
	for id, obj := range children {
		out[id] = redactSecret(obj)
	}
	return out
}

// redactRelatedSecrets is redactSecrets for related objects and lists.
func redactRelatedSecrets(related map[string]any) map[string]any {
	if len(related) == 0 {
		return nil
	}
	out := make(map[string]any, len(related))
	for id, v := range related {
		switch v := v.(type) {
		case map[string]any:
			out[id] = redactSecret(v)
		case []any:
			items := make([]any, len(v))
			for i, it := range v {
				if obj, ok := it.(map[string]any); ok {
					it = redactSecret(obj)
				}
				items[i] = it
			}
			out[id] = items
		default:
			out[id] = v
		}
	}
	return out
}

// redactSecret is a Secret without its data; any other object as it is.
func redactSecret(obj map[string]any) map[string]any {
	if obj["kind"] == "Secret" && obj["apiVersion"] == "v1" {
		obj = maps.Clone(obj)
		delete(obj, "data")
		delete(obj, "stringData")
	}
	return obj
}

// apiMessage is the API server's message for a refused request.
func apiMessage(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Message != "" {
		return s.Status().Message
	}
	return err.Error()
}

// archiveLog appends a run's log to the archive as it comes, in pieces of
// up to logFlushBytes or every logFlushEvery: a handler writing many short
// lines costs a few archive writes a second, not one per line. Flush writes
// what is left when the run ends. A failing archive does not fail the
// handler; the log is then incomplete.
type archiveLog struct {
	ctx   context.Context
	store archive.Recorder
	id    string

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer
}

const (
	logFlushBytes = 64 << 10
	logFlushEvery = 200 * time.Millisecond
)

func (l *archiveLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	switch {
	case len(l.buf) >= logFlushBytes:
		l.flushLocked()
	case l.timer == nil:
		l.timer = time.AfterFunc(logFlushEvery, l.Flush)
	}
	return len(p), nil
}

// Flush writes the buffered log to the archive.
func (l *archiveLog) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *archiveLog) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if len(l.buf) == 0 {
		return
	}
	_ = l.store.AppendLog(context.WithoutCancel(l.ctx), l.id, l.buf)
	l.buf = l.buf[:0]
}

func stalledCondition(step *stepResult) metav1.Condition {
	if step.stalled != "" {
		return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "HandlerGaveUp", Message: truncate(step.stalled)}
	}
	return metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: "NoStalledHandler", Message: "no handler has given up"}
}

// finalize runs the delete handlers of an object being deleted, then
// removes opkit's finalizer.
func (r *reconciler) finalize(ctx context.Context, cr *unstructured.Unstructured, fin string) (reconcile.Result, error) {
	if !r.runner.hasDelete() {
		return r.patchFinalizer(ctx, cr, fin, false)
	}
	step, err := r.runner.step(ctx, cr, definition.Vars{Self: cr.Object})
	if err != nil {
		return reconcile.Result{}, err
	}
	if !step.busy && !step.paused && step.stalled == "" && step.requeue == 0 {
		return r.patchFinalizer(ctx, cr, fin, false)
	}
	// Still at work, waiting for a retry, or stalled: record where it is.
	own, _, _ := unstructured.NestedMap(cr.Object, "status", "opkit")
	if own == nil {
		own = map[string]any{}
	}
	before := maps.Clone(own)
	step.state.WriteTo(own)
	conds := statusConditions(cr)
	changed := meta.SetStatusCondition(&conds, stalledCondition(step))
	if changed || !sameValue(before, own) {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"opkit": withRemovals(before, own), "conditions": conds}})
		if err = r.client.Status().Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err == nil {
			r.writes.record(cr.DeepCopy())
		}
	}
	r.runner.launch(step.start, cr.Object) // after the write, which its object then holds
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{RequeueAfter: step.requeue}, nil
}

// patchFinalizer adds or removes opkit's finalizer with a JSON patch
// guarded by the resourceVersion read: other controllers' finalizers are
// never rewritten, and a concurrent change makes the patch fail and the
// object be read again.
func (r *reconciler) patchFinalizer(ctx context.Context, cr *unstructured.Unstructured, fin string, add bool) (reconcile.Result, error) {
	read := cr.GetResourceVersion()
	res, err := patchFinalizer(ctx, r.client, cr, fin, add)
	if err == nil && cr.GetResourceVersion() != read {
		r.writes.record(cr.DeepCopy()) // patched: cr is the API's answer
	}
	return res, err
}

// patchFinalizer is reconciler.patchFinalizer with client c.
func patchFinalizer(ctx context.Context, c client.Client, cr *unstructured.Unstructured, fin string, add bool) (reconcile.Result, error) {
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cr.GetResourceVersion()}}
	finalizers := cr.GetFinalizers()
	switch i := slices.Index(finalizers, fin); {
	case add && len(finalizers) == 0:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/finalizers", "value": []string{fin}})
	case add:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/finalizers/-", "value": fin})
	case i < 0:
		return reconcile.Result{}, nil
	default:
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": fin}, map[string]any{"op": "remove", "path": path})
	}
	patch, _ := json.Marshal(ops)
	err := c.Patch(ctx, cr, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsConflict(err) || (apierrors.IsInvalid(err) && strings.Contains(err.Error(), "test")):
		// The object changed since it was read: read it again.
		return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("updating finalizer %s: %w", fin, err)
	}
	return reconcile.Result{}, nil
}
