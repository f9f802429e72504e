package run

import (
	"fmt"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/executor"
)

// Verdict is what becomes of a run.
type Verdict int

const (
	// Succeeded means the result is applied (its status, its Events).
	Succeeded Verdict = iota
	// Skipped means the handler found nothing to do.
	Skipped
	// Refused means a run on event turned its delivery down (Outcome.Reason).
	Refused
	// Retry means the run failed (Outcome.Reason) and runs again at
	// Outcome.RetryAt, by the handler's retry policy.
	Retry
	// GaveUp means the run failed (Outcome.Reason) and is not retried:
	// retrying cannot help, or its attempts are spent.
	GaveUp
	// Cancelled means the engine stopped during the run, which runs again
	// with its key at the next start.
	Cancelled
)

// Outcome is how a run ended, decided once from what its executor
// returned, as controller-runtime's TerminalError and kube-rs's Action
// make the decision a value rather than flags read in many places.
type Outcome struct {
	Verdict Verdict
	// Reason says why a run failed, gave up or refused; "" otherwise.
	Reason string
	// RetryAt is when a Retry runs again (Options.Clock's time).
	RetryAt time.Time
}

// judge is the outcome of what an executor returned, before the retry
// policy: a failure is Retry, or GaveUp when it is permanent (the policy
// turns a Retry whose attempts are spent into GaveUp); a result's refusal
// is Refused, whoever may refuse.
func judge(res *executor.Result, err error) Outcome {
	switch {
	case err != nil:
		f := executor.AsFailure(err)
		return failed(f.Message, f.Permanent)
	case res.Error != nil:
		return failed(res.Error.Message, res.Error.Permanent)
	case res.Refuse != "":
		return Outcome{Verdict: Refused, Reason: res.Refuse}
	case res.Skipped:
		return Outcome{Verdict: Skipped}
	}
	return Outcome{Verdict: Succeeded}
}

// failed is the outcome of a failure: GaveUp when retrying cannot help.
func failed(reason string, permanent bool) Outcome {
	if permanent {
		return Outcome{Verdict: GaveUp, Reason: reason}
	}
	return Outcome{Verdict: Retry, Reason: reason}
}

// done reports whether the run did its work: succeeded or skipped.
func (o Outcome) done() bool { return o.Verdict == Succeeded || o.Verdict == Skipped }

// archived is the outcome the archive records.
func (o Outcome) archived() archive.Outcome {
	switch o.Verdict {
	case Succeeded:
		return archive.Succeeded
	case Skipped, Refused:
		return archive.Skipped // a refusal is the delivery's outcome, not the run's
	case Retry:
		return archive.Failed
	case GaveUp:
		return archive.GaveUp
	}
	return archive.Cancelled
}

// refuseOutsideEvent is the outcome of a result that refuses, in a run
// that has no delivery to refuse.
func refuseOutsideEvent(trigger string) Outcome {
	return failed(fmt.Sprintf("the result refuses, which turns down a webhook delivery in a run on event; this run is on %s: return skipped, or an error", trigger), true)
}
