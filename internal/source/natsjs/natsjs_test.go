package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/natsjs"
	"github.com/opkit-dev/opkit/internal/source/natsjs/natstest"
)

const consumerName = "opkit-notifier-orders"

// spec is a nats source of srv's stream, from its first message.
func spec(srv *natstest.Server) *v1alpha1.NATSSource {
	return &v1alpha1.NATSSource{
		URL:           srv.URL(),
		Stream:        srv.Stream(),
		Consumer:      consumerName,
		DeliverPolicy: v1alpha1.DeliverAll,
		MaxBodyBytes:  v1alpha1.DefaultWebhookBody,
	}
}

// recorder is a sink that records every Deliver (failed ones too) and
// fails those its fail says to.
type recorder struct {
	mu        sync.Mutex
	attempts  []source.Message
	delivered []source.Message
	fail      func(m source.Message) error
}

func (r *recorder) Deliver(_ context.Context, m source.Message) error {
	r.mu.Lock()
	r.attempts = append(r.attempts, m)
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		if err := fail(m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.delivered = append(r.delivered, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) Delivered() []source.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]source.Message(nil), r.delivered...)
}

func (r *recorder) Attempts() []source.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]source.Message(nil), r.attempts...)
}

// start runs c until the returned stop is called (or the test ends);
// stop checks that Run returned nil.
func start(t *testing.T, c *natsjs.Consumer, sink source.Sink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, sink) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v when its context ended, want nil", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return 30s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 20ms until it holds, failing the test
// after timeout with what and the last state.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still not %s: %s", timeout, what, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func id(seq int) string { return fmt.Sprintf("EVENTS:%d", seq) }

// checkBodies checks that each message is the one its ID names: the body
// Publish gave the message of that sequence.
func checkBodies(t *testing.T, msgs []source.Message) {
	t.Helper()
	for _, m := range msgs {
		var seq int
		if _, err := fmt.Sscanf(m.ID, "EVENTS:%d", &seq); err != nil {
			t.Fatalf("message ID %q is not EVENTS:<sequence>", m.ID)
		}
		if string(m.Body) != string(natstest.Body(seq)) {
			t.Fatalf("message %s has body %s, want %s: an ID names another message", m.ID, m.Body, natstest.Body(seq))
		}
	}
}

func TestEveryMessageIsDeliveredOnceInOrderAndAcked(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{})
	before := time.Now().Add(-time.Second)
	srv.PublishMsgs(&nats.Msg{Subject: "events.first", Data: natstest.Body(1), Header: nats.Header{"X-Trace-Id": {"abc", "def"}, "nats-msg-id": {"m1"}}})
	srv.Publish("events.rest", 49)
	sink := &recorder{}
	c := natsjs.New(spec(srv), nil)
	start(t, c, sink)

	eventually(t, 30*time.Second, "50 messages delivered", func() bool { return len(sink.Delivered()) >= 50 },
		func() string { return fmt.Sprintf("%d delivered, state %+v", len(sink.Delivered()), c.State()) })
	got := sink.Delivered()
	if len(got) != 50 || len(sink.Attempts()) != 50 {
		t.Fatalf("%d delivered in %d attempts, want 50 in 50", len(got), len(sink.Attempts()))
	}
	for i, m := range got {
		if m.ID != id(i+1) {
			t.Fatalf("message %d has ID %q, want %q (in the stream's order)", i+1, m.ID, id(i+1))
		}
		if want := map[bool]string{true: "events.first", false: "events.rest"}[i == 0]; m.Event != want {
			t.Errorf("message %s: event %q, want its subject %q", m.ID, m.Event, want)
		}
		if m.Published.Before(before) || m.Published.After(time.Now()) {
			t.Errorf("message %s: published %v, want the stream's time of it", m.ID, m.Published)
		}
	}
	checkBodies(t, got)
	if h := got[0].Headers; h["x-trace-id"] != "abc" || h["nats-msg-id"] != "m1" || len(h) != 2 {
		t.Errorf("headers %v, want by lower-case name, first value: x-trace-id abc, nats-msg-id m1", h)
	}

	// The server has every message acknowledged, none delivered twice.
	eventually(t, 30*time.Second, "every message acknowledged", func() bool {
		info := srv.ConsumerInfo(consumerName)
		return info.AckFloor.Stream == 50 && info.NumAckPending == 0 && info.NumPending == 0
	}, func() string { return fmt.Sprintf("%+v", srv.ConsumerInfo(consumerName)) })
	if info := srv.ConsumerInfo(consumerName); info.NumRedelivered != 0 || info.Delivered.Consumer != 50 {
		t.Errorf("the server delivered %d times with %d redelivered, want 50 deliveries and none again", info.Delivered.Consumer, info.NumRedelivered)
	}
	if s := c.State(); !s.Connected || s.Err != nil || s.Last.IsZero() {
		t.Errorf("state %+v, want connected, no error, heard from", s)
	}
}

