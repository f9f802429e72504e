package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// flight is a run in progress for one object.
type flight struct {
	cause  *cause.Cause   // why it runs; Due is when it was decided, it starts when a slot is free
	spec   map[string]any // the object's spec when the run started
	run    *archive.Run   // its ID is "" when the archive showed the key had succeeded
	done   bool
	result *executor.Result
	err    error
	// ended, when a caller waits for the run (LaunchWaiting), is closed
	// at its end; awaited says the caller still waits, so that the end
	// wakes no one: the caller steps the object itself.
	ended   chan struct{}
	awaited bool
	// span is the run's, from its decision to its record (runSpan);
	// adopted the object's trace annotation its reconcile continued,
	// which the handler's record then holds as seen.
	span    trace.Span
	adopted string
	// log is the run's log in the archive, which holds its tail from the
	// run's end until the end's record (Runner.recordEnd) takes it.
	// forgotten: the memory dropped the object (it is gone, or another
	// of its name took its place), and no step will record the end.
	log       *archiveLog
	forgotten bool
}

// orphan marks f forgotten by the memory, which holds mu: the log of a
// run that ended is written now, since no end's record will carry its
// tail; one still running writes it at its end (Runner.end).
func (f *flight) orphan() {
	f.forgotten = true
	if f.done && f.log != nil {
		go f.log.release()
	}
}

// end records a run's end and wakes its object, unless a caller waits
// for it (LaunchWaiting).
func (rn *Runner) end(f *flight, woken *unstructured.Unstructured, res *executor.Result, err error) {
	rn.mem.mu.Lock()
	f.done, f.result, f.err = true, res, err
	awaited, forgotten := f.awaited, f.forgotten
	rn.mem.mu.Unlock()
	if forgotten && f.log != nil {
		f.log.release()
	}
	if f.ended != nil {
		close(f.ended)
	}
	if !awaited {
		rn.Wake(woken)
	}
}

// errNotRecorded fails a run the archive could not record: it did not run.
var errNotRecorded = errors.New("the archive could not record the run")

// notRecordedRetry is how soon a run the archive could not record is tried
// again.
const notRecordedRetry = 5 * time.Second

// Pending is a run a step decided, its flight registered, not yet
// started: Launch starts it.
type Pending struct {
	f     *flight
	obj   *unstructured.Unstructured // the object, as read (Events and the wake are about it)
	input BindingContext
	req   executor.Request
	// recorded is the binding context a re-run with the same input gets
	// (its run's, as the archive kept it); nil for every other run.
	recorded *BindingContext
	alog     *archiveLog
	now      time.Time // when it was decided, in real time
	// writeFirst: the run starts after the caller's write (Step.writeFirst).
	writeFirst bool
	// carried is the watched object's record its start writes (Carry).
	carried *Carried
}

