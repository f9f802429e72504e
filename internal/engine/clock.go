package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
)

// What the definitions schedule is timed by Options.Clock: per-object
// schedules and requeues, the retry delays of failed runs (of objects and
// of the operator's own runs), operator-wide schedules, and the times
// recorded for them (status.opkit's nextRetryAt, lastScheduled and
// requeueAt; a run's nextRetryAt). Everything else keeps real time: API
// and archive health, log flushing, leases, timeouts, a run's start and
// end, the ids of runs.
//
// controller-runtime requeues an object after a real duration, and knows
// nothing of a fake clock: a test that steps its clock calls
// Engine.ClockStepped, which looks at every object of every operator
// again (a reconcile decides from the clock's time) and wakes the waits
// of operator-wide schedules and operator runs.

// clockSteps tells the waits on the clock that it was stepped.
type clockSteps struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next step
}

// next returns a channel closed at the next step.
func (s *clockSteps) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// step wakes the waits.
func (s *clockSteps) step() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// ClockStepped tells the engine that Options.Clock was moved on (a
// testing FakeClock stepped): it reconciles every object of every
// operator it runs, which runs what came due by the clock's new time (a
// schedule's slot, a requeue, the retry of a failed run), and wakes the
// operator-wide schedules and the retries of operator runs. It returns
// once every object is queued; the runs follow promptly, without waiting
// for real time to pass. With the real clock it is harmless: a reconcile
// of an object with nothing due writes nothing.
func (e *Engine) ClockStepped() {
	e.clockSteps.step()
	e.mu.Lock()
	runners := make([]*runner, 0, len(e.running))
	for _, op := range e.running {
		if op.runner != nil {
			runners = append(runners, op.runner)
		}
	}
	e.mu.Unlock()
	for _, rn := range runners {
		rn.wakeAll()
	}
}

// wakeAll reconciles every object the runner knows.
func (rn *runner) wakeAll() {
	rn.mu.Lock()
	objs := make([]*unstructured.Unstructured, 0, len(rn.objects))
	for key := range rn.objects {
		u := &unstructured.Unstructured{}
		u.SetNamespace(key.Namespace)
		u.SetName(key.Name)
		objs = append(objs, u)
	}
	rn.mu.Unlock()
	for _, u := range objs {
		rn.wakeUp(u)
	}
}

// sleepUntil waits until the clock shows at, or until ctx ends; it
// reports whether at came. A timer of a fake clock set just after the
// clock was stepped would fire a step late: a step wakes the wait, which
// looks at the clock again.
func sleepUntil(ctx context.Context, clk clock.Clock, steps *clockSteps, at time.Time) bool {
	for {
		stepped := steps.next()
		wait := at.Sub(clk.Now())
		if wait <= 0 {
			return true
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		case <-stepped:
			t.Stop()
		}
	}
}