func TestAFailedDeliverIsNotAckedAndComesAgainWithTheSameID(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.x", 3)
	var mu sync.Mutex
	failing := true
	sink := &recorder{fail: func(m source.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == id(2) && failing {
			return errors.New("the archive is down")
		}
		return nil
	}}
	c := natsjs.New(spec(srv), nil)
	start(t, c, sink)

	eventually(t, 30*time.Second, "the failure said in State", func() bool {
		s := c.State()
		return s.Err != nil && strings.Contains(s.Err.Error(), "delivering EVENTS:2: the archive is down") && !s.RetryAt.IsZero()
	}, func() string { return fmt.Sprintf("%+v", c.State()) })
	if s := c.State(); !s.Connected {
		t.Errorf("state %+v: a failed Deliver is not a lost connection", s)
	}
	// Message 2 is not acknowledged, and 3 waits behind it.
	if info := srv.ConsumerInfo(consumerName); info.AckFloor.Stream != 1 {
		t.Errorf("ack floor %d while message 2 fails, want 1", info.AckFloor.Stream)
	}
	if got := sink.Delivered(); len(got) != 1 || got[0].ID != id(1) {
		t.Errorf("delivered %v while message 2 fails, want message 1 only", ids(got))
	}

	mu.Lock()
	failing = false
	mu.Unlock()
	eventually(t, 30*time.Second, "3 messages delivered", func() bool { return len(sink.Delivered()) == 3 },
		func() string { return fmt.Sprintf("%v delivered, state %+v", ids(sink.Delivered()), c.State()) })
	if got := ids(sink.Delivered()); strings.Join(got, " ") != "EVENTS:1 EVENTS:2 EVENTS:3" {
		t.Errorf("delivered %v, want EVENTS:1 EVENTS:2 EVENTS:3", got)
	}
	failed := 0
	for _, m := range sink.Attempts() {
		if m.ID == id(2) {
			failed++
		}
	}
	if failed < 2 {
		t.Errorf("message 2 came %d times, want again after its failure", failed)
	}
	checkBodies(t, sink.Attempts())
	eventually(t, 30*time.Second, "every message acknowledged and the error gone", func() bool {
		info := srv.ConsumerInfo(consumerName)
		return info.AckFloor.Stream == 3 && info.NumAckPending == 0 && c.State().Err == nil
	}, func() string { return fmt.Sprintf("%+v, state %+v", srv.ConsumerInfo(consumerName), c.State()) })
}

func ids(msgs []source.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// seen collects the IDs delivered across consumers.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) add(m source.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]int{}
	}
	s.ids[m.ID]++
}

// missing is how many of the first n sequences were not delivered.
func (s *seen) missing(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	missing := 0
	for i := 1; i <= n; i++ {
		if s.ids[id(i)] == 0 {
			missing++
		}
	}
	return missing
}

func TestAConsumerStoppedMidStreamIsResumedByTheNextWithoutLosingAny(t *testing.T) {
	const n = 1000
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.x", n)
	all := &seen{}

	// The first consumer stops (its context ends) after 300 messages.
	ctx, cancel := context.WithCancel(t.Context())
	first := &recorder{fail: func(m source.Message) error {
		all.add(m)
		return nil
	}}
	var count int
	var countMu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- natsjs.New(spec(srv), nil).Run(ctx, source.SinkFunc(func(ctx context.Context, m source.Message) error {
			countMu.Lock()
			count++
			if count == 300 {
				cancel()
			}
			countMu.Unlock()
			return first.Deliver(ctx, m)
		}))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v when its context ended, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first consumer did not stop")
	}
	firstN := len(first.Delivered())

	second := &recorder{fail: func(m source.Message) error {
		all.add(m)
		return nil
	}}
	c := natsjs.New(spec(srv), nil)
	start(t, c, second)
	// Messages the server sent that the first never read come again after
	// the ack wait (30s).
	eventually(t, 90*time.Second, "every message delivered", func() bool { return all.missing(n) == 0 },
		func() string { return fmt.Sprintf("%d missing, state %+v", all.missing(n), c.State()) })
	checkBodies(t, first.Delivered())
	checkBodies(t, second.Delivered())
	if got := len(second.Delivered()); got >= n || firstN < 300 {
		t.Errorf("the first delivered %d, the second %d of %d: the second should resume where the first stopped", firstN, got, n)
	}
	for _, m := range second.Delivered() {
		if m.ID == id(1) {
			t.Errorf("the second consumer got %s, which the first acknowledged", m.ID)
		}
	}
	t.Logf("first consumer: %d, second: %d, duplicates: %d", firstN, len(second.Delivered()), firstN+len(second.Delivered())-n)
}

