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

// TestTickAndPollEndWithTheirContext: Poll calls at once and Tick does
// not; both call again each period and return when the context ends.
func TestTickAndPollEndWithTheirContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loop  func(context.Context, time.Duration, func())
		first bool
	}{{"Tick", Tick, false}, {"Poll", Poll, true}} {
		ctx, cancel := context.WithCancel(t.Context())
		calls := make(chan struct{}, 100)
		done := make(chan struct{})
		go func() { tc.loop(ctx, time.Hour, func() { calls <- struct{}{} }); close(done) }()
		cancel()
		<-done
		if got := len(calls) > 0; got != tc.first {
			t.Errorf("%s with a period of an hour, ended at once: called %v, want %v", tc.name, got, tc.first)
		}
		ctx, cancel = context.WithCancel(t.Context())
		n := 0
		done = make(chan struct{})
		go func() {
			tc.loop(ctx, time.Millisecond, func() {
				if n++; n == 3 {
					cancel()
				}
			})
			close(done)
		}()
		<-done
		if n < 3 {
			t.Errorf("%s every millisecond: called %d times before it returned, want 3 at least", tc.name, n)
		}
	}
}