// start prepares the run of cause c: its flight is registered, so that
// the object is busy, and the caller launches it once its own writes are
// made. It returns nil when the archive shows the run succeeded before a
// crash kept the engine from recording it: it is not run again, and its
// end is recorded by the next step. subject is what create and update are
// about (nil: the spec). newLife: no run can have c's key yet (a watched
// object first seen by this step), and the archive is not asked. retry
// is the trace of the handler's failed attempt, which the run continues
// ("" for none).
func (rn *Runner) start(ctx context.Context, cr *unstructured.Unstructured, c *cause.Cause, vars definition.Vars, subject map[string]any, newLife bool, retry string) (*Pending, error) {
	// now is real time (c.Due is Options.Clock's): the run's id and the
	// wait for a slot.
	h, g, now := c.Handler, c.Generation, time.Now()
	if subject == nil {
		subject = cause.Spec(cr)
	}
	f := &flight{cause: c, spec: subject, span: noSpan}
	switch c.Trigger {
	case v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnEnter, v1alpha1.OnExit:
		if newLife {
			break
		}
		done, err := rn.archive.SucceededRun(ctx, c.Key)
		if err != nil {
			return nil, err
		}
		if done != nil {
			// Its result as recorded: the crash may have come before the
			// engine merged its status (the merge is idempotent).
			f.done, f.result = true, recordedResult(done)
			f.run = &archive.Run{Trigger: c.Trigger, Generation: g, Attempt: c.Attempt, Key: c.Key}
			rn.mem.mu.Lock()
			rn.mem.object(cr).flight = f
			rn.mem.mu.Unlock()
			rn.Wake(cr)
			return nil, nil
		}
	}
	trigger, key, attempt := c.Trigger, c.Key, c.Attempt
	f.run = archive.NewRun(rn.def.Operator.Name, h.Name, h.Action(), trigger, cr, now)
	f.run.Generation, f.run.Key, f.run.Attempt, f.run.Diff = g, key, attempt, c.Diff
	f.span, f.adopted = rn.retrySpan(ctx, f.run, now, retry), tracing.Adopted(ctx)
	rn.mem.mu.Lock()
	rn.mem.object(cr).flight = f
	rn.mem.mu.Unlock()
	p := &Pending{f: f, obj: cr.DeepCopy(), now: now}
	p.input = BindingContext{
		Operator: rn.def.Operator.Name, Handler: h.Name, Trigger: trigger, RunID: f.run.ID, IdempotencyKey: key,
		Attempt: attempt, Old: c.Old, Diff: c.Diff, Children: RedactSecrets(vars.Children), Related: RedactRelatedSecrets(vars.Related),
	}
	p.alog = &archiveLog{ctx: rn.ctx, store: rn.archive, id: f.run.ID, held: &rn.held}
	f.log = p.alog
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

// recordedResult is what a succeeded run answered, as the archive kept it
// (Secrets' values redacted, which a status never holds): its status and
// requeue; its Events are not posted again. None recorded (a result
// over MaxKept), or one that does not parse, is none.
func recordedResult(run *archive.Run) *executor.Result {
	res, err := executor.ParseResult(run.Result) // empty: an empty result
	if err != nil {
		return &executor.Result{}
	}
	return &executor.Result{Status: res.Status, RequeueAfter: res.RequeueAfter}
}

// Launch starts a run Step prepared, with self as its binding context's
// object: the object as the caller's writes left it, so that the run sees
// every write opkit made before it started (read-your-writes). A nil run
// launches nothing.
func (rn *Runner) Launch(p *Pending, self map[string]any) {
	if p == nil {
		return
	}
	f, run := p.f, p.f.run
	ctx := trace.ContextWithSpan(rn.ctx, f.span)
	bc := p.input
	bc.Object = self
	if r := p.recorded; r != nil {
		// The recorded input, as the run it repeats got it, named as the
		// re-run's.
		bc = *r
		bc.Trigger, bc.RunID, bc.IdempotencyKey, bc.Attempt, bc.RerunOf = p.input.Trigger, p.input.RunID, p.input.IdempotencyKey, p.input.Attempt, p.input.RerunOf
	}
	bc.Traceparent, bc.Tracestate = traceContext(f.span, run)
	input, err := json.Marshal(bc)
	if err != nil {
		// Nothing ran: the step records the failure as the run's.
		rn.end(f, p.obj, nil, &executor.Failure{Message: fmt.Sprintf("encoding the binding context: %v", err), Permanent: true})
		return
	}
	req := p.req
	req.Input = input
	run.Input = kept(input)
	if p.carried != nil {
		run.Record = p.carried.Record
	}
	woken := p.obj
	log := rn.log.WithValues("namespace", woken.GetNamespace(), "name", woken.GetName(), "handler", f.cause.Handler.Name, "run", run.ID)
	rn.metrics.queued.WithLabelValues(run.Operator).Inc()
	rn.running.Add(1)
	go func() {
		defer rn.running.Done()
		res, recorded, err := rn.execute(ctx, run, req, p.now, func() {
			run.Record = nil // written with the start; the end writes its own, if any
			rn.carriedPersisted(p)
			if rn.runEvents && !periodic(run.Trigger) {
				// A periodic run may well find nothing to do (skipped):
				// its end says what matters.
				rn.events.Eventf(woken, nil, corev1.EventTypeNormal, "HandlerStarted", runAction(run.ID), "handler %s (%s, attempt %d): run %s", run.Handler, run.Trigger, run.Attempt, rn.runRef(run.ID))
			}
		})
		if recorded {
			// The log's last bytes go with the run's end, in its
			// transaction (archive.Run.LogTail), not in a write of their
			// own. A run not recorded wrote none.
			p.alog.End()
		}
		if rn.ctx.Err() != nil {
			// The operator stopped or changed: the run is cancelled, and the
			// next engine runs it again with the same key.
			if recorded {
				rn.cancelled(run, p.alog, log)
			}
			endRunSpan(f.span, run)
			return
		}
		rn.end(f, woken, res, err)
	}()
}

// Waitable reports whether LaunchWaiting would wait for p's run: a run,
// not a Job handler's, while one of the operator's slots is free (else
// the run would wait for one, and the worker with it).
func (rn *Runner) Waitable(p *Pending) bool {
	return p != nil && !p.writeFirst && p.f.cause.Handler.Job == nil && len(rn.slots) < cap(rn.slots)
}

// LaunchWaiting is Launch for a caller that waits up to wait for the
// run's end, so that a short run is recorded by the same write as the
// step that decided it (a custom resource's reconcile: one status patch,
// not two). It reports whether the run ended in time: the caller then
// steps the object again, which records the end, and the end wakes no
// one. Otherwise the run goes on and its end wakes the object, as
// Launch's. A run of a Job handler is not waited for: it lasts longer
// than any wait worth a worker.
func (rn *Runner) LaunchWaiting(ctx context.Context, p *Pending, self map[string]any, wait time.Duration) bool {
	if wait <= 0 || !rn.Waitable(p) {
		rn.Launch(p, self)
		return false
	}
	f := p.f
	f.ended, f.awaited = make(chan struct{}), true
	rn.Launch(p, self)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.ended:
	case <-t.C:
	case <-ctx.Done():
	}
	rn.mem.mu.Lock()
	defer rn.mem.mu.Unlock()
	f.awaited = f.done // not done: its end wakes the object
	return f.done
}

