package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/run"
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
	rn, err := newRunner(ctx, d, e, e.mgr.GetEventRecorder("opkit"), nil)
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
	op := &operator{def: d, cancel: cancel, done: make(chan struct{}), runner: rn, manual: newManualRuns(ctx.Done())}
	var loops sync.WaitGroup
	loops.Go(func() { e.manualLoop(ctx, rn, d, op.manual) })
	// A schedule never run before starts with the slot after now, read
	// before the loops start: a clock stepped once startCalendar returned
	// counts for them.
	now := e.opts.Clock.Now()
	for _, h := range d.Handlers {
		if h.Fires(v1alpha1.OnSchedule) {
			from := last[CalendarKey(h.Name)]
			if from.IsZero() {
				from = now
			}
			loops.Go(func() { e.calendar(ctx, rn, d, h, from) })
		}
	}
	go func() {
		loops.Wait()
		close(op.done)
	}()
	return op, nil
}

// calendar runs h's slots with rn until ctx ends; last is the last slot
// handled before, or the time the schedule started from.
func (e *Engine) calendar(ctx context.Context, rn *run.Runner, d *definition.Definition, h *definition.Handler, last time.Time) {
	log := e.mgr.GetLogger().WithValues("operator", d.Operator.Name, "handler", h.Name)
	clk := e.opts.Clock
	for {
		slot, err := h.NextSlot(last)
		if err != nil {
			log.Error(err, "the schedule has no next slot; it stops")
			return
		}
		// Slots are Options.Clock's times (clock.go).
		if !run.SleepUntil(ctx, clk, &e.clockSteps, slot) {
			return
		}
		// A paused operator runs no slot: the slots that came due while
		// it was paused are handled at its resume, by catchUp, as after
		// an engine that was down.
		if !rn.WaitResumed(ctx) {
			return
		}
		latest, due, skipped := catchUp(h, slot, clk.Now())
		switch {
		case skipped > 0 && due:
			log.Info(fmt.Sprintf("schedule: %d slot(s) came due while no run could start; skipped, and the latest, %s, runs now (catchUp: %s)", skipped, latest.UTC().Format(time.RFC3339), h.CatchUp))
		case skipped > 0:
			log.Info(fmt.Sprintf("schedule: %d slot(s) came due while no run could start; skipped (catchUp: %s)", skipped, h.CatchUp))
		}
		if due {
			runSlot(ctx, rn, d, h, latest, log)
			if ctx.Err() != nil {
				return // the engine stops: the slot is not handled
			}
		}
		last = latest
		rec, _ := json.Marshal(calendarRecord{Slot: latest.UTC()})
		if err := e.opts.Archive.PutState(context.WithoutCancel(ctx), &archive.State{
			Operator: d.Operator.Name, Key: CalendarKey(h.Name), APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
			Name: d.Operator.Name, Data: rec, UpdatedAt: time.Now().UTC(),
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

// runSlot runs one slot of h, retried by its policy, unless a run of the
// slot succeeded already.
func runSlot(ctx context.Context, rn *run.Runner, d *definition.Definition, h *definition.Handler, slot time.Time, log logr.Logger) {
	rn.RunForOperator(ctx, run.OperatorRun{
		Handler: h, Trigger: v1alpha1.OnSchedule, UID: string(d.Operator.UID),
		Key:      fmt.Sprintf("%s/schedule/%s/%d", d.Operator.Name, h.Name, slot.UTC().Unix()),
		Log:      log.WithValues("slot", slot.UTC().Format(time.RFC3339)),
		Schedule: &run.ScheduleContext{Slot: slot.UTC().Format(time.RFC3339)},
	})
}
