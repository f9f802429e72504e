package source

import (
	"context"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// A Consumer takes the messages of one source the engine reaches out to
// (a GitHub poll, a NATS JetStream consumer, a Kafka consumer group) and
// hands each to a Sink. Its contract, which every kind keeps:
//
//   - Run consumes until ctx ends and then returns nil; it returns an
//     error only for a source it can never consume (its spec is wrong in
//     a way the definition could not see). Failing to connect, or losing
//     the connection, is not such an error: Run says so in State, waits
//     (a back-off from 1 s to 1 min, with jitter) and connects again.
//   - A message is acknowledged at its source (a JetStream ack, a Kafka
//     offset commit, a poll's cursor) only after Sink.Deliver returned nil
//     for it, and for every message before it that the source orders
//     (a Kafka partition, a poll's page). A message whose Deliver failed
//     is delivered again, after a back-off: none is lost.
//   - A message may be delivered to the sink more than once (after a
//     crash between Deliver and the acknowledgement, a rebalance, a
//     reconnect): with the same ID each time, by which the sink knows it.
//   - Run does not log: State says what the engine logs and serves.
type Consumer interface {
	Run(ctx context.Context, sink Sink) error
	State() State
}

// Sink takes a consumer's messages: the engine records each in the run
// archive (Pending, or Refused with the reason) and queues the accepted
// ones for their handlers.
type Sink interface {
	// Deliver returns nil once m is durably recorded, or was recorded
	// before (a redelivery): the consumer may then acknowledge it. An
	// error means m is not recorded: the consumer must not acknowledge it,
	// and delivers it again later.
	Deliver(ctx context.Context, m Message) error
}

// SinkFunc is a Sink of a function.
type SinkFunc func(ctx context.Context, m Message) error

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, m Message) error { return f(ctx, m) }

// Message is one message of a consumer's source.
type Message struct {
	// ID is the source's own id of the message, the same on every
	// redelivery: <stream>:<sequence> (NATS), <topic>:<partition>:<offset>
	// (Kafka), the event's id (a GitHub poll). At most 200 printable
	// characters without spaces or slashes: it is the delivery id.
	ID string
	// Event is what the message is: its subject (NATS), topic (Kafka), or
	// the webhook's name of the GitHub event (issue_comment).
	Event string
	// Headers are the message's headers by lower-case name, first value.
	Headers map[string]string
	// Body is the message's payload: JSON for handlers to read.
	Body []byte
	// Published is when the source says the message was published; zero
	// when it does not say.
	Published time.Time
}

// State is how a consumer stands, for the engine's log, metrics and
// /readyz.
type State struct {
	// Connected says that the consumer reaches its source now.
	Connected bool
	// Err is why it does not (the last failure to connect, poll or
	// consume); nil while it works.
	Err error
	// RetryAt is when it tries again after Err.
	RetryAt time.Time
	// Lag is how many messages the source holds that the sink has not
	// taken (JetStream's pending count, the sum of a Kafka group's lag
	// over its partitions); -1 when the source cannot say (a poll).
	Lag int64
	// Last is when the consumer last heard from its source (a message, a
	// poll answered, a fetch that found nothing).
	Last time.Time
}

// Backoff is the wait before the attempt after n failures in a row (n >=
// 1): 1 s doubling up to 1 min, each within [d/2, d) by jitter in [0, 1).
func Backoff(n int, jitter float64) time.Duration {
	d := time.Minute
	if n < 7 {
		d = min(time.Second<<(n-1), time.Minute)
	}
	return d/2 + time.Duration(jitter*float64(d/2))
}

// Secrets reads a Secret's key for a consumer: its credentials, read
// again at each connection, so that a rotated one is picked up by the
// next. The engine's reads the API server (with the engine's RBAC).
type Secrets func(ctx context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error)

// Cursors keep a consumer's position where its source keeps none (a
// GitHub poll's newest event seen): the run archive's, per operator and
// source. Cursor returns "" for a source that has none yet.
type Cursors interface {
	Cursor(ctx context.Context, operator, source string) (string, error)
	SetCursor(ctx context.Context, operator, source, cursor string) error
}
