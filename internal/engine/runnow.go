package engine

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/run"
)

// A run now (opkit schedule run) is asked for by the annotation
// v1alpha1.RunNowAnnotation(handler) on the Operator, which only an
// Operator read from the cluster has. The Operator watch, which only the
// leader runs, hands each request to the calendar running that Operator;
// the calendar runs it once, with the key v1alpha1.RunNowKey and the
// trigger manual, retried by the handler's policy like a slot, then posts
// an Event on the Operator saying how it ended (RanNow, RunNowFailed)
// and removes the annotation (a JSON patch guarded by a test of the
// value read, so that a newer request is not lost). A request that cannot
// apply (the handler is not one of the operator's schedules, the value
// is not a request) is refused the same way: an Event RunNowRefused
// saying why, and the annotation removed. An engine stopped during the
// run leaves the annotation: the next leader runs the request again with
// its key, and one whose run succeeded runs nothing.

// Reasons of the Events that answer a request to run now; opkit schedule
// run reads them.
const (
	ReasonRanNow        = "RanNow"
	ReasonRunNowFailed  = "RunNowFailed"
	ReasonRunNowRefused = "RunNowRefused"
)

// manualRuns hands a calendar the requests to run now of its Operator,
// each taken once by this engine.
type manualRuns struct {
	requests chan manualRequest
	stopped  <-chan struct{} // the calendar's context's Done
	mu       sync.Mutex
	taken    map[string]bool // by annotation and value
}

// manualRequest is one request read from the Operator.
type manualRequest struct {
	op         *v1alpha1.Operator // as read, for its Events and the patch
	annotation string
	value      string
	handler    *definition.Handler
	request    v1alpha1.RunNow
}

func newManualRuns(stopped <-chan struct{}) *manualRuns {
	return &manualRuns{requests: make(chan manualRequest), stopped: stopped, taken: map[string]bool{}}
}

// take hands r to the calendar, unless this engine took it before; false
// when the calendar has stopped.
func (m *manualRuns) take(ctx context.Context, r manualRequest) {
	id := r.annotation + "=" + r.value
	m.mu.Lock()
	if m.taken[id] {
		m.mu.Unlock()
		return
	}
	m.taken[id] = true
	m.mu.Unlock()
	select {
	case m.requests <- r:
	case <-m.stopped:
	case <-ctx.Done():
	}
}

// manualLoop runs the requests to run now handed to m until ctx ends,
// then waits for the runs in flight (cut off by ctx, they leave their
// annotation for the next engine).
func (e *Engine) manualLoop(ctx context.Context, rn *run.Runner, d *definition.Definition, m *manualRuns) {
	var runs sync.WaitGroup
	defer runs.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-m.requests:
			runs.Go(func() { e.runNow(ctx, rn, d, r) })
		}
	}
}

// runNow runs one request to run now, answers it with an Event on the
// Operator and removes its annotation; unless the engine stops first.
func (e *Engine) runNow(ctx context.Context, rn *run.Runner, d *definition.Definition, r manualRequest) {
	h, req := r.handler, r.request
	key := v1alpha1.RunNowKey(d.Operator.Name, h.Name, req)
	log := e.mgr.GetLogger().WithValues("operator", d.Operator.Name, "handler", h.Name, "request", req.ID)
	asked := fmt.Sprintf("handler %s run now (request %s, asked by %s%s)", h.Name, req.ID, req.By, reasonSuffix(req.Reason))
	slot := req.At
	if _, err := time.Parse(time.RFC3339, slot); err != nil {
		slot = time.Now().UTC().Format(time.RFC3339)
	}
	out := rn.RunForOperator(ctx, run.OperatorRun{
		Handler: h, Trigger: v1alpha1.TriggerManual, UID: string(d.Operator.UID), Key: key, Log: log,
		Schedule: &run.ScheduleContext{Slot: slot, Manual: &run.ManualContext{Request: req.ID, By: req.By, Reason: req.Reason}},
		Actor:    req.By,
		Note:     fmt.Sprintf("run now by %s%s (request %s, asked at %s).", req.By, reasonSuffix(req.Reason), req.ID, req.At),
	})
	if out.Stopped || ctx.Err() != nil {
		return // the annotation stays: the next engine runs it, with its key
	}
	reason, eventType, note := ReasonRanNow, corev1.EventTypeNormal, ""
	switch {
	case out.Run == nil:
		note = fmt.Sprintf("%s: a run of its key %s had succeeded already; nothing ran again (opkit runs --operator %s --handler %s)", asked, key, d.Operator.Name, h.Name)
	case out.Run.Outcome == archive.Succeeded || out.Run.Outcome == archive.Skipped:
		note = fmt.Sprintf("%s: %s, run %s", asked, out.Run.Outcome, out.Run.ID)
	default:
		reason, eventType = ReasonRunNowFailed, corev1.EventTypeWarning
		note = fmt.Sprintf("%s: %s after %d attempt(s): %s: run %s", asked, out.Run.Outcome, out.Run.Attempt, out.Run.Error, out.Run.ID)
	}
	e.answerRunNow(context.WithoutCancel(ctx), r, eventType, reason, note)
}

