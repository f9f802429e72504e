package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The bench's run: each scenario in turn, its figures derived.

// run runs the chosen scenarios, each opts.Runs times; the settings of a
// scenario take turns within a run, so that a slow moment of the machine
// does not fall on one of them only.
func (b *bench) run(ctx context.Context) error {
	on := func(s string) bool { return slices.Contains(b.opts.Scenarios, s) }
	for run := 1; run <= b.opts.Runs; run++ {
		step := func(what string, f func() error) error {
			if b.opts.Steps != nil && !b.opts.Steps.MatchString(what) {
				return nil
			}
			fmt.Fprintf(b.log, "run %d/%d: %s\n", run, b.opts.Runs, what)
			t0 := time.Now()
			if err := f(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			fmt.Fprintf(b.log, "  %s\n", time.Since(t0).Round(100*time.Millisecond))
			return nil
		}
		if on("ceiling") {
			for _, conc := range []int{1, 16} {
				if err := step(fmt.Sprintf("ceiling, concurrency %d", conc), func() error { return b.ceiling(ctx, conc) }); err != nil {
					return err
				}
			}
		}
		subjects := b.drainSubjects()
		for _, n := range b.drainSizes() {
			if !on("drain") && !on("memory") && !on("idle") {
				break
			}
			sized := subjects
			if n != b.opts.Objects {
				// The cold start is measured against baseline-8, and for
				// the drain alone.
				sized = slices.DeleteFunc(slices.Clone(subjects), func(im impl) bool { return im == baseline1 || !on("drain") })
			}
			for _, im := range inTurn(sized, run) { // the turns of those measured at n
				idle := time.Duration(0)
				if on("idle") && im != baseline1 && n == b.opts.Objects {
					idle = b.opts.Idle
				}
				if err := step(fmt.Sprintf("%s %s", drainScenario(n), im.Name), func() error { return b.drain(ctx, im, n, idle) }); err != nil {
					return err
				}
			}
		}
		if on("live") {
			for _, rate := range b.opts.LiveRates {
				// Each run starts with the next subject: the first after
				// the drains meets what they left the API server to do.
				for _, im := range inTurn(subjects, run) {
					if err := step(fmt.Sprintf("live %s at %d/s", im.Name, rate), func() error { return b.live(ctx, im, rate) }); err != nil {
						return err
					}
				}
			}
		}
		if on("handlers") {
			if err := step("exec handler overhead", func() error { return b.execOverhead(ctx) }); err != nil {
				return err
			}
			if err := step("exec handler through a warm runner", func() error { return b.runnerOverhead(ctx) }); err != nil {
				return err
			}
			// The drains of the same Printers, each setting once, taking
			// turns in going first from run to run: the drain without a
			// handler they are measured against, the exec handler with the
			// archive on and off (and opkit-b's), tracing on, an http
			// handler, mode Serve, the Python handlers in mode Serve (a
			// bare loop, and the same handler on opkit's SDK: issue 55),
			// and mode Serve in a runner.
			type drainStep struct {
				what string
				f    func() error
			}
			n := b.opts.HandlerObjects
			drains := []drainStep{
				{"drain without a handler", func() error { return b.noHandlerDrain(ctx, n) }},
				{"exec handler drain, archive true", func() error { return b.handlerDrain(ctx, opkitDefaults, n, true) }},
				{"exec handler drain, archive false", func() error { return b.handlerDrain(ctx, opkitDefaults, n, false) }},
			}
			if opkitB.Exe != "" {
				drains = append(drains, drainStep{"exec handler drain, opkit-b, archive true", func() error { return b.handlerDrain(ctx, opkitB, n, true) }})
			}
			drains = append(drains,
				drainStep{"exec handler drain, tracing on", func() error { return b.tracedHandlerDrain(ctx, n) }},
				drainStep{"http handler drain", func() error { return b.httpHandlerDrain(ctx, n) }},
				drainStep{"exec handler drain, mode Serve", func() error {
					return b.handlerDrainOf(ctx, opkitServe, "printer-exec.yaml", serveSubject, tempArchive(b.workDir), n)
				}},
			)
			pythons, err := b.pythonHandlers(ctx)
			if err != nil {
				return err
			}
			for _, h := range inTurn(pythons, run) { // the pair's first alternates too
				drains = append(drains, drainStep{"exec handler drain, mode Serve, " + strings.TrimPrefix(h.subject, serveSubject+", "), func() error {
					return b.pythonHandlerDrain(ctx, h, n)
				}})
			}
			drains = append(drains, drainStep{"exec handler drain, mode Serve, in a runner", func() error {
				return b.handlerDrainOf(ctx, opkitRunners, "printer-exec.yaml", runnersSubject, tempArchive(b.workDir), n)
			}})
			for _, d := range inTurn(drains, run) {
				if err := step(d.what, d.f); err != nil {
					return err
				}
			}
			peers, err := b.peers(ctx)
			if err != nil {
				return err
			}
			for _, im := range inTurn(peers, run) {
				if err := step("exec handler drain, "+im.Name, func() error { return b.peerDrain(ctx, im, b.opts.HandlerObjects) }); err != nil {
					return err
				}
			}
			if err := step("job handler latency", func() error { return b.jobLatency(ctx, b.opts.JobObjects) }); err != nil {
				return err
			}
		}
		if on("archive") || on("console") {
			b.note("archive, console: opkit's run archive alone, on each store side by side; a controller-runtime operator keeps no run archive, so no baseline applies")
		}
		if on("archive") {
			for _, n := range b.opts.ArchiveSizes {
				for _, st := range b.opts.ArchiveStores {
					if err := step(fmt.Sprintf("archive at %d runs, %s", n, st.title()), func() error { return b.archiveScale(ctx, st, n) }); err != nil {
						return err
					}
				}
			}
		}
		if on("console") {
			for _, n := range b.opts.ArchiveSizes {
				for _, st := range b.opts.ArchiveStores {
					if err := step(fmt.Sprintf("console at %d runs, %s", n, st.title()), func() error { return b.consolePages(ctx, st, n) }); err != nil {
						return err
					}
				}
			}
		}
		if on("watch") {
			var w *watchSet
			if err := step(fmt.Sprintf("watch: %d Deployments", b.opts.WatchObjects), func() (err error) { w, err = b.watchSetup(ctx); return err }); err != nil {
				return err
			}
			subjects, err := b.watchSubjects(ctx)
			if err != nil {
				return err
			}
			// Each run starts with the next subject, as the drains and
			// live do: the first after the setup meets what it left
			// kube-controller-manager and the API server to do.
			for _, im := range inTurn(subjects, run) {
				if err := step("watch "+im.Name, func() error { return b.watch(ctx, w, im) }); err != nil {
					return err
				}
			}
			if err := b.c.cleanUp(ctx); err != nil {
				return err
			}
		}
		if on("webhook") {
			what := fmt.Sprintf("webhook: %d deliveries at %d/s", b.opts.WebhookDeliveries, b.opts.WebhookRate)
			if err := step(what, func() error { return b.webhook(ctx) }); err != nil {
				return err
			}
		}
		if on("sources") {
			what := fmt.Sprintf("sources: %d messages at once on NATS and Kafka", b.opts.SourceMessages)
			if err := step(what, func() error { return b.sources(ctx) }); err != nil {
				return err
			}
		}
		if on("plan") {
			what := fmt.Sprintf("plan: %d Websites, both children changed", b.opts.PlanObjects)
			if err := step(what, func() error { return b.plan(ctx) }); err != nil {
				return err
			}
		}
	}
	// The second memory point is the longest: it comes last, so that an
	// interrupted suite has the rest.
	for run := 1; on("memory") && b.opts.MemoryObjects > 0 && run <= b.opts.MemoryRuns; run++ {
		// baseline-1 is left out: 50,000 Printers at one worker take most
		// of an hour.
		measured := slices.DeleteFunc(b.drainSubjects(), func(im impl) bool { return im == baseline1 })
		for _, im := range inTurn(measured, run) {
			fmt.Fprintf(b.log, "memory run %d/%d: %s at %d\n", run, b.opts.MemoryRuns, im.Name, b.opts.MemoryObjects)
			t0 := time.Now()
			if err := b.drain(ctx, im, b.opts.MemoryObjects, 0); err != nil {
				return fmt.Errorf("memory %s at %d: %w", im.Name, b.opts.MemoryObjects, err)
			}
			fmt.Fprintf(b.log, "  %s\n", time.Since(t0).Round(100*time.Millisecond))
		}
	}
	return nil
}

// derive adds the figures computed from others' medians: the memory each
// further object costs, between the two memory points.
func (b *bench) derive() {
	n1, n2 := b.opts.Objects, b.opts.MemoryObjects
	if n2 <= n1 {
		return
	}
	for _, im := range []impl{opkitDefaults, baseline8} {
		for _, metric := range []string{"peak RSS", "peak heap"} {
			m1, ok1 := b.median("memory "+sizeLabel(n1)+" objects", im.Name, metric)
			m2, ok2 := b.median("memory "+sizeLabel(n2)+" objects", im.Name, metric)
			if ok1 && ok2 {
				b.add("memory per object", im.Name, metric, "KiB", (m2-m1)*1024/float64(n2-n1))
			}
		}
	}
}

// timeout bounds the wait for n objects: generous, so that only a stuck
// controller fails.
func (b *bench) timeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*20*time.Millisecond
}

// inTurn is s for the run-th run (from 1): its items in turn, starting
// with the run-th (round the end), so that across runs each item goes
// first; a subject measured right after another meets what that one left
// the machine and the API server to do.
func inTurn[T any](s []T, run int) []T {
	if len(s) == 0 {
		return nil
	}
	k := (run - 1) % len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}
