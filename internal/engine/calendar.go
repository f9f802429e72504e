package engine

import (
	"context"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/calendar"
)

// takeRunNow hands the requests to run now on op to the calendar that
// runs it, which refuses those that cannot apply. The operator running
// must be op (same UID); else nothing is done, and a request waits until
// the operator runs.
func (e *Engine) takeRunNow(ctx context.Context, op *v1alpha1.Operator) {
	running := e.running.get(op.Name)
	if running == nil || running.def.Operator.UID != op.UID {
		return
	}
	calendar.TakeRunNow(ctx, e.drivers.calendar, op, running.def, running.runner, running.calendar)
}
