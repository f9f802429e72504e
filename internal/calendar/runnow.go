package calendar

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/request"
	"github.com/opkit-dev/opkit/internal/run"
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

// take hands r to the calendar, unless this engine took it before.
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

// manualLoop runs the requests to run now handed to the calendar until
// ctx ends, then waits for the runs in flight (cut off by ctx, they
// leave their annotation for the next engine).
func (c *Calendar) manualLoop(ctx context.Context) {
	var runs sync.WaitGroup
	defer runs.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.manual.requests:
			runs.Go(func() { c.runNow(ctx, r) })
		}
	}
}

// runNow runs one request to run now, answers it with an Event on the
// Operator and removes its annotation; unless the engine stops first.
func (c *Calendar) runNow(ctx context.Context, r manualRequest) {
	d, h, req := c.def, r.handler, r.request
	key := v1alpha1.RunNowKey(d.Operator.Name, h.Name, req)
	log := c.cfg.Log.WithValues("operator", d.Operator.Name, "handler", h.Name, "request", req.ID)
	asked := fmt.Sprintf("handler %s run now (request %s, asked by %s%s)", h.Name, req.ID, req.By, request.ReasonSuffix(req.Reason))
	slot := req.At
	if _, err := time.Parse(time.RFC3339, slot); err != nil {
		slot = time.Now().UTC().Format(time.RFC3339)
	}
	out := c.runner.RunForOperator(ctx, run.OperatorRun{
		Handler: h, Trigger: v1alpha1.TriggerManual, UID: string(d.Operator.UID), Key: key, Log: log,
		Schedule: &run.ScheduleContext{Slot: slot, Manual: &run.ManualContext{Request: req.ID, By: req.By, Reason: req.Reason}},
		Actor:    req.By,
		Note:     fmt.Sprintf("run now by %s%s (request %s, asked at %s).", req.By, request.ReasonSuffix(req.Reason), req.ID, req.At),
	})
	if out.Stopped || ctx.Err() != nil {
		return // the annotation stays: the next engine runs it, with its key
	}
	reason, note := request.RunNow.Taken, ""
	switch {
	case out.Run == nil:
		note = fmt.Sprintf("%s: a run of its key %s had succeeded already; nothing ran again (opkit runs --operator %s --handler %s)", asked, key, d.Operator.Name, h.Name)
	case out.Run.Outcome == archive.Succeeded || out.Run.Outcome == archive.Skipped:
		note = fmt.Sprintf("%s: %s, run %s", asked, out.Run.Outcome, out.Run.ID)
	default:
		reason = request.RunNow.Failed
		note = fmt.Sprintf("%s: %s after %d attempt(s): %s: run %s", asked, out.Run.Outcome, out.Run.Attempt, out.Run.Error, out.Run.ID)
	}
	answer(context.WithoutCancel(ctx), c.cfg, r, reason, note)
}

// answer posts the answer to a request on its Operator and removes the
// request's annotation, unless it changed since it was read.
func answer(ctx context.Context, cfg Config, r manualRequest, reason, note string) {
	request.RunNow.Answer(cfg.Events, r.op, reason, note)
	if err := request.Remove(ctx, cfg.Client, r.op.DeepCopy(), r.annotation, r.value); err != nil {
		cfg.Log.Error(err, "removing the request to run now; the next engine sees it again", "operator", r.op.Name, "annotation", r.annotation)
	}
}

// TakeRunNow hands the requests to run now on op to c, the calendar
// running it, and refuses those that cannot apply; c is nil when the
// operator running op (same UID: the caller checks it), d with its runner
// rn, is no calendar.
func TakeRunNow(ctx context.Context, cfg Config, op *v1alpha1.Operator, d *definition.Definition, rn *run.Runner, c *Calendar) {
	var names []string
	for name := range op.Annotations {
		if strings.HasPrefix(name, v1alpha1.RunNowAnnotationPrefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		value := op.Annotations[name]
		r := manualRequest{op: op, annotation: name, value: value}
		handler := strings.TrimPrefix(name, v1alpha1.RunNowAnnotationPrefix)
		req, err := v1alpha1.ReadRunNow(value)
		var why string
		switch {
		case err != nil:
			why = fmt.Sprintf("the annotation %s cannot be read: %v", name, err)
		case c == nil:
			why = fmt.Sprintf("the operator %s %s: it has no operator-wide schedule to run now", op.Name, d.What())
		case pausedBy(rn) != "":
			why = fmt.Sprintf("the operator %s is paused (%s): nothing runs until it is resumed (opkit resume --operator %s --all)", op.Name, pausedBy(rn), op.Name)
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
			answer(ctx, cfg, r, request.RunNow.Refused, fmt.Sprintf("run now of handler %s (request %s, asked by %s) refused: %s", handler, cmp.Or(req.ID, "?"), request.RunNow.Who(req.By), why))
			continue
		}
		r.request = req
		c.manual.take(ctx, r)
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
	return "by " + request.PauseOperator.Who(p.By) + request.ReasonSuffix(p.Reason)
}

// handlerNames lists d's handlers for a message.
func handlerNames(d *definition.Definition) string {
	names := make([]string, len(d.Handlers))
	for i, h := range d.Handlers {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}
