package migrate

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// steppingClock is a fake clock whose timers fire at once, moving the
// clock to their time: a wait costs no real time and shows its length.
type steppingClock struct {
	clock.Clock
	now time.Time
}

func (c *steppingClock) Now() time.Time { return c.now }

func (c *steppingClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// TestTheLimiterSpacesRequestsEvenly: at 20 a second, the first request
// goes at once and each next one 50ms after the one before; a request
// that comes late goes at once, and the next 50ms after it.
func TestTheLimiterSpacesRequestsEvenly(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &steppingClock{now: start}
	l := newLimiter(20, c)
	var at []time.Duration
	for range 5 {
		if err := l.wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		at = append(at, c.now.Sub(start))
	}
	want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("requests at %v, want %v", at, want)
		}
	}
	c.now = c.now.Add(time.Second) // the caller was busy: no debt, no burst
	if err := l.wait(t.Context()); err != nil || c.now.Sub(start) != 1200*time.Millisecond {
		t.Fatalf("a late request waited until %v (%v); want 1.2s, at once", c.now.Sub(start), err)
	}
	if err := l.wait(t.Context()); err != nil || c.now.Sub(start) != 1250*time.Millisecond {
		t.Fatalf("the request after it went at %v; want 1.25s", c.now.Sub(start))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.wait(ctx); err == nil {
		t.Fatal("a wait on an ended context returned no error")
	}
}
