package sleep

import (
	"context"
	"testing"
	"time"
)

// TestForEndsWithItsContext: a wait cut by its context reports false at
// once; one that ran its course, true.
func TestForEndsWithItsContext(t *testing.T) {
	if !For(t.Context(), time.Millisecond) {
		t.Error("a wait of 1ms with a live context reported it did not pass")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if For(ctx, time.Hour) {
		t.Error("a wait whose context ended reported it passed")
	}
	if time.Since(start) > time.Minute {
		t.Errorf("a wait whose context ended took %s", time.Since(start))
	}
	if For(ctx, 0) || !For(t.Context(), -time.Second) {
		t.Error("a wait of no time reports whether its context goes on")
	}
}
