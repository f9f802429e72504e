package migrate

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// limiter spaces requests 1/qps apart on a clock: no burst, so n requests
// take at least (n-1)/qps. One goroutine uses it.
type limiter struct {
	clock clock.Clock
	every time.Duration
	// next is the earliest time of the next request; zero before the first.
	next time.Time
}

func newLimiter(qps float64, c clock.Clock) *limiter {
	return &limiter{clock: c, every: time.Duration(float64(time.Second) / qps)}
}

// wait returns when the next request may be made, or ctx's error when it
// ends first.
func (l *limiter) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.clock.Now()
	if l.next.IsZero() || !l.next.After(now) {
		l.next = now.Add(l.every)
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.clock.After(l.next.Sub(now)):
	}
	l.next = l.next.Add(l.every)
	return nil
}
