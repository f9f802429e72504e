package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// The sources scenario floods a consumed source (a NATS JetStream stream,
// a Kafka topic, each served in this process by its broker's own Go
// module) with SourceMessages messages at once, while an engine consumes
// it with an operator whose handler appends each run's idempotency key to
// a file, as the webhook scenario's does. It measures the messages
// handled per second (from the first published to the last handled), and
// per message the time from its publication (the bench sending it to its
// broker) to its record in the archive, to its handler's start and to its
// handling's end; all at once (10,000: the throughput) and at the webhook
// scenario's rate (1,000 at 100/s: the time a message takes). Every message must be recorded once and handled once.

// sourcesOperator names the operator of the sources scenario.
const sourcesOperator = "bench-sources"

// sourcesOperatorYAML is the operator, %s its source's kind block
// (indented under the source) and %q the keys file.
const sourcesOperatorYAML = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: bench-sources}
spec:
  sources:
  - name: flood
%s
  handlers:
  - name: record
    "on": [event]
    exec:
      command: ["/bin/sh", "-c", 'echo "$OPKIT_IDEMPOTENCY_KEY" >> "$OUT"']
      env: [{name: OUT, value: %q}]
`

// floodSource is a broker the scenario floods: its source block, and how
// it publishes n messages at once, returning each one's delivery id (as
// the consumer names it) and the time it was sent.
type floodSource struct {
	name    string
	block   string
	publish func(ctx context.Context, n int) (map[string]time.Time, error)
	stop    func()
}

// sources runs the flood on each broker.
func (b *bench) sources(ctx context.Context) error {
	for _, start := range []func(context.Context) (*floodSource, error){startNATSFlood, startKafkaFlood} {
		// At once: the throughput; at the webhook scenario's rate: the
		// time a message takes, beside a webhook delivery's.
		for _, rate := range []int{0, b.opts.WebhookRate} {
			n := b.opts.SourceMessages
			if rate > 0 {
				n = b.opts.WebhookDeliveries
			}
			src, err := start(ctx)
			if err != nil {
				return err
			}
			err = b.flood(ctx, src, n, rate)
			src.stop()
			if err != nil {
				return fmt.Errorf("%s: %w", src.name, err)
			}
		}
	}
	b.note("sources: opkit alone; the webhook scenario's figures are the HTTP source's beside them")
	return nil
}

// flood runs one flood.
func (b *bench) flood(ctx context.Context, src *floodSource, n, rate int) error {
	subject := fmt.Sprintf("%s, %d at once", src.name, n)
	if rate > 0 {
		subject = fmt.Sprintf("%s, %d/s", src.name, rate)
	}
	out := filepath.Join(b.workDir, fmt.Sprintf("sources-%s-%d.keys", src.name, time.Now().UnixNano()))
	srcs, err := definition.Load("sources.yaml", fmt.Appendf(nil, sourcesOperatorYAML, src.block, out))
	if err != nil {
		return err
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		return err
	}
	e, closeAll, err := b.startInProcess(ctx, engine.Options{}, d)
	if err != nil {
		return err
	}
	defer closeAll()
	store, logPath := e.store, e.log
	// A first message connects the consumer and starts the first
	// handler; it is not measured.
	if _, err := src.publish(ctx, 1); err != nil {
		return err
	}
	if err := waitHandled(ctx, store, 1, time.Minute); err != nil {
		return fmt.Errorf("the first message: %w (log: %s)", err, logPath)
	}
	fmt.Fprintf(b.log, "  %s\n", subject)
	first := time.Now()
	published, err := publishAt(ctx, src, n, rate)
	if err != nil {
		return err
	}
	waitErr := waitHandled(ctx, store, n+1, b.timeout(n))
	if err := e.stopped(); err != nil {
		return err
	}
	all, err := listDeliveries(ctx, store, sourcesOperator)
	if err != nil {
		return err
	}
	runs, err := runsByID(ctx, store, sourcesOperator)
	if err != nil {
		return err
	}
	var problems []error
	var toRecorded, toStarted, toHandled []time.Duration
	var last time.Time
	seen := map[string]bool{}
	for _, dl := range all {
		at, ok := published[dl.DeliveryID]
		if !ok {
			continue // the first message
		}
		if seen[dl.DeliveryID] {
			problems = append(problems, fmt.Errorf("message %s recorded twice", dl.DeliveryID))
		}
		seen[dl.DeliveryID] = true
		if dl.Outcome != archive.DeliveryHandled {
			problems = append(problems, fmt.Errorf("message %s: %s %s", dl.DeliveryID, dl.Outcome, dl.Reason))
			continue
		}
		toRecorded = append(toRecorded, dl.ReceivedAt.Sub(at))
		toHandled = append(toHandled, dl.HandledAt.Sub(at))
		if len(dl.Runs) > 0 {
			toStarted = append(toStarted, runs[dl.Runs[0]].StartedAt.Sub(at))
		}
		if dl.HandledAt.After(last) {
			last = dl.HandledAt
		}
	}
	keys := keysOf(out)
	lost := n - len(seen)
	twice := len(keys) - len(slices.Compact(slices.Sorted(slices.Values(keys))))
	b.add("sources", subject, "handled", "", float64(len(toHandled)))
	b.add("sources", subject, "lost", "", float64(lost))
	b.add("sources", subject, "handled twice", "", float64(twice))
	if waitErr == nil {
		b.add("sources", subject, "messages handled/s", "/s", float64(n)/last.Sub(first).Seconds())
	}
	b.addLatencies("", "sources", subject, "sent to recorded", toRecorded, 50, 99)
	b.addLatencies("", "sources", subject, "sent to handler started", toStarted, 50, 99)
	b.addLatencies("", "sources", subject, "sent to handled", toHandled, 50, 99)
	if lost > 0 {
		problems = append(problems, fmt.Errorf("%d of %d messages never recorded", lost, n))
	}
	if twice > 0 {
		problems = append(problems, fmt.Errorf("%d handler runs repeated a key", twice))
	}
	problems = append([]error{waitErr}, firstOf(problems, 20)...)
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return nil
}

// publishAt publishes n messages, at once (rate 0) or rate a second.
func publishAt(ctx context.Context, src *floodSource, n, rate int) (map[string]time.Time, error) {
	if rate == 0 {
		return src.publish(ctx, n)
	}
	out := make(map[string]time.Time, n)
	start := time.Now()
	for i := range n {
		select {
		case <-time.After(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate)))):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		one, err := src.publish(ctx, 1)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, one)
	}
	return out, nil
}

// waitHandled waits until the archive holds n deliveries of the sources
// operator, none Pending.
func waitHandled(ctx context.Context, store archive.Store, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var have, pending int
	for time.Now().Before(deadline) {
		all, err := listDeliveries(ctx, store, sourcesOperator)
		if err != nil {
			return err
		}
		have, pending = len(all), 0
		for _, d := range all {
			if d.Outcome == archive.DeliveryPending {
				pending++
			}
		}
		if have >= n && pending == 0 {
			return nil
		}
		if !sleep.For(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("after %s, %d of %d messages recorded, %d of them Pending", timeout, have, n, pending)
}

// listDeliveries lists an operator's deliveries.
func listDeliveries(ctx context.Context, store archive.Store, operator string) ([]archive.Delivery, error) {
	var out []archive.Delivery
	q := archive.DeliveryQuery{Operator: operator, Limit: 1000}
	for {
		page, err := store.ListDeliveries(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("reading the deliveries: %w", err)
		}
		out = append(out, page.Deliveries...)
		if page.Next == "" {
			return out, nil
		}
		q.Cursor = page.Next
	}
}

// runsByID reads an operator's runs, by their id.
func runsByID(ctx context.Context, store archive.Store, operator string) (map[string]archive.Run, error) {
	runs, err := archive.ListAll(ctx, store, archive.Query{Operator: operator})
	if err != nil {
		return nil, fmt.Errorf("reading the runs: %w", err)
	}
	byID := make(map[string]archive.Run, len(runs))
	for _, r := range runs {
		byID[r.ID] = r
	}
	return byID, nil
}

// keysOf reads the keys a flood's handler wrote.
func keysOf(path string) []string {
	data, _ := os.ReadFile(path)
	return strings.Fields(string(data))
}
