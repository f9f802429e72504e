package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// apiCheckEvery is how often the engine asks the API server whether it is
// ready; apiCheckTimeout how long it waits for the answer (longer than the
// API server's own check of etcd, 2s by default, so that a stalled etcd
// is named).
const (
	apiCheckEvery   = 2 * time.Second
	apiCheckTimeout = 5 * time.Second
)

// watchAPI asks the API server's /readyz at once, then every
// apiCheckEvery, and notices each change in one line: unreachable or not
// ready (with why; handlers wait and no change is lost), then back after
// how long. Client-go's own retries are not the user's news; these two
// lines are. Each outcome is the engine's readiness check "api-server"
// (health.go).
func (e *Engine) watchAPI(ctx context.Context) error {
	rc := e.clientset.Discovery().RESTClient()
	var down time.Time
	t := time.NewTicker(apiCheckEvery)
	defer t.Stop()
	for {
		check, cancel := context.WithTimeout(ctx, apiCheckTimeout)
		body, err := rc.Get().AbsPath("/readyz").Param("verbose", "true").Do(check).Raw()
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var why error // nil: ready
		if err != nil {
			why = errors.New(apiDown(err, body))
		}
		e.health.setAPI(why)
		switch {
		case err != nil && down.IsZero():
			down = time.Now()
			handlerMetrics().apiReachable.Set(0)
			e.notice(why.Error() + ": reconciles and handler runs wait; no change is lost")
		case err == nil && !down.IsZero():
			// Objects whose reconciles failed meanwhile would wait out their
			// back-off: retry them now (retryqueue.go).
			retried := e.queues.retryAll()
			e.notice(fmt.Sprintf("the API server is back after %s; catching up (%d objects retried now)", time.Since(down).Round(time.Second), retried))
			down = time.Time{}
			handlerMetrics().apiReachable.Set(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// apiDown says why a /readyz check failed: the checks the API server
// reports failing (etcd, say), or the error of a server that did not
// answer.
func apiDown(err error, body []byte) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Sprintf("the API server is unreachable (%v)", err)
	}
	var failing []string
	for line := range strings.Lines(string(body)) {
		if name, ok := strings.CutPrefix(line, "[-]"); ok && len(strings.Fields(name)) > 0 {
			failing = append(failing, strings.Fields(name)[0])
		}
	}
	if len(failing) == 0 {
		return fmt.Sprintf("the API server is not ready (%v)", err)
	}
	return fmt.Sprintf("the API server is not ready (failing: %s)", strings.Join(failing, ", "))
}

// notice reports a change of the engine's health in one line.
func (e *Engine) notice(line string) {
	if e.opts.Notice != nil {
		e.opts.Notice(line)
	}
}