// answerRunNow posts the answer to a request on its Operator and removes
// the request's annotation, unless it changed since it was read.
func (e *Engine) answerRunNow(ctx context.Context, r manualRequest, eventType, reason, note string) {
	e.mgr.GetEventRecorder("opkit").Eventf(r.op, nil, eventType, reason, "RunNow", "%s", truncate(note))
	err := e.client.Patch(ctx, r.op.DeepCopy(), client.RawPatch(types.JSONPatchType, run.RemoveAnnotationPatch(r.annotation, r.value)))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) { // gone, or changed: a newer request
		e.mgr.GetLogger().Error(err, "removing the request to run now; the next engine sees it again", "operator", r.op.Name, "annotation", r.annotation)
	}
}

// takeRunNow hands the requests to run now on op to the calendar that
// runs it, and refuses those that cannot apply. The operator running must
// be op (same UID); else nothing is done, and a request waits until the
// operator runs.
func (e *Engine) takeRunNow(ctx context.Context, op *v1alpha1.Operator) {
	var names []string
	for name := range op.Annotations {
		if strings.HasPrefix(name, v1alpha1.RunNowAnnotationPrefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	e.mu.Lock()
	running := e.running[op.Name]
	e.mu.Unlock()
	if running == nil || running.def.Operator.UID != op.UID {
		return
	}
	d := running.def
	for _, name := range names {
		value := op.Annotations[name]
		r := manualRequest{op: op, annotation: name, value: value}
		handler := strings.TrimPrefix(name, v1alpha1.RunNowAnnotationPrefix)
		req, err := v1alpha1.ReadRunNow(value)
		var why string
		switch {
		case err != nil:
			why = fmt.Sprintf("the annotation %s cannot be read: %v", name, err)
		case running.manual == nil:
			why = fmt.Sprintf("the operator %s %s: it has no operator-wide schedule to run now", op.Name, d.What())
		case pausedBy(running.runner) != "":
			why = fmt.Sprintf("the operator %s is paused (%s): nothing runs until it is resumed (opkit resume --operator %s --all)", op.Name, pausedBy(running.runner), op.Name)
		default:
			for _, h := range d.Handlers {
				if h.Name == handler {
					r.handler = h
				}
			}
			if r.handler == nil {
				why = fmt.Sprintf("the operator %s has no handler %s (its handlers: %s)", op.Name, handler, handlerNames(d))
			}
		}
		if why != "" {
			e.answerRunNow(ctx, r, corev1.EventTypeWarning, ReasonRunNowRefused, fmt.Sprintf("run now of handler %s (request %s, asked by %s) refused: %s", handler, cmp.Or(req.ID, "?"), cmp.Or(req.By, "someone"), why))
			continue
		}
		r.request = req
		running.manual.take(ctx, r)
	}
}

// pausedBy says who paused the operator of rn and why; "" when it is not
// paused.
func pausedBy(rn *run.Runner) string {
	if rn == nil {
		return ""
	}
	p, paused := rn.OperatorPaused()
	if !paused {
		return ""
	}
	return "by " + cmp.Or(p.By, "someone unknown") + reasonSuffix(p.Reason)
}

// handlerNames lists d's handlers for a message.
func handlerNames(d *definition.Definition) string {
	names := make([]string, len(d.Handlers))
	for i, h := range d.Handlers {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}

// reasonSuffix is ": reason", or "" for none.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
