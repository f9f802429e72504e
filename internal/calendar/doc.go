// Package calendar runs an operator's operator-wide schedules: an
// operator with neither a custom resource nor a watch is a calendar, each
// of its handlers run once per slot of its schedule, for the operator
// itself, in place of a CronJob; and it answers the requests to run one
// now (opkit schedule run).
//
// Slots are times every engine computes alike: the multiples of every
// since the Unix epoch, or the times of cron in its time zone. A slot's
// run has the idempotency key <operator>/schedule/<handler>/<unix time>;
// the last slot handled is kept in the run archive (archive.HandlerRecord, key
// Key(handler)), written after its run ends. So a slot runs once across
// restarts: a slot whose run succeeded is never run again (the archive's
// Succeeded check covers an engine killed between the run's end and the
// record), and a run interrupted by the engine's end runs again with its
// key, under the catch-up policy.
//
// Slots missed while no engine ran (or while a run overran the next
// slots) are skipped, but for the latest of them under CatchUp Once,
// which runs at start. A slot is on time while less than its period (at
// most onTime) has passed since it came due. A paused operator runs no
// slot: those that came due while it was paused are handled at its
// resume, by the same rule, as after an engine that was down.
//
// A failed run is retried with the handler's policy, with the same key,
// until it succeeds or its attempts are spent (GaveUp); the next slot
// runs after that in any case. Slots, their waits and the retries' delays
// are Config.Clock's: a test's fake clock stepped past a slot runs it.
//
// A run now is asked for by the annotation v1alpha1.RunNowAnnotation(handler)
// on the Operator, which only an Operator read from the cluster has. The
// engine's Operator watch, which only the leader runs, hands each request
// to TakeRunNow; the calendar runs it once, with the key
// v1alpha1.RunNowKey and the trigger manual, retried by the handler's
// policy like a slot, then posts an Event on the Operator saying how it
// ended (request.RunNow.Taken, request.RunNow.Failed) and removes the annotation (a
// JSON patch guarded by a test of the value read, so that a newer request
// is not lost). A request that cannot apply (the operator is no calendar
// or is paused, the handler is not one of its schedules, the value is not
// a request) is refused the same way: an Event request.RunNow.Refused saying
// why, and the annotation removed. An engine stopped during the run
// leaves the annotation: the next leader runs the request again with its
// key, and one whose run succeeded runs nothing.
//
// The package knows the engine through Config alone; the runs are the
// operator's run.Runner's.
package calendar
