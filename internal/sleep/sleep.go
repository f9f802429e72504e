// Package sleep is waiting that ends with its context: the backoff of a
// consumer, an agent, the delivery queue or the dev node, and the loops
// that poll now and then (a source's lag, a rollout's tick, a directory
// reloaded), which must give way at once when the engine stops.
package sleep

import (
	"context"
	"time"
)

// For waits d of real time, or until ctx ends; it reports whether d
// passed (false: ctx ended first). A d of zero or less returns at once,
// true unless ctx has ended.
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Tick calls f every d of real time until ctx ends, the first time after
// d.
func Tick(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Poll calls f at once, then every d of real time, until ctx ends.
func Poll(ctx context.Context, d time.Duration, f func()) {
	f()
	Tick(ctx, d, f)
}
