package calendar

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/run"
)

// onTime is the longest a slot may be late and still count as on time.
const onTime = 5 * time.Second

// Config is what a calendar needs of the engine.
type Config struct {
	// Archive keeps each schedule's last slot handled.
	Archive archive.HandlerRecordStore
	// Clock times the slots; Steps wakes the waits on it when a test
	// steps it.
	Clock clock.Clock
	Steps *run.ClockSteps
	Log   logr.Logger
	// Events and Client answer a request to run now on its Operator: an
	// Event, and the patch that removes the request's annotation.
	Events events.EventRecorder
	Client client.Client
}

// record is what the archive keeps of an operator-wide schedule.
type record struct {
	// Slot is the last slot handled: run, or skipped by the policy.
	Slot time.Time `json:"slot"`
}

// Key is the key of an operator-wide schedule's record in the archive's
// states.
func Key(handler string) string { return "schedule/" + handler }

// Calendar is an operator's schedules, running.
type Calendar struct {
	cfg    Config
	def    *definition.Definition
	runner *run.Runner
	manual *manualRuns
	done   chan struct{}
}

// Start starts d's operator-wide schedules with rn, until ctx ends.
func Start(ctx context.Context, cfg Config, d *definition.Definition, rn *run.Runner) (*Calendar, error) {
	states, err := cfg.Archive.HandlerRecords(ctx, d.Operator.Name)
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its schedules' last slots from the archive: %w", d.Operator.Name, err)
	}
	last := map[string]time.Time{}
	for _, s := range states {
		var rec record
		if json.Unmarshal(s.Data, &rec) == nil {
			last[s.Key] = rec.Slot
		}
	}
	c := &Calendar{cfg: cfg, def: d, runner: rn, manual: newManualRuns(ctx.Done()), done: make(chan struct{})}
	var loops sync.WaitGroup
	loops.Go(func() { c.manualLoop(ctx) })
	// A schedule never run before starts with the slot after now, read
	// before the loops start: a clock stepped once Start returned counts
	// for them.
	now := cfg.Clock.Now()
	for _, h := range d.Handlers {
		if h.Fires(v1alpha1.OnSchedule) {
			from := last[Key(h.Name)]
			if from.IsZero() {
				from = now
			}
			loops.Go(func() { c.schedule(ctx, h, from) })
		}
	}
	go func() {
		loops.Wait()
		close(c.done)
	}()
	return c, nil
}

// Done is closed once every loop of the calendar ended, its runs in
// flight with them.
func (c *Calendar) Done() <-chan struct{} { return c.done }

// schedule runs h's slots until ctx ends; last is the last slot handled
// before, or the time the schedule started from.
func (c *Calendar) schedule(ctx context.Context, h *definition.Handler, last time.Time) {
	d, rn, clk := c.def, c.runner, c.cfg.Clock
	log := c.cfg.Log.WithValues("operator", d.Operator.Name, "handler", h.Name)
	for {
		slot, err := h.NextSlot(last)
		if err != nil {
			log.Error(err, "the schedule has no next slot; it stops")
			return
		}
		if !run.SleepUntil(ctx, clk, c.cfg.Steps, slot) {
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
		rec, _ := json.Marshal(record{Slot: latest.UTC()})
		if err := c.cfg.Archive.PutHandlerRecord(context.WithoutCancel(ctx), &archive.HandlerRecord{
			Operator: d.Operator.Name, Key: Key(h.Name), APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
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
