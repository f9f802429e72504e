// Package sleep is waiting that ends with its context: the backoff of a
// consumer, an agent, the delivery queue or the dev node, which must give
// way at once when the engine stops.
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
