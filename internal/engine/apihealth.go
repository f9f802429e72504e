package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/opkit-dev/opkit/internal/health"
)

// watchAPI checks the API server until ctx ends (health.Watch) and
// notices each change in one line: unreachable or not ready (with why;
// handlers wait and no change is lost), then back after how long. Each
// outcome is the engine's readiness check "api-server" (health.go), and is
// told to e.outage, which holds the informers' relists through an outage
// and silences client-go's retries of Events meanwhile.
func (e *Engine) watchAPI(ctx context.Context) error {
	health.Watch(ctx, e.clientset.Discovery().RESTClient(), e.outage, &e.health.api, func(why error, awayFor time.Duration) {
		if why != nil {
			handlerMetrics().apiReachable.Set(0)
			e.notice(why.Error() + ": reconciles and handler runs wait; no change is lost")
			return
		}
		// Objects whose reconciles failed meanwhile would wait out their
		// back-off: retry them now (package health's RetryQueues).
		retried := e.queues.RetryAll()
		e.notice(fmt.Sprintf("the API server is back after %s; catching up (%d objects retried now)", awayFor.Round(time.Second), retried))
		handlerMetrics().apiReachable.Set(1)
	})
	return nil
}

// notice reports a change of the engine's health in one line.
func (e *Engine) notice(line string) {
	if e.opts.Notice != nil {
		e.opts.Notice(line)
	}
}
