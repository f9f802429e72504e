// Package natsjs consumes an operator's nats source: a NATS JetStream
// stream read through a durable pull consumer, each message handed to a
// source.Sink. It keeps the source.Consumer contract:
//
// Flow. Run connects (reading the source's credentials through
// source.Secrets at each connection, so that a rotated one is used by the
// next), finds the stream, and creates the durable consumer (named by the
// source's consumer, filtered by its subjects, explicit acks) or updates
// it, keeping the deliver policy it was created with: the source's
// deliverPolicy says only where a new consumer starts. It then fetches
// messages in batches and hands them to the sink one by one, in the order
// the server delivers them, from Run's goroutine.
//
// Guarantees.
//   - A message is acknowledged only after Sink.Deliver returned nil for
//     it. When a Deliver fails, Run keeps that message and those fetched
//     after it, waits (source.Backoff; State says the failure meanwhile,
//     still connected) telling the server they are in progress, and
//     delivers them again in their order: a failing sink holds the
//     stream back, it does not skip a message.
//   - The ID of a message is <stream>:<stream sequence>, the same on every
//     redelivery, to this consumer or to the next one after a restart: a
//     message acknowledged late, or not at all (Run stopped between
//     Deliver and the acknowledgement, the connection lost), is delivered
//     again with the ID the sink already recorded.
//   - When ctx ends, the fetch in progress is given a moment (250 ms) to
//     hand over what the server sent for it; the messages fetched and
//     not delivered are then sent back (a negative acknowledgement,
//     redelivered a second later, once this connection is gone) and the
//     acknowledgements are flushed before the connection closes, so that
//     the next consumer gets them at once. A message the server sent that
//     never reached Run (still in flight then, or when the connection was
//     lost) is delivered again after the consumer's ack wait, 30 s.
//   - Nothing is ever deleted: not the stream, which the user owns (a
//     missing one is an error in State, naming it, and Run keeps trying),
//     nor the durable consumer, which keeps the position across restarts.
//
// Failures. A lost connection is not reconnected by the NATS client: Run
// sees it closed, says so in State (Connected false, Err, RetryAt), waits
// source.Backoff and connects again, reading the credentials again.
// Run returns an error only for a spec it can never consume; it never
// logs.
//
// Caveats. A message larger than the source's maxBodyBytes is handed to
// the sink with its first maxBodyBytes+1 bytes, as source.ReadBody reads
// an oversized webhook body: the sink sees it is over the limit and
// records it refused, and it is acknowledged (delivering it again would
// not make it smaller). Lag is the consumer's pending plus ack-pending
// counts, asked of the server every few seconds, not per message.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/source"
)

const (
	// batchSize is how many messages a fetch asks for: enough that a
	// flood costs one request per batch, few enough that the last of a
	// batch is delivered well within ackWait.
	batchSize = 256
	// fetchWait is how long a fetch waits for messages when there are
	// none: how often an idle consumer hears from its server.
	fetchWait = 5 * time.Second
	// ackWait is how long the server waits for a delivered message's
	// acknowledgement before it delivers it again. A Deliver that takes
	// longer keeps its message by telling the server it is in progress.
	ackWait = 30 * time.Second
	// maxAckPending bounds the messages delivered and not yet
	// acknowledged.
	maxAckPending = 4 * batchSize
	// nakDelay is how long after Run stops the messages it fetched and
	// did not deliver are delivered again: by then its connection is
	// closed, and the server sends them to the next consumer, not to the
	// pull request of this one.
	nakDelay = time.Second
	// drainGrace is how long a fetch is given to hand over what the
	// server sent for it once Run stops taking messages from it.
	drainGrace = 250 * time.Millisecond
	// lagEvery is how often the consumer's pending counts are asked.
	lagEvery = 2 * time.Second
	// opTimeout bounds connecting and each request to the JetStream API.
	opTimeout = 10 * time.Second
	// maxID is the longest message ID (source.Message.ID).
	maxID = 200
)

