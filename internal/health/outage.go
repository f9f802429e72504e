package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// CheckEvery is how often Watch asks the API server whether it is ready;
// CheckTimeout how long it waits for the answer (longer than the
// API server's own check of etcd, 2s by default, so that a stalled etcd
// is named).
const (
	CheckEvery   = 2 * time.Second
	CheckTimeout = 5 * time.Second
)

// Watch asks the API server's /readyz (through rc) at once, then every
// CheckEvery or when o asks for a check now, until ctx ends. Each outcome
// is told to api (the readiness check "api-server") and to o, which holds
// the informers' relists through an outage and silences client-go's
// retries of Events meanwhile; each change is told to changed: the API
// server away (why says why), or back after how long it was away.
// Client-go's own retries are not the user's news; these changes are.
func Watch(ctx context.Context, rc rest.Interface, o *Outage, api *API, changed func(why error, awayFor time.Duration)) {
	var down time.Time
	t := time.NewTicker(CheckEvery)
	defer t.Stop()
	for {
		check, cancel := context.WithTimeout(ctx, CheckTimeout)
		body, err := rc.Get().AbsPath("/readyz").Param("verbose", "true").Do(check).Raw()
		cancel()
		if ctx.Err() != nil {
			return
		}
		var why error // nil: ready
		if err != nil {
			why = errors.New(APIDown(err, body))
		}
		api.Set(why)
		o.Set(err != nil)
		switch {
		case err != nil && down.IsZero():
			down = time.Now()
			changed(why, 0)
		case err == nil && !down.IsZero():
			changed(nil, time.Since(down))
			down = time.Time{}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-o.now:
		}
	}
}

// Outage is what the engine knows of the API server's absence, for what
// must act on it besides the notices:
//
//   - The informers' list and watch calls that fail while the API server
//     is known away wait for its return, and are made again at once then
//     (package informer's Informers.Held). Returned to client-go's reflectors, each failure
//     would add to a back-off of their own (from 0.8 s, doubling up to 30
//     s, with jitter, and no knob in a shared informer): a change made
//     during a 20 s cut was once seen 24.5 s after the API server came
//     back.
//   - Client-go's line for each Event it retries writing (quietEvents) is
//     not written while the API server is away: the outage's notice says
//     it. Such a line asks for a check at once, and waits for its answer.
//
// A new Outage knows of none; Watch tells it each check's outcome.
type Outage struct {
	mu   sync.Mutex
	away bool
	// back is closed when the API server is back; a new one at each outage.
	back chan struct{}
	// next is the check under way, or the next one.
	next *apiCheck
	// now asks Watch for a check at once.
	now chan struct{}
}

// apiCheck is one check of the API server: done is closed at its end,
// when away says what it found.
type apiCheck struct {
	done chan struct{}
	away bool
}

// NewOutage returns an Outage that knows of none.
func NewOutage() *Outage {
	return &Outage{back: make(chan struct{}), next: &apiCheck{done: make(chan struct{})}, now: make(chan struct{}, 1)}
}

// Set records the outcome of a check: whether the API server is away.
func (o *Outage) Set(away bool) {
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

// Away reports whether the last check found the API server away. A
// nil outage knows of none.
func (o *Outage) Away() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.away
}

// Wait returns false at once unless the API server is known away; then it
// waits for its return (true) or for ctx's end (false). A nil Outage
// knows of none.
func (o *Outage) Wait(ctx context.Context) bool {
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
func (o *Outage) checkNow() *apiCheck {
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
// one asks for (within CheckEvery+CheckTimeout): the outage's
// notice says it, and the Event is written once the API server is back.
// Any other line, that one when the API server answers, goes through.
type quietEvents struct {
	logr.LogSink
	outage *Outage
}

func (q quietEvents) Error(err error, msg string, kv ...any) {
	if msg != eventRetried {
		q.LogSink.Error(err, msg, kv...)
		return
	}
	if q.outage.Away() {
		return
	}
	c := q.outage.checkNow()
	go func() {
		t := time.NewTimer(CheckEvery + CheckTimeout)
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

// QuietLogger is l with quietEvents.
func (o *Outage) QuietLogger(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return l.WithSink(quietEvents{l.GetSink(), o})
}

// APIDown says why a /readyz check failed: the checks the API server
// reports failing (etcd, say), or the error of a server that did not
// answer.
func APIDown(err error, body []byte) string {
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