func TestTheConsumerReconnectsAfterTheServerRestartsAndLosesNothing(t *testing.T) {
	const n = 500
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.x", n)
	all := &seen{}
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sink := &recorder{fail: func(m source.Message) error {
		if m.ID == id(200) {
			once.Do(func() { close(reached); <-release })
		}
		all.add(m)
		return nil
	}}
	c := natsjs.New(spec(srv), nil)
	start(t, c, sink)

	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatalf("message 200 not delivered: %+v", c.State())
	}
	srv.Stop()
	close(release) // its acknowledgement is lost with the connection
	eventually(t, 30*time.Second, "disconnected with the error said", func() bool {
		s := c.State()
		return !s.Connected && s.Err != nil && !s.RetryAt.IsZero()
	}, func() string { return fmt.Sprintf("%+v", c.State()) })
	down := c.State()
	t.Logf("while the server is down: %v (retry in %v)", down.Err, time.Until(down.RetryAt).Round(time.Millisecond))
	if !strings.Contains(down.Err.Error(), srv.URL()) {
		t.Errorf("the error %q does not name the server %s", down.Err, srv.URL())
	}

	srv.Restart()
	eventually(t, 120*time.Second, "every message delivered", func() bool { return all.missing(n) == 0 },
		func() string { return fmt.Sprintf("%d missing, state %+v", all.missing(n), c.State()) })
	checkBodies(t, sink.Attempts())
	if s := c.State(); !s.Connected || s.Err != nil {
		t.Errorf("state %+v after the restart, want connected without error", s)
	}
	t.Logf("%d deliveries of %d messages", len(sink.Delivered()), n)
}

func TestAWrongTokenIsSaidAsAnAuthorizationErrorAndTheRightOneReadAtTheNextConnection(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{Token: "s3cret"})
	srv.Publish("events.x", 1)
	s := spec(srv)
	s.TokenSecretRef = &v1alpha1.SecretKeySelector{Namespace: "apps", Name: "nats", Key: "token"}
	var mu sync.Mutex
	token := "guess\n"
	secrets := func(_ context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if ref != *s.TokenSecretRef {
			return nil, fmt.Errorf("asked for %v", ref)
		}
		return []byte(token), nil
	}
	sink := &recorder{}
	c := natsjs.New(s, secrets)
	start(t, c, sink)

	eventually(t, 30*time.Second, "an authorization error said", func() bool {
		st := c.State()
		return !st.Connected && st.Err != nil && strings.Contains(strings.ToLower(st.Err.Error()), "authorization") && st.RetryAt.After(time.Now().Add(-time.Second))
	}, func() string { return fmt.Sprintf("%+v", c.State()) })
	t.Logf("with a wrong token: %v", c.State().Err)
	if len(sink.Attempts()) != 0 {
		t.Fatal("delivered with a wrong token")
	}

	mu.Lock()
	token = "s3cret\n" // the Secret is corrected: the next connection reads it
	mu.Unlock()
	eventually(t, 60*time.Second, "the message delivered", func() bool { return len(sink.Delivered()) == 1 },
		func() string { return fmt.Sprintf("%+v", c.State()) })
	if st := c.State(); !st.Connected || st.Err != nil {
		t.Errorf("state %+v, want connected without error", st)
	}
}

func TestAMissingStreamIsSaidByNameAndConsumedOnceCreated(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{Stream: "ORDERS", NoStream: true})
	s := spec(srv)
	sink := &recorder{}
	c := natsjs.New(s, nil)
	start(t, c, sink)
	eventually(t, 30*time.Second, "the missing stream said", func() bool {
		st := c.State()
		return st.Err != nil && strings.Contains(st.Err.Error(), "stream ORDERS not found on "+srv.URL())
	}, func() string { return fmt.Sprintf("%+v", c.State()) })
	t.Logf("without the stream: %v", c.State().Err)

	srv.CreateStream("ORDERS", "orders.>")
	srv.Publish("orders.new", 2)
	eventually(t, 60*time.Second, "2 messages delivered", func() bool { return len(sink.Delivered()) == 2 },
		func() string { return fmt.Sprintf("%+v", c.State()) })
	if got := ids(sink.Delivered()); got[0] != "ORDERS:1" || got[1] != "ORDERS:2" {
		t.Errorf("delivered %v, want ORDERS:1 ORDERS:2", got)
	}
}