// Consumer is the JetStream consumer of one nats source.
type Consumer struct {
	spec    *v1alpha1.NATSSource
	secrets source.Secrets

	mu    sync.Mutex
	state source.State

	// delivering is the message in Sink.Deliver now, for the keeper that
	// tells the server a long Deliver is in progress.
	delivering atomic.Pointer[held]
}

// held is a message being delivered since a time.
type held struct {
	msg   jetstream.Msg
	since time.Time
}

var _ source.Consumer = (*Consumer)(nil)

// New returns the consumer of spec, as internal/definition checked and
// defaulted it (its consumer named, its deliver policy and maxBodyBytes
// set). secrets reads its credentials.
func New(spec *v1alpha1.NATSSource, secrets source.Secrets) *Consumer {
	return &Consumer{spec: spec, secrets: secrets, state: source.State{Lag: -1}}
}

// State says how the consumer stands.
func (c *Consumer) State() source.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Consumer) update(f func(*source.State)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.state)
}

// Run consumes until ctx ends, then returns nil. It returns an error at
// once for a spec it can never consume.
func (c *Consumer) Run(ctx context.Context, sink source.Sink) error {
	if err := c.check(); err != nil {
		c.update(func(s *source.State) { s.Err = err })
		return err
	}
	failures := 0
	for ctx.Err() == nil {
		connected, err := c.session(ctx, sink)
		if ctx.Err() != nil {
			break
		}
		if connected {
			failures = 0
		}
		failures++
		wait := source.Backoff(failures, rand.Float64())
		c.update(func(s *source.State) {
			s.Connected, s.Err, s.RetryAt = false, err, time.Now().Add(wait)
		})
		sleep.For(ctx, wait)
	}
	c.update(func(s *source.State) { s.Connected, s.Err, s.RetryAt = false, nil, time.Time{} })
	return nil
}

// check finds what no connection can fix.
func (c *Consumer) check() error {
	switch {
	case c.spec == nil:
		return errors.New("natsjs: no nats source")
	case c.spec.Stream == "" || c.spec.Consumer == "":
		return fmt.Errorf("natsjs: the nats source's stream (%q) and consumer (%q) are required", c.spec.Stream, c.spec.Consumer)
	case len(c.spec.Stream)+21 > maxID:
		return fmt.Errorf("stream %q has a name of %d characters: its messages' delivery ids, <stream>:<sequence>, must fit in %d characters, so opkit consumes streams of names up to %d characters", c.spec.Stream[:32]+"...", len(c.spec.Stream), maxID, maxID-21)
	}
	return nil
}

// session connects and consumes until the connection is lost or ctx
// ends. It says whether it connected, and why it ended (nil when ctx
// did).
func (c *Consumer) session(ctx context.Context, sink source.Sink) (connected bool, err error) {
	// The connection's context ends when it is lost, not with ctx: when
	// ctx ends, the fetch in progress is given drainGrace to hand over
	// what the server sent, which Run then sends back.
	connCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	nc, cons, err := c.connect(ctx, func(err error) { cancel(err) })
	if err != nil {
		return false, err
	}
	defer func() {
		// The acknowledgements are written asynchronously: a flush sends
		// them, and its PONG says the server has read them.
		_ = nc.FlushTimeout(2 * time.Second)
		nc.Close()
	}()
	info := cons.CachedInfo()
	c.update(func(s *source.State) {
		*s = source.State{Connected: true, Lag: lag(info), Last: time.Now()}
	})

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // stops the goroutines before wg.Wait
	wg.Go(func() { c.watchLag(connCtx, cons) })
	wg.Go(func() { c.keepDelivering(connCtx) })

	// held are messages fetched and not delivered: after a failed
	// Deliver, the failed one and those after it, delivered again in
	// their order after the back-off; when ctx ends, those sent back.
	var held []jetstream.Msg
	defer func() {
		if connCtx.Err() == nil || ctx.Err() != nil {
			for _, msg := range held {
				_ = msg.NakWithDelay(nakDelay)
			}
		}
	}()
	failures := 0
	for {
		if len(held) > 0 {
			held, err = c.deliverAll(ctx, connCtx, sink, held)
		} else {
			held, err = c.batch(ctx, connCtx, cons, sink)
		}
		switch {
		case ctx.Err() != nil:
			return true, nil
		case connCtx.Err() != nil:
			return true, fmt.Errorf("the connection to %s was lost: %w", servers(c.spec.URL), context.Cause(connCtx))
		case err == nil:
			failures = 0
			continue
		}
		var failed *deliveryError
		if !errors.As(err, &failed) {
			return true, err
		}
		failures++
		wait := source.Backoff(failures, rand.Float64())
		c.update(func(s *source.State) { s.Err, s.RetryAt = err, time.Now().Add(wait) })
		hold(ctx, connCtx, held, wait)
	}
}

