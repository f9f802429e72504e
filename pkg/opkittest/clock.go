package opkittest

import (
	"testing"
	"time"
)

// Advance moves the engine's fake clock (EngineOptions.FakeClock) on by
// d, and has the engine look at every object again: what came due by the
// clock's new time — a schedule's slot, a requeue, the retry of a failed
// run, an operator-wide schedule — runs at once, without real time
// passing. It returns once every object is queued; wait for the runs
// with WaitRun.
//
// The clock first catches up with the real time if it lags behind it:
// objects' times (creationTimestamp, from which an `every` schedule
// counts) are the API server's, in real time, so Advance(time.Hour)
// reaches the first hourly slot of an object created before it.
//
// An engine on the real clock, or a d that is not positive, fails the
// test.
func (e *Engine) Advance(t testing.TB, d time.Duration) {
	t.Helper()
	if e.clock == nil {
		t.Fatal("opkittest: Advance needs an engine on a fake clock: RunOperatorsWith(t, opkittest.EngineOptions{FakeClock: true}, ...)")
	}
	if d <= 0 {
		t.Fatalf("opkittest: Advance(%v): the clock only moves forward", d)
	}
	if now := time.Now(); e.clock.Now().Before(now) {
		e.clock.SetTime(now)
	}
	e.clock.Step(d)
	e.eng.ClockStepped()
}

// Now is the time by the engine's clock: the fake clock's with
// EngineOptions.FakeClock, else the real time.
func (e *Engine) Now() time.Time {
	if e.clock == nil {
		return time.Now()
	}
	return e.clock.Now()
}
