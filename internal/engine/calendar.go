package engine

import (
	"context"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/calendar"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An operator with neither a custom resource nor a watch is a calendar
// (internal/calendar): its operator-wide schedules, and the requests to
// run one now that the Operator watch hands it (takeRunNow).

// calendarConfig is what a calendar needs of the engine.
func (e *Engine) calendarConfig() calendar.Config {
	return calendar.Config{
		Archive: e.opts.Archive, Clock: e.opts.Clock, Steps: &e.clockSteps, Log: e.mgr.GetLogger(),
		Events: e.mgr.GetEventRecorder("opkit"), Client: e.client,
	}
}

// startCalendar starts an operator's operator-wide schedules.
func (e *Engine) startCalendar(d *definition.Definition) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	rn, err := newRunner(ctx, d, e, e.mgr.GetEventRecorder("opkit"), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	c, err := calendar.Start(ctx, e.calendarConfig(), d, rn)
	if err != nil {
		cancel()
		return nil, err
	}
	return &operator{def: d, cancel: cancel, done: c.Done(), runner: rn, calendar: c}, nil
}

// takeRunNow hands the requests to run now on op to the calendar that
// runs it, which refuses those that cannot apply. The operator running
// must be op (same UID); else nothing is done, and a request waits until
// the operator runs.
func (e *Engine) takeRunNow(ctx context.Context, op *v1alpha1.Operator) {
	e.mu.Lock()
	running := e.running[op.Name]
	e.mu.Unlock()
	if running == nil || running.def.Operator.UID != op.UID {
		return
	}
	calendar.TakeRunNow(ctx, e.calendarConfig(), op, running.def, running.runner, running.calendar)
}
