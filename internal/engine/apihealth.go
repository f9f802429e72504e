package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
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
// apiCheckEvery or when e.outage asks for a check now, and notices each
// change in one line: unreachable or not ready (with why; handlers wait
// and no change is lost), then back after how long. Client-go's own
// retries are not the user's news; these two lines are. Each outcome is
// the engine's readiness check "api-server" (health.go), and is told to
// e.outage, which holds the informers' relists through an outage and
// silences client-go's retries of Events meanwhile.
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
		e.outage.set(err != nil)
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
		case <-e.outage.now:
		}
	}
}

// outage is what the engine knows of the API server's absence, for what
// must act on it besides the notices:
//
//   - The informers' list and watch calls that fail while the API server
//     is known away wait for its return, and are made again at once then
//     (heldListWatch). Returned to client-go's reflectors, each failure
//     would add to a back-off of their own (from 0.8 s, doubling up to 30
//     s, with jitter, and no knob in a shared informer): a change made
//     during a 20 s cut was once seen 24.5 s after the API server came
//     back.
//   - Client-go's line for each Event it retries writing (quietEvents) is
//     not written while the API server is away: the outage's notice says
//     it. Such a line asks for a check at once, and waits for its answer.
//
// A new outage knows of none; watchAPI tells it each check's outcome.
type outage struct {
	mu   sync.Mutex
	away bool
	// back is closed when the API server is back; a new one at each outage.
	back chan struct{}
	// next is the check under way, or the next one.
	next *apiCheck
	// now asks watchAPI for a check at once.
	now chan struct{}
}

// apiCheck is one check of the API server: done is closed at its end,
// when away says what it found.
type apiCheck struct {
	done chan struct{}
	away bool
}

func newOutage() *outage {
	return &outage{back: make(chan struct{}), next: &apiCheck{done: make(chan struct{})}, now: make(chan struct{}, 1)}
}

// set records the outcome of a check: whether the API server is away.
func (o *outage) set(away bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case away && !o.away:
		o.back = make(chan struct{})
	case !away && o.away:
		close(o.back)
	}
	o.away = away
	o.next.away = away
	close(o.next.done)
	o.next = &apiCheck{done: make(chan struct{})}
}

// isAway reports whether the last check found the API server away. A
// nil outage knows of none.
func (o *outage) isAway() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.away
}

// wait returns false at once unless the API server is known away; then it
// waits for its return (true) or for ctx's end (false). A nil outage
// knows of none.
func (o *outage) wait(ctx context.Context) bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	away, back := o.away, o.back
	o.mu.Unlock()
	if !away {
		return false
	}
	select {
	case <-back:
		return true
	case <-ctx.Done():
		return false
	}
}

// checkNow asks for a check of the API server at once, and returns the
// check under way or the next one.
func (o *outage) checkNow() *apiCheck {
	o.mu.Lock()
	c := o.next
	o.mu.Unlock()
	select {
	case o.now <- struct{}{}:
	default: // one is asked already
	}
	return c
}

// eventRetried is the message of client-go's event broadcasters for an
// Event they failed to write and will write again.
const eventRetried = "Unable to write event (may retry after sleeping)"

// quietEvents is a logger's sink that leaves out client-go's eventRetried
// lines while the API server is away, or found away by the check each
// one asks for (within apiCheckEvery+apiCheckTimeout): the outage's
// notice says it, and the Event is written once the API server is back.
// Any other line, that one when the API server answers, goes through.
type quietEvents struct {
	logr.LogSink
	outage *outage
}

func (q quietEvents) Error(err error, msg string, kv ...any) {
	if msg != eventRetried {
		q.LogSink.Error(err, msg, kv...)
		return
	}
	if q.outage.isAway() {
		return
	}
	c := q.outage.checkNow()
	go func() {
		t := time.NewTimer(apiCheckEvery + apiCheckTimeout)
		defer t.Stop()
		away := false
		select {
		case <-c.done:
			away = c.away
		case <-t.C: // no check runs (a stopped engine): written
		}
		if !away {
			q.LogSink.Error(err, msg, kv...)
		}
	}()
}

func (q quietEvents) WithValues(kv ...any) logr.LogSink {
	return quietEvents{q.LogSink.WithValues(kv...), q.outage}
}

func (q quietEvents) WithName(name string) logr.LogSink {
	return quietEvents{q.LogSink.WithName(name), q.outage}
}

// quietLogger is l with quietEvents.
func (o *outage) quietLogger(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return l.WithSink(quietEvents{l.GetSink(), o})
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
