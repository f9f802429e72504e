package run

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ClockSteps tells the waits on a clock that it was stepped: a test's
// fake clock moved on (Engine.ClockStepped). The zero value is ready.
type ClockSteps struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next step
}

// next returns a channel closed at the next step.
func (s *ClockSteps) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Step wakes the waits.
func (s *ClockSteps) Step() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// SleepUntil waits until the clock shows at, or until ctx ends; it
// reports whether at came. A timer of a fake clock set just after the
// clock was stepped would fire a step late: a step wakes the wait, which
// looks at the clock again.
func SleepUntil(ctx context.Context, clk clock.Clock, steps *ClockSteps, at time.Time) bool {
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
