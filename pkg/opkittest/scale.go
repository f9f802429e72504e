package opkittest

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/opkit-dev/opkit/internal/scenario"
)

// ScaleEnv names the environment variable that multiplies every wait of
// this package (Eventually, Engine.WaitRun, New's wait for its namespace,
// Main's wait for the plane) and of the waits a test scales with Scaled:
// 3 makes a minute three. It is a number, at least 1. make test sets it
// for opkit's own suite, whose CI machines are shared and loaded.
// opkit test's --timeout-scale defaults to it too.
const ScaleEnv = scenario.TimeoutScaleEnv

// referenceStart is how long a plane takes to start on a quiet 2-core
// machine (about 11 s): a plane that took longer tells that this machine
// is slower now, by that much.
const referenceStart = 12 * time.Second

// maxMeasured caps the factor a slow plane start gives: a start slowed by
// a burst of compilation says little of the minutes after it.
const maxMeasured = 6.0

// measured is the factor of the plane's start (1000 = 1), set by Main.
var measured atomic.Int64

// Scale is the factor by which this binary's waits are longer than the
// durations its tests give: the larger of ScaleEnv and how much slower
// than on a quiet machine the plane started (at most 6). A wait that a
// condition ends is no longer for it; only a test that fails waits the
// longer.
func Scale() float64 {
	f := max(1, float64(measured.Load())/1000)
	if s, err := envScale(); err == nil {
		f = max(f, s)
	}
	return f
}

// Scaled returns d times Scale(): how long to wait, on this machine now,
// for what takes at most d on a quiet one. Use it for a wait that is not
// an Eventually, e.g. a context's deadline or a select's time.After. Never
// scale a wait for something that must not happen (a quiet period): that
// one proves more when it is longer, and costs the time it takes.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Scale())
}

// envScale reads ScaleEnv (scenario.TimeoutScale).
func envScale() (float64, error) { return scenario.TimeoutScale() }

// measureStart records how long the plane took to start.
func measureStart(took time.Duration) {
	f := min(maxMeasured, max(1, float64(took)/float64(referenceStart)))
	measured.Store(int64(f * 1000))
}

// scaledText says how long a wait of d was, scaled: "1m0s" or
// "1m0s (×3: 3m0s)".
func scaledText(d time.Duration) string {
	if s := Scale(); s > 1 {
		return fmt.Sprintf("%v (×%.3g: %v)", d, s, Scaled(d).Round(time.Millisecond))
	}
	return d.String()
}