// execute runs one recorded run: it waits for a slot (unrecorded: the
// archive holds runs that started, with their own duration; the wait is
// a metric, counted from due), records the run's start, calls started,
// and executes it. recorded is false when the run never started: the
// archive refused it (err wraps errNotRecorded) or ctx ended first. The
// caller counted the run as queued.
func (rn *Runner) execute(ctx context.Context, run *archive.Run, req executor.Request, due time.Time, started func()) (res *executor.Result, recorded bool, err error) {
	operator := run.Operator
	select {
	case rn.slots <- struct{}{}:
	case <-ctx.Done():
		rn.metrics.queued.WithLabelValues(operator).Dec()
		return nil, false, nil
	}
	defer func() { <-rn.slots }()
	rn.metrics.queued.WithLabelValues(operator).Dec()
	span := trace.SpanFromContext(ctx)
	span.AddEvent("slot")
	at := time.Now()
	rn.metrics.queueWait.WithLabelValues(operator).Observe(at.Sub(due).Seconds())
	run.StartedAt = at.UTC()
	if ierr := rn.archive.Insert(ctx, run); ierr != nil {
		return nil, false, fmt.Errorf("%w: %w", errNotRecorded, ierr) // nothing runs that is not recorded
	}
	span.AddEvent("recorded")
	started()
	var ended func()
	req.OnRunner, ended = rn.onRunner(run)
	rn.metrics.inFlight.WithLabelValues(operator).Inc()
	res, err = rn.executor(run.Handler).Run(ctx, req)
	ended()
	rn.metrics.inFlight.WithLabelValues(operator).Dec()
	span.AddEvent("executed")
	return res, true, err
}

// cancelled records a run the operator's stop cut off: the next engine
// runs it again with its key (or marks it Cancelled, if this record
// fails).
func (rn *Runner) cancelled(run *archive.Run, l *archiveLog, log interface{ Error(error, string, ...any) }) {
	run.Outcome, run.FinishedAt, run.Error = archive.Cancelled, time.Now().UTC(), "the operator stopped during the run"
	if err := rn.recordEnd(context.WithoutCancel(rn.ctx), run, l); err != nil {
		log.Error(err, "recording the cancelled run; the next engine marks it Cancelled")
	}
}

// BindingContext is the input of every handler. docs/handlers.md and its
// JSON Schema describe it.
type BindingContext struct {
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
	Schedule *ScheduleContext `json:"schedule,omitempty"`
	// Event is the delivery of a run on event.
	Event *EventContext `json:"event,omitempty"`
	// RerunOf is, in a re-run (trigger rerun), the id of the run it
	// repeats.
	RerunOf string `json:"rerunOf,omitempty"`
	// Traceparent and Tracestate are the W3C trace context of the run's
	// span (package tracing): a handler's own spans continue it. Absent
	// when the run has none (tracing off, and nothing traced came in).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// ScheduleContext is the binding context's schedule of an operator-wide
// schedule's run.
type ScheduleContext struct {
	// Slot is the time the run is for, RFC 3339: for a run asked for by a
	// person, when they asked.
	Slot string `json:"slot"`
	// Manual is who asked for the run and why (opkit schedule run); nil
	// for a slot's run.
	Manual *ManualContext `json:"manual,omitempty"`
}

// ManualContext is who asked for an operator-wide schedule's run now.
type ManualContext struct {
	// Request is the request's id, in the run's key.
	Request string `json:"request"`
	By      string `json:"by"`
	Reason  string `json:"reason,omitempty"`
}

// EventContext is the binding context's event: the delivery a run on
// event handles.
type EventContext struct {
	// ID is the archive's id of the delivery (opkit events show ID).
	ID     string `json:"id"`
	Source string `json:"source"`
	// DeliveryID is the sender's id of it; Event what it says it is.
	DeliveryID string `json:"deliveryId,omitempty"`
	Event      string `json:"event,omitempty"`
	ReceivedAt string `json:"receivedAt"`
	// Headers by lower-case name, first value, credentials redacted.
	Headers map[string]string `json:"headers"`
	// Payload is the body, as received.
	Payload json.RawMessage `json:"payload"`
	// RedeliveryOf is, for a delivery redelivered on purpose (opkit events
	// redeliver), the archive's id of the delivery it handles again;
	// RedeliveredBy who asked and RedeliveryReason why. Absent otherwise.
	RedeliveryOf     string `json:"redeliveryOf,omitempty"`
	RedeliveredBy    string `json:"redeliveredBy,omitempty"`
	RedeliveryReason string `json:"redeliveryReason,omitempty"`
}

// RedactSecrets drops the values of Secret children: handlers get their
// names, never their data, and so nothing of them reaches the archive.
func RedactSecrets(children map[string]map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(children))
	for id, obj := range children {
		out[id] = redactSecret(obj)
	}
	return out
}

// RedactRelatedSecrets is RedactSecrets for related objects and lists.
func RedactRelatedSecrets(related map[string]any) map[string]any {
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
