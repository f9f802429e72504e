// Package kafkasrc consumes an operator's kafka source: the records of its
// topics, taken in a consumer group and handed one by one to a
// source.Sink. It is a source.Consumer, and keeps that contract so:
//
//   - Offsets are committed by the consumer, never automatically: after
//     each poll, for each partition, the offset after the last record
//     that Sink.Deliver returned nil for, when every earlier record of
//     the partition's poll did too. Records of one partition are
//     delivered in order, one at a time; the partitions of a poll are
//     delivered at once, each by a goroutine of its own.
//   - A record whose Deliver failed is not committed, nor is any after it
//     in its partition: the partition is rewound to it (the records
//     after it that were fetched are dropped), and after a back-off
//     (source.Backoff) it is delivered again, followed by the rest.
//   - Rebalances wait for the poll being delivered (the group's
//     rebalance is blocked from a poll until its commit), so a partition
//     moves to another member with everything delivered committed and
//     everything else not; a member that stops (Run's ctx ends) commits
//     what was delivered and leaves the group. The new owner, or the
//     next Run, starts from the committed offsets: a record may come
//     again (a crash between Deliver and the commit), never be lost, and
//     comes with the same ID each time.
//   - A consumer made with a member name is a static member of the group
//     (Kafka's KIP-345), its instance id the name and a hash of its
//     topics: it does not leave the group when it stops, and the next
//     consumer of that name and those topics, in this process or
//     another, takes its place and its partitions at once, without a
//     rebalance, also when the one before was killed. One of other
//     topics is another member (a broker before Kafka 3.2 would hand a
//     static member back its old assignment whatever its topics), and
//     joins once the old one's session timeout (45 s) ended it, as every
//     member after a killed dynamic one does.
//   - A partition the group has no commit for starts at its end (Latest)
//     or its start (Earliest), and that offset is committed as the member
//     takes it: a Latest group that stops before delivering a record of
//     it resumes at that record, not at the end again.
//   - Failing to reach the brokers (connection, TLS, SASL, a group
//     session lost, a commit refused, no answer for a while) is said in
//     State; the client is closed and, after a back-off, made again,
//     starting from the committed offsets. Run never logs.
//
// A record is a source.Message so: ID is <topic>:<partition>:<offset>
// (a topic so long that the ID would pass 200 characters is cut and
// followed by a hash of it, see ID); Event is the topic; Headers are the
// record's headers by lower-case name, the first of each name, and the
// record's key as kafka-key when it is printable text (valid UTF-8
// without control characters), otherwise base64 (standard, padded) as
// kafka-key-base64; a record without a key has neither. Body is the
// record's value; one longer than the source's MaxBodyBytes is cut to
// MaxBodyBytes+1 bytes, as source.ReadBody cuts a webhook's, for the sink
// to refuse as too large without holding all of it. Published is the
// record's timestamp.
//
// Lag is the sum, over the partitions the member is assigned, of the
// partition's high watermark, as the last fetch of it said, less the
// offset of the next record to deliver: it costs no request of its own,
// and says 0 for a partition not fetched yet.
package kafkasrc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/source"
)

// Timings of a session with the brokers.
const (
	// pollRecords bounds a poll: the records delivered, and so the time
	// the group's rebalance waits for them, between two commits.
	pollRecords = 1000
	// pingTimeout bounds the first request to the brokers of a session.
	pingTimeout = 10 * time.Second
	// commitTimeout bounds a commit, made also after Run's ctx ended.
	commitTimeout = 10 * time.Second
	// silence is how long the brokers may answer nothing before the
	// session is given up: a member's fetch is answered within 5 s
	// (kgo's FetchMaxWait) and its heartbeat every 3 s.
	silence = 20 * time.Second
	// pollWait is how often the poll loop looks at the silence.
	pollWait = 5 * time.Second
)

// Consumer consumes one kafka source. Make it with New; Run it once at a
// time.
type Consumer struct {
	spec     *v1alpha1.KafkaSource
	instance string // the static member's id; "" for a dynamic member
	secrets  source.Secrets

	// last is when a broker last answered (UnixNano), and lastErr the
	// last failure to connect to one: set by kgo's hooks.
	last    atomic.Int64
	lastErr atomic.Pointer[error]

	// saslStarted and saslDone count the SASL authentications of a
	// session begun and completed: see client.
	saslStarted, saslDone atomic.Int64

	mu    sync.Mutex
	state source.State // Connected, Err, RetryAt
	lag   map[partition]int64
	pins  map[partition]int64 // see pinStart
}

var _ source.Consumer = (*Consumer)(nil)

// partition is a topic's partition.
type partition struct {
	topic string
	n     int32
}

// New returns the consumer of spec, a source compiled by package
// definition (Group and StartOffset defaulted), reading its SASL password
// and TLS CA with secrets at each connection. A non-empty member makes it
// a static member of the group (InstanceID): no two consumers of one
// group and one member name may run at once.
func New(spec *v1alpha1.KafkaSource, member string, secrets source.Secrets) *Consumer {
	c := &Consumer{spec: spec, secrets: secrets, lag: map[partition]int64{}, pins: map[partition]int64{}}
	if member != "" {
		c.instance = InstanceID(member, spec.Topics)
	}
	return c
}

// InstanceID is the static member id of a consumer of member's name and
// topics: the name, a dash and 8 hex digits of a hash of the topics
// (sorted).
func InstanceID(member string, topics []string) string {
	sum := sha256.Sum256([]byte(strings.Join(slices.Sorted(slices.Values(topics)), "\x00")))
	return member + "-" + hex.EncodeToString(sum[:4])
}