// deliveryError is a Deliver that failed: the consumer waits, and
// delivers the message again.
type deliveryError struct {
	id  string
	err error
}

func (e *deliveryError) Error() string { return fmt.Sprintf("delivering %s: %v", e.id, e.err) }
func (e *deliveryError) Unwrap() error { return e.err }

// batch fetches one batch and delivers it in order. When a Deliver
// fails, or ctx ends, or the connection is lost, it returns the messages
// left (the failed one first) with why.
func (c *Consumer) batch(ctx, connCtx context.Context, cons jetstream.Consumer, sink source.Sink) ([]jetstream.Msg, error) {
	fetchCtx, cancel := context.WithTimeout(connCtx, fetchWait)
	defer cancel()
	b, err := cons.Fetch(batchSize, jetstream.FetchContext(fetchCtx))
	if err != nil {
		return nil, fmt.Errorf("fetching from consumer %s on %s: %w", c.spec.Consumer, servers(c.spec.URL), err)
	}
	fetched := time.Now()
	var rest []jetstream.Msg
	var failed error
	// Once a Deliver failed or ctx ended, the fetch is given drainGrace
	// to hand over the messages the server sent for it, which are kept
	// in rest, before it is cancelled: a message that arrives after
	// that is delivered again only after ackWait.
	var grace <-chan time.Time
	stopping := false
	stop := func() {
		if !stopping {
			stopping, grace = true, time.After(drainGrace)
		}
	}
	done := ctx.Done()
	msgs := b.Messages()
	for msgs != nil {
		select {
		case <-done:
			done = nil
			stop()
		case <-grace:
			cancel() // the fetch ends and closes msgs
		case msg, ok := <-msgs:
			switch {
			case !ok:
				msgs = nil
			case stopping || connCtx.Err() != nil:
				rest = append(rest, msg)
			default:
				if time.Since(fetched) > ackWait/2 {
					_ = msg.InProgress() // waited in the batch behind slow Delivers
				}
				if failed = c.deliver(ctx, sink, msg); failed != nil {
					rest = append(rest, msg)
					stop()
				}
			}
		}
	}
	c.update(func(s *source.State) { s.Last = time.Now() })
	if failed != nil {
		return rest, failed
	}
	if err := b.Error(); err != nil && fetchCtx.Err() == nil {
		return rest, fmt.Errorf("fetching from consumer %s on %s: %w", c.spec.Consumer, servers(c.spec.URL), err)
	}
	return rest, nil
}

// deliverAll delivers msgs in order. When a Deliver fails, or ctx ends,
// it returns the messages left (the failed one first) with why.
func (c *Consumer) deliverAll(ctx, connCtx context.Context, sink source.Sink, msgs []jetstream.Msg) ([]jetstream.Msg, error) {
	for i, msg := range msgs {
		if ctx.Err() != nil || connCtx.Err() != nil {
			return msgs[i:], nil
		}
		_ = msg.InProgress() // it was held through a back-off
		if err := c.deliver(ctx, sink, msg); err != nil {
			return msgs[i:], err
		}
	}
	return nil, nil
}