func TestLagIsWhatTheSinkHasNotTaken(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.x", 100)
	release := make(chan struct{})
	sink := &recorder{fail: func(source.Message) error {
		<-release
		return nil
	}}
	c := natsjs.New(spec(srv), nil)
	if lag := c.State().Lag; lag != -1 {
		t.Errorf("lag %d before connecting, want -1 (unknown)", lag)
	}
	start(t, c, sink)
	eventually(t, 30*time.Second, "a lag of 100 while the sink holds the first", func() bool { return c.State().Lag == 100 },
		func() string { return fmt.Sprintf("%+v", c.State()) })
	srv.Publish("events.x", 5)
	eventually(t, 30*time.Second, "a lag of 105 once 5 more are published", func() bool { return c.State().Lag == 105 },
		func() string { return fmt.Sprintf("%+v", c.State()) })
	close(release)
	eventually(t, 30*time.Second, "a lag of 0 once all are delivered", func() bool { return c.State().Lag == 0 },
		func() string { return fmt.Sprintf("%d delivered, %+v", len(sink.Delivered()), c.State()) })
	if got := len(sink.Delivered()); got != 105 {
		t.Errorf("%d delivered, want 105", got)
	}
}

func TestABodyOverTheLimitIsHandedCutForTheSinkToRefuse(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{})
	srv.PublishMsgs(&nats.Msg{Subject: "events.big", Data: []byte(strings.Repeat("x", 100))})
	s := spec(srv)
	s.MaxBodyBytes = 10
	sink := &recorder{}
	start(t, natsjs.New(s, nil), sink)
	eventually(t, 30*time.Second, "the message delivered", func() bool { return len(sink.Delivered()) == 1 },
		func() string { return "none" })
	if got := len(sink.Delivered()[0].Body); got != 11 {
		t.Errorf("body of %d bytes, want the limit + 1 (11): enough to see it is over", got)
	}
	eventually(t, 30*time.Second, "the message acknowledged", func() bool { return srv.ConsumerInfo(consumerName).AckFloor.Stream == 1 },
		func() string { return fmt.Sprintf("%+v", srv.ConsumerInfo(consumerName)) })
}

func TestAnExistingConsumerKeepsWhereItStarted(t *testing.T) {
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.x", 3)
	first := &recorder{}
	stop := start(t, natsjs.New(spec(srv), nil), first) // DeliverPolicy All
	eventually(t, 30*time.Second, "3 delivered", func() bool { return len(first.Delivered()) == 3 }, func() string { return "" })
	stop()

	// The source now says New: the consumer, which exists, is updated
	// without that (a start cannot change) and goes on where it was.
	s := spec(srv)
	s.DeliverPolicy = v1alpha1.DeliverNew
	s.Subjects = []string{"events.x", "events.y"}
	c := natsjs.New(s, nil)
	second := &recorder{}
	start(t, c, second)
	srv.Publish("events.y", 1)
	eventually(t, 30*time.Second, "the new message delivered", func() bool { return len(second.Delivered()) == 1 },
		func() string { return fmt.Sprintf("%+v", c.State()) })
	if got := second.Delivered()[0].ID; got != id(4) {
		t.Errorf("delivered %s, want EVENTS:4", got)
	}
}

func TestTenThousandMessagesFlow(t *testing.T) {
	const n = 10_000
	srv := natstest.Start(t, natstest.Options{})
	srv.Publish("events.flood", n)
	sink := &recorder{}
	c := natsjs.New(spec(srv), nil)
	began := time.Now()
	start(t, c, sink)
	eventually(t, 120*time.Second, "10,000 messages delivered", func() bool { return len(sink.Delivered()) >= n },
		func() string { return fmt.Sprintf("%d delivered, %+v", len(sink.Delivered()), c.State()) })
	took := time.Since(began)
	t.Logf("%d messages in %v: %.0f messages/s (connecting included)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	got := sink.Delivered()
	for i, m := range got[:n] {
		if m.ID != id(i+1) {
			t.Fatalf("message %d has ID %s, want %s", i+1, m.ID, id(i+1))
		}
	}
	eventually(t, 30*time.Second, "every message acknowledged", func() bool {
		info := srv.ConsumerInfo(consumerName)
		return info.AckFloor.Stream == n && info.NumAckPending == 0
	}, func() string { return fmt.Sprintf("%+v", srv.ConsumerInfo(consumerName)) })
}

func TestRunRefusesAStreamWhoseIDsCannotFit(t *testing.T) {
	s := &v1alpha1.NATSSource{URL: "nats://127.0.0.1:1", Stream: strings.Repeat("s", 180), Consumer: consumerName}
	c := natsjs.New(s, nil)
	err := c.Run(t.Context(), &recorder{})
	if err == nil || !strings.Contains(err.Error(), "names up to 179 characters") {
		t.Fatalf("Run = %v, want an error saying stream names of up to 179 characters are consumed", err)
	}
	if st := c.State(); st.Err == nil || st.Connected {
		t.Errorf("state %+v, want the error said", st)
	}
}