// State says how the consumer stands.
func (c *Consumer) State() source.State {
	c.mu.Lock()
	s := c.state
	for _, n := range c.lag {
		s.Lag += n
	}
	c.mu.Unlock()
	if t := c.last.Load(); t != 0 {
		s.Last = time.Unix(0, t)
	}
	return s
}

// Run consumes until ctx ends, then returns nil. It returns an error only
// for a spec it can never consume.
func (c *Consumer) Run(ctx context.Context, sink source.Sink) error {
	if err := c.check(); err != nil {
		return err
	}
	failures := 0
	for {
		err := c.session(ctx, sink, func() { failures = 0 })
		c.mu.Lock()
		clear(c.lag)
		clear(c.pins)
		c.mu.Unlock()
		if ctx.Err() != nil {
			c.setState(source.State{})
			return nil
		}
		failures++
		wait := source.Backoff(failures, rand.Float64())
		c.setState(source.State{Err: err, RetryAt: time.Now().Add(wait)})
		if !sleep.For(ctx, wait) {
			c.setState(source.State{})
			return nil
		}
	}
}

// check refuses a spec no retry mends.
func (c *Consumer) check() error {
	s := c.spec
	switch {
	case s == nil:
		return errors.New("kafka source: no spec")
	case len(s.Brokers) == 0:
		return errors.New("kafka source: no brokers")
	case len(s.Topics) == 0:
		return errors.New("kafka source: no topics")
	case s.Group == "":
		return errors.New("kafka source: no consumer group")
	case s.StartOffset != v1alpha1.OffsetLatest && s.StartOffset != v1alpha1.OffsetEarliest:
		return fmt.Errorf("kafka source: start offset %q is neither %s nor %s", s.StartOffset, v1alpha1.OffsetLatest, v1alpha1.OffsetEarliest)
	case s.SASL != nil && !slices.Contains([]string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, s.SASL.Mechanism):
		return fmt.Errorf("kafka source: SASL mechanism %q is none of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512", s.SASL.Mechanism)
	}
	return nil
}

// session connects and consumes until ctx ends (nil) or the brokers fail
// (the error). progress is called once the brokers answered.
func (c *Consumer) session(ctx context.Context, sink source.Sink, progress func()) error {
	cl, err := c.client(ctx)
	if err != nil {
		return err
	}
	// Close leaves the group; the rebalance it starts must not wait for
	// a poll of ours.
	defer cl.Close()
	defer cl.AllowRebalance()

	c.lastErr.Store(nil)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err = cl.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reaching the brokers %s%s: %s%w", strings.Join(c.spec.Brokers, ", "), c.as(), c.saslFailed(), err)
	}
	c.setState(source.State{Connected: true})
	progress()

	deliveryFailures := 0
	for {
		if err := c.silent(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, pollWait)
		fetches := cl.PollRecords(pctx, pollRecords)
		cancel()
		if ctx.Err() != nil {
			// What was polled and not delivered comes again.
			return nil
		}
		if err := fetchError(fetches); err != nil {
			if errors.Is(err, kerr.FencedInstanceID) {
				return fmt.Errorf("another member of group %s joined as %s, which this one is: does a second engine run this operator's source? %w", c.spec.Group, c.instance, err)
			}
			return err
		}
		if err := c.commitPins(ctx, cl); err != nil {
			return err
		}
		if fetches.NumRecords() == 0 {
			cl.AllowRebalance()
			continue
		}
		d := c.deliver(ctx, cl, sink, fetches)
		if len(d.rewind) > 0 {
			// Rewound before AllowRebalance: no other member can own
			// the partitions yet.
			cl.SetOffsets(d.rewind)
		}
		cl.AllowRebalance()
		if d.commitErr != nil {
			return d.commitErr
		}
		if d.err == nil {
			deliveryFailures = 0
			c.setState(source.State{Connected: true})
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		deliveryFailures++
		wait := source.Backoff(deliveryFailures, rand.Float64())
		c.setState(source.State{Connected: true, Err: d.err, RetryAt: time.Now().Add(wait)})
		if !sleep.For(ctx, wait) {
			return nil
		}
	}
}

// silent says whether the brokers have answered nothing for too long: a
// broker down, or the network. kgo retries by itself meanwhile; the
// session is given up for a client made again after a back-off, which
// State can say.
func (c *Consumer) silent() error {
	last := time.Unix(0, c.last.Load())
	if time.Since(last) < silence {
		return nil
	}
	err := fmt.Errorf("the brokers %s have not answered for %s", strings.Join(c.spec.Brokers, ", "), time.Since(last).Round(time.Second))
	if p := c.lastErr.Load(); p != nil {
		err = fmt.Errorf("%w: %w", err, *p)
	}
	return err
}

// fetchError returns the first error of a poll that is not its timeout,
// nor data loss, which kgo mends itself (consuming from where it can).
func fetchError(fetches kgo.Fetches) error {
	for _, e := range fetches.Errors() {
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) || errors.As(e.Err, &loss):
			continue
		case e.Topic == "":
			return fmt.Errorf("consuming: %w", e.Err)
		}
		return fmt.Errorf("consuming %s partition %d: %w", e.Topic, e.Partition, e.Err)
	}
	return nil
}

// setState sets Connected, Err and RetryAt.
func (c *Consumer) setState(s source.State) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
}