// hold waits d, or until ctx ends, telling the server every ackWait/3
// that msgs are in progress, so that it delivers them to no one else.
func hold(ctx, connCtx context.Context, msgs []jetstream.Msg, d time.Duration) {
	t := time.NewTicker(ackWait / 3)
	defer t.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-connCtx.Done():
			return
		case <-end.C:
			return
		case <-t.C:
			for _, msg := range msgs {
				_ = msg.InProgress()
			}
		}
	}
}

// deliver hands msg to the sink and acknowledges it once the sink has it.
func (c *Consumer) deliver(ctx context.Context, sink source.Sink, msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("reading a message of consumer %s: %w", c.spec.Consumer, err)
	}
	m := message(meta, msg.Subject(), msg.Headers(), msg.Data(), c.maxBody())
	c.delivering.Store(&held{msg: msg, since: time.Now()})
	err = sink.Deliver(ctx, m)
	c.delivering.Store(nil)
	if err != nil {
		return &deliveryError{id: m.ID, err: err}
	}
	// An acknowledgement lost with the connection makes the server
	// deliver the message again, with the same ID: the sink knows it.
	_ = msg.Ack()
	c.update(func(s *source.State) { s.Err, s.RetryAt, s.Last = nil, time.Time{}, time.Now() })
	return nil
}

// message is a JetStream message as the sink's: its ID <stream>:<stream
// sequence> from meta, its subject the Event, its headers by lower-case
// name, its data the Body, cut to limit+1 bytes when longer than limit
// (for the sink to refuse as too large), and its timestamp. It is all of
// a message that is read: the sink decodes the body.
func message(meta *jetstream.MsgMetadata, subject string, h nats.Header, data []byte, limit int64) source.Message {
	m := source.Message{
		ID:        fmt.Sprintf("%s:%d", meta.Stream, meta.Sequence.Stream),
		Event:     subject,
		Headers:   headers(h),
		Body:      data,
		Published: meta.Timestamp,
	}
	if int64(len(m.Body)) > limit {
		m.Body = m.Body[:limit+1]
	}
	return m
}

func (c *Consumer) maxBody() int64 {
	if c.spec.MaxBodyBytes > 0 {
		return c.spec.MaxBodyBytes
	}
	return v1alpha1.DefaultWebhookBody
}

// keepDelivering tells the server that a message in a long Deliver is in
// progress, so that it does not deliver it again meanwhile.
func (c *Consumer) keepDelivering(ctx context.Context) {
	sleep.Tick(ctx, ackWait/4, func() {
		if h := c.delivering.Load(); h != nil && time.Since(h.since) > ackWait/4 {
			_ = h.msg.InProgress()
		}
	})
}

// watchLag asks the consumer's pending counts every lagEvery.
func (c *Consumer) watchLag(ctx context.Context, cons jetstream.Consumer) {
	sleep.Tick(ctx, lagEvery, func() {
		infoCtx, cancel := context.WithTimeout(ctx, opTimeout)
		info, err := cons.Info(infoCtx)
		cancel()
		if err == nil {
			c.update(func(s *source.State) { s.Lag = lag(info) })
		}
	})
}

// lag is what the stream holds that the sink has not taken: the
// messages not yet delivered and those delivered but not acknowledged.
func lag(info *jetstream.ConsumerInfo) int64 {
	if info == nil {
		return -1
	}
	return int64(info.NumPending) + int64(info.NumAckPending)
}

// headers are a message's headers by lower-case name, first value. NATS
// keeps the case of a header's name: of names that differ only in case
// (Nats-Msg-Id, nats-msg-id), the first in byte order gives the value,
// so that every delivery of a message reads the same headers.
func headers(h nats.Header) map[string]string {
	out := make(map[string]string, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		lower := strings.ToLower(k)
		if _, ok := out[lower]; !ok && len(h[k]) > 0 {
			out[lower] = h[k][0]
		}
	}
	return out
}

// servers is the source's URL without any user or password in it, for
// messages.
func servers(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			u.User = nil
			p = u.String()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
