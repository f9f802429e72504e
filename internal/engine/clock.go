package engine

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

// ClockStepped tells the engine that Options.Clock was moved on (a
// testing FakeClock stepped): it reconciles every object of every
// operator it runs, which runs what came due by the clock's new time (a
// schedule's slot, a requeue, the retry of a failed run), and wakes the
// operator-wide schedules and the retries of operator runs. It returns
// once every object is queued; the runs follow promptly, without waiting
// for real time to pass. With the real clock it is harmless: a reconcile
// of an object with nothing due writes nothing.
func (e *Engine) ClockStepped() {
	e.clockSteps.Step()
	for _, op := range e.running.all() {
		for _, rn := range op.runners() {
			rn.WakeAll()
		}
	}
}
