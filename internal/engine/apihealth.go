package engine

import (
	"context"
	"fmt"
	"time"
)

// apiCheckEvery is how often the engine asks the API server whether it is
// ready.
const apiCheckEvery = 2 * time.Second

// watchAPI asks the API server's /readyz every apiCheckEvery and notices
// each change in one line: unreachable (with why; handlers wait and no
// change is lost), then reachable again after how long. Client-go's own
// retries are not the user's news; these two lines are.
func (e *Engine) watchAPI(ctx context.Context) error {
	rc := e.clientset.Discovery().RESTClient()
	var down time.Time
	t := time.NewTicker(apiCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		check, cancel := context.WithTimeout(ctx, apiCheckEvery)
		err := rc.Get().AbsPath("/readyz").Do(check).Error()
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && down.IsZero():
			down = time.Now()
			handlerMetrics().apiReachable.Set(0)
			e.notice(fmt.Sprintf("the API server is unreachable (%v): reconciles and handler runs wait; no change is lost", err))
		case err == nil && !down.IsZero():
			// Objects whose reconciles failed meanwhile would wait out their
			// back-off: retry them now (retryqueue.go).
			retried := e.queues.retryAll()
			e.notice(fmt.Sprintf("the API server is reachable again after %s; catching up (%d objects retried now)", time.Since(down).Round(time.Second), retried))
			down = time.Time{}
			handlerMetrics().apiReachable.Set(1)
		}
	}
}

// notice reports a change of the engine's health in one line.
func (e *Engine) notice(line string) {
	if e.opts.Notice != nil {
		e.opts.Notice(line)
	}
}
