package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An operator with neither a custom resource nor a watch is a calendar:
// each of its handlers runs once per slot of its schedule, for the
// operator itself, in place of a CronJob.
//
// Slots are times every engine computes alike: the multiples of every
// since the Unix epoch, or the times of cron in its time zone. A slot's
// run has the idempotency key <operator>/schedule/<handler>/<unix time>;
// the last slot handled is kept in the run archive (archive.State, key
// schedule/<handler>), written after its run ends. So a slot runs once
// across restarts: a slot whose run succeeded is never run again (the
// archive's Succeeded check covers an engine killed between the run's end
// and the record), and a run interrupted by the engine's end runs again
// with its key, under the catch-up policy.
//
// Slots missed while no engine ran (or while a run overran the next
// slots) are skipped, but for the latest of them under CatchUp Once,
// which runs at start. A slot is on time while less than its period (at
// most onTime) has passed since it came due.
//
// A failed run is retried with the handler's policy, with the same key,
// until it succeeds or its attempts are spent (GaveUp); the next slot
// runs after that in any case.
//
// Slots, their waits and the retries' delays are Options.Clock's: a
// test's fake clock stepped past a slot runs it (clock.go).

// onTime is the longest a slot may be late and still count as on time.
const onTime = 5 * time.Second

// calendarRecord is what the archive keeps of an operator-wide schedule.
type calendarRecord struct {
	// Slot is the last slot handled: run, or skipped by the policy.
	Slot time.Time `json:"slot"`
}

// CalendarKey is the key of an operator-wide schedule's record in the
// archive's states.
func CalendarKey(handler string) string { return "schedule/" + handler }

// startCalendar starts an operator's operator-wide schedules.
func (e *Engine) startCalendar(d *definition.Definition) (*operator, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	rn, err := newRunner(ctx, d, e, e.mgr.GetEventRecorder("opkit"))
	if err != nil {
		cancel()
		return nil, err
	}
	states, err := e.opts.Archive.States(ctx, d.Operator.Name)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("operator %s: reading its schedules' last slots from the archive: %w", d.Operator.Name, err)
	}
	last := map[string]time.Time{}
	for _, s := range states {
		var rec calendarRecord
		if json.Unmarshal(s.Data, &rec) == nil {
			last[s.Key] = rec.Slot
		}
	}
	op := &operator{def: d, cancel: cancel, done: make(chan struct{}), runner: rn}
	var loops sync.WaitGroup
	// A schedule never run before starts with the slot after now, read
	// before the loops start: a clock stepped once startCalendar returned
	// counts for them.
	now := rn.clock.Now()
	for _, h := range d.Handlers {
		if h.Fires(v1alpha1.OnSchedule) {
			from := last[CalendarKey(h.Name)]
			if from.IsZero() {
				from = now
			}
			loops.Go(func() { rn.calendar(ctx, h, from) })
		}
	}
	go func() {
		loops.Wait()
		close(op.done)
	}()
	return op, nil
}

// calendar runs h's slots until ctx ends; last is the last slot handled
// before, or the time the schedule started from.
func (rn *runner) calendar(ctx context.Context, h *definition.Handler, last time.Time) {
	log := rn.log.WithValues("handler", h.Name)
	for {
		slot, err := h.NextSlot(last)
		if err != nil {
			log.Error(err, "the schedule has no next slot; it stops")
			return
		}
		// Slots are Options.Clock's times (clock.go).
		if !sleepUntil(ctx, rn.clock, rn.steps, slot) {
			return
		}
		latest, run, skipped := catchUp(h, slot, rn.clock.Now())
		switch {
		case skipped > 0 && run:
			log.Info(fmt.Sprintf("schedule: %d slot(s) came due while no run could start; skipped, and the latest, %s, runs now (catchUp: %s)", skipped, latest.UTC().Format(time.RFC3339), h.CatchUp))
		case skipped > 0:
			log.Info(fmt.Sprintf("schedule: %d slot(s) came due while no run could start; skipped (catchUp: %s)", skipped, h.CatchUp))
		}
		if run {
			rn.runSlot(ctx, h, latest)
			if ctx.Err() != nil {
				return // the engine stops: the slot is not handled
			}
		}
		last = latest
		rec, _ := json.Marshal(calendarRecord{Slot: latest.UTC()})
		if err := rn.archive.PutState(context.WithoutCancel(ctx), &archive.State{
			Operator: rn.def.Operator.Name, Key: CalendarKey(h.Name), APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
			Name: rn.def.Operator.Name, Data: rec, UpdatedAt: time.Now().UTC(),
		}); err != nil {
			log.Error(err, "recording the slot handled; after a restart its run is found in the archive and not repeated", "slot", latest)
		}
	}
}

// catchUp decides, at now, what to do with the slot that came due and
// those after it that came due too: the latest of them runs when it is on
// time (less than its period, at most onTime, has passed since it came
// due) or, late, under CatchUp Once; the others are skipped. It returns
// the latest slot due, whether it runs, and how many slots are skipped.
func catchUp(h *definition.Handler, due, now time.Time) (latest time.Time, run bool, skipped int) {
	latest = due
	for n, err := h.NextSlot(latest); err == nil && !n.After(now) && skipped < 1_000_000; n, err = h.NextSlot(n) {
		latest = n
		skipped++
	}
	period := onTime
	if after, err := h.NextSlot(latest); err == nil && after.Sub(latest) < period {
		period = after.Sub(latest)
	}
	run = now.Sub(latest) < period || h.CatchUp == v1alpha1.CatchUpOnce
	if !run {
		skipped++
	}
	return latest, run, skipped
}

// scheduleContext is the binding context's schedule of an operator-wide
// schedule's run.
type scheduleContext struct {
	// Slot is the time the run is for, RFC 3339.
	Slot string `json:"slot"`
}

// runSlot runs one slot of h, retried by its policy, unless a run of the
// slot succeeded already.
func (rn *runner) runSlot(ctx context.Context, h *definition.Handler, slot time.Time) {
	rn.runForOperator(ctx, operatorRun{
		handler: h, trigger: v1alpha1.OnSchedule, uid: string(rn.def.Operator.UID),
		key:     fmt.Sprintf("%s/schedule/%s/%d", rn.def.Operator.Name, h.Name, slot.Unix()),
		log:     rn.log.WithValues("handler", h.Name, "slot", slot.UTC().Format(time.RFC3339)),
		context: func(bc *bindingContext) { bc.Schedule = &scheduleContext{Slot: slot.UTC().Format(time.RFC3339)} },
	})
}

// operatorEvent posts an Event on the Operator, when it is one read from
// the cluster; an Operator from a file has no object to post on.
func (rn *runner) operatorEvent(eventType, reason, runID, message string) {
	if rn.def.Operator.UID == "" {
		return
	}
	rn.events.Eventf(rn.def.Operator, nil, eventType, reason, runAction(runID), "%s", message)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
