package kafkasrc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/kafkasrc"
	"github.com/opkit-dev/opkit/internal/source/kafkasrc/kafkatest"
)

// sink keeps what was delivered to it; fail, when set, refuses a message
// with its error before it is kept.
type sink struct {
	mu     sync.Mutex
	got    []source.Message // in the order delivered
	counts map[string]int
	fail   func(m source.Message) error
}

func newSink() *sink { return &sink{counts: map[string]int{}} }

func (s *sink) Deliver(_ context.Context, m source.Message) error {
	if s.fail != nil {
		if err := s.fail(m); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, m)
	s.counts[m.ID]++
	return nil
}

// has says whether every id was delivered.
func (s *sink) has(ids []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.counts[id] == 0 {
			return false
		}
	}
	return true
}

func (s *sink) delivered() []source.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.Message(nil), s.got...)
}

// sameBodies fails t when a message delivered more than once came with
// another body: an ID names one record.
func (s *sink) sameBodies(t *testing.T) (dups int) {
	t.Helper()
	body := map[string]string{}
	for _, m := range s.delivered() {
		if b, ok := body[m.ID]; ok {
			dups++
			if b != string(m.Body) {
				t.Errorf("%s came with %s, then with %s", m.ID, b, m.Body)
			}
		}
		body[m.ID] = string(m.Body)
	}
	return dups
}

// run runs c with sink until the test ends or the returned stop is
// called, which waits for Run to return and fails t unless it returned
// nil.
func run(t *testing.T, c *kafkasrc.Consumer, sk source.Sink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, sk) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v when its context ended, want nil", err)
				}
			case <-time.After(time.Minute):
				t.Error("Run did not return within a minute of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ids(records []*kgo.Record) []string {
	out := make([]string, len(records))
	for i, r := range records {
		out[i] = kafkasrc.ID(r.Topic, r.Partition, r.Offset)
	}
	return out
}

// spec is a source of topic on cluster, from its earliest record.
func spec(cluster *kafkatest.Cluster, group string, topics ...string) *v1alpha1.KafkaSource {
	return &v1alpha1.KafkaSource{
		Brokers:      cluster.Addrs(),
		Topics:       topics,
		Group:        group,
		StartOffset:  v1alpha1.OffsetEarliest,
		MaxBodyBytes: v1alpha1.DefaultWebhookBody,
	}
}

// end is each partition's offset after records, the last of each: what a
// group that took them all has committed.
func end(records []*kgo.Record) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range records {
		out[r.Partition] = max(out[r.Partition], r.Offset+1)
	}
	return out
}

// committedAll says whether group committed every record of topic.
func committedAll(cluster *kafkatest.Cluster, group, topic string, records []*kgo.Record) func() bool {
	return func() bool {
		got := cluster.Committed(group)[topic]
		for p, o := range end(records) {
			if got[p] != o {
				return false
			}
		}
		return true
	}
}

func TestEveryRecordIsDeliveredOnceAndCommitted(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}})
	records := cluster.ProduceN("orders", 3, 300)
	sk := newSink()
	c := kafkasrc.New(spec(cluster, "g", "orders"), "", nil)
	run(t, c, sk)

	eventually(t, time.Minute, "all 300 records delivered", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "every partition committed to its end", committedAll(cluster, "g", "orders", records))
	if got := sk.delivered(); len(got) != 300 {
		t.Errorf("%d deliveries of 300 records, want each once", len(got))
	}
	// Each partition in order.
	next := map[string]int{}
	for _, m := range sk.delivered() {
		var topic string
		var p, off int
		if _, err := fmt.Sscanf(strings.ReplaceAll(m.ID, ":", " "), "%s %d %d", &topic, &p, &off); err != nil {
			t.Fatalf("ID %q is not <topic>:<partition>:<offset>: %v", m.ID, err)
		}
		if key := fmt.Sprint(p); off != next[key] {
			t.Errorf("partition %d: offset %d delivered after %d", p, off, next[key]-1)
		} else {
			next[key] = off + 1
		}
	}
	s := c.State()
	if !s.Connected || s.Err != nil || s.Lag != 0 || time.Since(s.Last) > time.Minute {
		t.Errorf("State after all delivered = %+v, want connected, no error, no lag, heard from lately", s)
	}
}

func TestARecordIsAMessage(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"deploys"}, Partitions: 1})
	at := time.UnixMilli(1_700_000_000_123)
	big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
	records := cluster.Produce(
		&kgo.Record{Topic: "deploys", Key: []byte("svc/api"), Value: []byte(`{"image":"api:1"}`), Timestamp: at,
			Headers: []kgo.RecordHeader{{Key: "X-Trace", Value: []byte("t1")}, {Key: "x-trace", Value: []byte("t2")}, {Key: "kafka-key", Value: []byte("forged")}}},
		&kgo.Record{Topic: "deploys", Key: []byte{0xff, 0x00, 'a'}, Value: []byte(`{}`), Timestamp: at},
		&kgo.Record{Topic: "deploys", Value: []byte(big), Timestamp: at},
	)
	sp := spec(cluster, "g", "deploys")
	sp.MaxBodyBytes = 50
	sk := newSink()
	run(t, kafkasrc.New(sp, "", nil), sk)
	eventually(t, time.Minute, "3 records delivered", func() bool { return sk.has(ids(records)) })

	got := sk.delivered()
	m := got[0]
	if m.ID != fmt.Sprintf("deploys:0:%d", records[0].Offset) || m.Event != "deploys" || string(m.Body) != `{"image":"api:1"}` || !m.Published.Equal(at) {
		t.Errorf("message = %+v, want ID deploys:0:<offset>, Event deploys, the value as Body, the timestamp as Published", m)
	}
	if m.Headers["x-trace"] != "t1" || m.Headers["kafka-key"] != "svc/api" || len(m.Headers) != 2 {
		t.Errorf("headers = %v, want x-trace: t1 (the first) and kafka-key: svc/api (the key, not the header)", m.Headers)
	}
	if h := got[1].Headers; h["kafka-key-base64"] != "/wBh" || h["kafka-key"] != "" {
		t.Errorf("a binary key: headers %v, want kafka-key-base64: /wBh and no kafka-key", h)
	}
	if h := got[2].Headers; len(h) != 0 {
		t.Errorf("no key: headers %v, want none", h)
	}
	if b := got[2].Body; string(b) != big[:51] {
		t.Errorf("a value of %d bytes over MaxBodyBytes 50: body of %d bytes, want the first 51", len(big), len(b))
	}
}

func TestIDFitsTwoHundredCharacters(t *testing.T) {
	if id := kafkasrc.ID("orders", 2, 17); id != "orders:2:17" {
		t.Errorf("ID = %q, want orders:2:17", id)
	}
	long := strings.Repeat("t", 249)
	a, b := kafkasrc.ID(long, 2147483647, 9223372036854775807), kafkasrc.ID(long[:248]+"u", 2147483647, 9223372036854775807)
	if len(a) > 200 || !strings.HasSuffix(a, ":2147483647:9223372036854775807") || a == b {
		t.Errorf("IDs of two 249-character topics: %q (%d) and %q, want at most 200 characters, the partition and offset kept, and apart", a, len(a), b)
	}
}

// TestAFailedDeliveryComesAgainAndHoldsItsPartitionsCommit: a record whose
// Deliver fails comes again, with the same ID, after a back-off, and until
// it is delivered nothing after it in its partition is delivered or
// committed.
func TestAFailedDeliveryComesAgainAndHoldsItsPartitionsCommit(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 2})
	records := cluster.ProduceN("orders", 2, 40)
	bad := records[10] // partition 0
	badID := kafkasrc.ID(bad.Topic, bad.Partition, bad.Offset)
	var attempts atomic.Int32
	var committedMeanwhile []map[int32]int64
	sk := newSink()
	sk.fail = func(m source.Message) error {
		if m.ID != badID {
			return nil
		}
		switch attempts.Add(1) {
		case 1:
			return errors.New("the archive is down")
		case 2:
			// Between the first failure and this attempt, the partition's
			// commit may not have passed the record.
			committedMeanwhile = append(committedMeanwhile, cluster.Committed("g")["orders"])
			return errors.New("the archive is still down")
		}
		return nil
	}
	c := kafkasrc.New(spec(cluster, "g", "orders"), "", nil)
	run(t, c, sk)

	eventually(t, time.Minute, "State to say the failed delivery", func() bool {
		s := c.State()
		return s.Err != nil && strings.Contains(s.Err.Error(), badID) && strings.Contains(s.Err.Error(), "the archive is down") && !s.RetryAt.IsZero()
	})
	eventually(t, time.Minute, "every record delivered", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "every partition committed to its end", committedAll(cluster, "g", "orders", records))

	if n := attempts.Load(); n != 3 {
		t.Errorf("%s was attempted %d times, want 3 (two failures)", badID, n)
	}
	if len(committedMeanwhile) != 1 || committedMeanwhile[0][0] > bad.Offset {
		t.Errorf("partition 0 committed %v while offset %d failed, want at most %d", committedMeanwhile, bad.Offset, bad.Offset)
	}
	// Partition 0 delivered in order, each once, the failed one after its
	// predecessors and before its successors.
	var p0 []int64
	for _, m := range sk.delivered() {
		if strings.HasPrefix(m.ID, "orders:0:") {
			var off int64
			if _, err := fmt.Sscanf(m.ID, "orders:0:%d", &off); err != nil {
				t.Fatalf("ID %q: %v", m.ID, err)
			}
			p0 = append(p0, off)
		}
	}
	for i, off := range p0 {
		if off != int64(i) {
			t.Fatalf("partition 0 delivered %v, want offsets 0 to 19 in order, each once", p0)
		}
	}
	// The consumer says it is well again once it has taken a fetch since
	// (its state is set after each), not at the commit itself.
	eventually(t, time.Minute, "State.Err cleared after the record was delivered", func() bool { return c.State().Err == nil })
}

// TestANewConsumerResumesFromTheCommittedOffsets: a consumer stopped while
// records flow, and another of the same group started after, deliver
// every record between them; one delivered twice comes with the same ID
// and body. The second starts at Latest, which a group with commits does
// not use.
func TestANewConsumerResumesFromTheCommittedOffsets(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}})
	records := cluster.ProduceN("orders", 3, 3000)
	sk := newSink()
	var n atomic.Int32
	sk.fail = func(source.Message) error {
		n.Add(1)
		time.Sleep(100 * time.Microsecond) // a sink that takes its time
		return nil
	}
	stop := run(t, kafkasrc.New(spec(cluster, "g", "orders"), "", nil), sk)
	eventually(t, time.Minute, "some records delivered", func() bool { return n.Load() > 500 })
	stop()
	first := len(sk.delivered())
	if first >= len(records) {
		t.Logf("the first consumer took all %d records before it stopped", first)
	}
	records = append(records, cluster.ProduceN("orders", 3, 300)...)

	sp := spec(cluster, "g", "orders")
	sp.StartOffset = v1alpha1.OffsetLatest
	run(t, kafkasrc.New(sp, "", nil), sk)
	eventually(t, time.Minute, "every record delivered by the two", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "every partition committed to its end", committedAll(cluster, "g", "orders", records))
	dups := sk.sameBodies(t)
	t.Logf("the first consumer delivered %d records; %d deliveries of %d records, %d again", first, len(sk.delivered()), len(records), dups)
}

// TestAStaticMembersNextRunTakesOverAtOnce: a consumer with an instance
// id stays the group's member when it stops, as one killed does; the next
// of its id takes its place and partitions at once, not after the
// session timeout (45 s) a dynamic member's replacement waits for a
// killed one, and delivers from the committed offsets.
func TestAStaticMembersNextRunTakesOverAtOnce(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 2})
	records := cluster.ProduceN("orders", 2, 20)
	sk := newSink()
	stop := run(t, kafkasrc.New(spec(cluster, "g", "orders"), "opkit-op-src", nil), sk)
	eventually(t, time.Minute, "the first run's records delivered", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "the first run's records committed", committedAll(cluster, "g", "orders", records))
	stop()
	id := kafkasrc.InstanceID("opkit-op-src", []string{"orders"})
	if got := cluster.Members("g"); !slices.Equal(got, []string{id}) {
		t.Fatalf("members of the group after the static member stopped: %q, want it kept, [%s]", got, id)
	}

	records = append(records, cluster.ProduceN("orders", 2, 20)...)
	stopped := time.Now()
	run(t, kafkasrc.New(spec(cluster, "g", "orders"), "opkit-op-src", nil), sk)
	// Well within the session timeout: a join that waited for it would
	// take 45 s at least.
	eventually(t, 30*time.Second, "the next run's records delivered", func() bool { return sk.has(ids(records)) })
	t.Logf("the next run delivered the records produced meanwhile %s after the first stopped", time.Since(stopped).Round(time.Millisecond))
	if got := cluster.Members("g"); !slices.Equal(got, []string{id}) {
		t.Errorf("members of the group: %q, want the one static member, [%s]", got, id)
	}
	if dups := sk.sameBodies(t); dups != 0 {
		t.Errorf("%d records delivered again, want none: the first run committed all it delivered", dups)
	}
}

// TestAStaticMembersIDChangesWithItsTopics: a consumer of other topics
// is another member, so that the broker does not hand it the assignment
// of the topics before; the order of the topics does not matter.
func TestAStaticMembersIDChangesWithItsTopics(t *testing.T) {
	ab, ba := kafkasrc.InstanceID("opkit-op-src", []string{"a", "b"}), kafkasrc.InstanceID("opkit-op-src", []string{"b", "a"})
	if ab != ba {
		t.Errorf("the ids of topics [a b] and [b a] differ: %s, %s", ab, ba)
	}
	if a := kafkasrc.InstanceID("opkit-op-src", []string{"a"}); a == ab || !strings.HasPrefix(a, "opkit-op-src-") {
		t.Errorf("the id of topic [a] is %s, that of [a b] %s: want two ids, each the member name, a dash and a hash", a, ab)
	}
}

// TestTwoConsumersOfAGroupLoseNothingInARebalance: while records are
// produced, a second member joins the group and later the first leaves
// it: both deliver, and every record is delivered and committed.
func TestTwoConsumersOfAGroupLoseNothingInARebalance(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 4})
	slow := func(source.Message) error { time.Sleep(200 * time.Microsecond); return nil }
	skA, skB := newSink(), newSink()
	skA.fail, skB.fail = slow, slow
	stopA := run(t, kafkasrc.New(spec(cluster, "g", "orders"), "", nil), skA)

	var records []*kgo.Record
	produce := func(n int) { records = append(records, cluster.ProduceN("orders", 4, n)...) }
	produce(500)
	eventually(t, time.Minute, "the first member delivering", func() bool { return len(skA.delivered()) > 0 })
	run(t, kafkasrc.New(spec(cluster, "g", "orders"), "", nil), skB)
	for i := range 60 {
		produce(40)
		if i == 40 {
			eventually(t, time.Minute, "the second member delivering", func() bool { return len(skB.delivered()) > 0 })
			stopA()
		}
		time.Sleep(50 * time.Millisecond)
	}

	both := newSink()
	eventually(t, 2*time.Minute, "every record delivered", func() bool {
		both = newSink()
		for _, m := range append(skA.delivered(), skB.delivered()...) {
			_ = both.Deliver(t.Context(), m)
		}
		return both.has(ids(records))
	})
	eventually(t, time.Minute, "every partition committed to its end", committedAll(cluster, "g", "orders", records))
	dups := both.sameBodies(t)
	t.Logf("%d records, %d deliveries by the first member and %d by the second, %d again", len(records), len(skA.delivered()), len(skB.delivered()), dups)
}

// TestStartOffset: a group without commits starts at the earliest record
// with Earliest, and at the records produced after it joined with Latest.
func TestStartOffset(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 1})
	before := ids(cluster.ProduceN("orders", 1, 5))

	early := newSink()
	run(t, kafkasrc.New(spec(cluster, "early", "orders"), "", nil), early)
	eventually(t, time.Minute, "Earliest: the records from before", func() bool { return early.has(before) })

	sp := spec(cluster, "late", "orders")
	sp.StartOffset = v1alpha1.OffsetLatest
	late := newSink()
	run(t, kafkasrc.New(sp, "", nil), late)
	// When the member has its partition is not said: produce until it
	// takes one.
	var after []string
	eventually(t, time.Minute, "Latest: a record produced after the start", func() bool {
		after = append(after, ids(cluster.ProduceN("orders", 1, 1))...)
		return len(late.delivered()) > 0
	})
	for _, m := range late.delivered() {
		for _, id := range before {
			if m.ID == id {
				t.Errorf("Latest delivered %s, produced before the group had a member", id)
			}
		}
	}
	eventually(t, time.Minute, "Latest: the records after its first", func() bool {
		got := late.delivered()
		first := 0
		for i, id := range after {
			if id == got[0].ID {
				first = i
			}
		}
		return late.has(after[first:])
	})
}

// TestLatestKeepsWhatCameWhileNoMemberRan: a Latest group commits where
// it starts as it takes a partition without a commit, so the records
// produced while no member runs, before any was delivered, are delivered
// at the next start, not skipped to the end again.
func TestLatestKeepsWhatCameWhileNoMemberRan(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 2})
	before := cluster.ProduceN("orders", 2, 4)
	sp := spec(cluster, "g", "orders")
	sp.StartOffset = v1alpha1.OffsetLatest
	sk := newSink()
	stop := run(t, kafkasrc.New(sp, "", nil), sk)
	eventually(t, time.Minute, "the start of both partitions committed", func() bool {
		got := cluster.Committed("g")["orders"]
		return len(got) == 2 && got[0] == 2 && got[1] == 2
	})
	stop()
	meanwhile := cluster.ProduceN("orders", 2, 6)
	run(t, kafkasrc.New(sp, "", nil), sk)
	eventually(t, time.Minute, "the records produced while no member ran", func() bool { return sk.has(ids(meanwhile)) })
	for _, m := range sk.delivered() {
		if slices.Contains(ids(before), m.ID) {
			t.Errorf("%s delivered, produced before the group's first member", m.ID)
		}
	}
}

// TestSASL: a consumer with the user's password consumes; one with a wrong
// password says so in State and retries.
func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 1,
				SASL: &kafkatest.User{Mechanism: mech, Name: "opkit", Password: "s3cret"}})
			records := cluster.ProduceN("orders", 1, 3)
			password := "wrong"
			var reads atomic.Int32
			secrets := func(_ context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error) {
				if ref.Name != "kafka" || ref.Key != "password" {
					return nil, fmt.Errorf("no Secret %s key %s", ref.Name, ref.Key)
				}
				reads.Add(1)
				return []byte(password + "\n"), nil
			}
			sp := spec(cluster, "g", "orders")
			sp.SASL = &v1alpha1.KafkaSASL{Mechanism: mech, Username: "opkit", PasswordSecretRef: v1alpha1.SecretKeySelector{Name: "kafka", Key: "password"}}
			sk := newSink()
			c := kafkasrc.New(sp, "", secrets)
			stop := run(t, c, sk)
			eventually(t, time.Minute, "State to say the authentication failed", func() bool {
				s := c.State()
				return !s.Connected && s.Err != nil && s.RetryAt.After(time.Now().Add(-time.Second))
			})
			err := c.State().Err
			if !strings.Contains(err.Error(), "as opkit (SASL "+mech+")") || !strings.Contains(strings.ToLower(err.Error()), "auth") {
				t.Errorf("State.Err = %q, want it to name the user, the mechanism and the authentication's failure", err)
			}
			if len(sk.delivered()) != 0 {
				t.Errorf("delivered %d records with a wrong password", len(sk.delivered()))
			}
			stop()

			password = "s3cret"
			c = kafkasrc.New(sp, "", secrets)
			run(t, c, sk)
			eventually(t, time.Minute, "the records delivered with the right password", func() bool { return sk.has(ids(records)) })
			if s := c.State(); !s.Connected || s.Err != nil {
				t.Errorf("State = %+v, want connected without error", s)
			}
		})
	}
}

// TestAnUnreachableBrokerIsRetried: with no broker at the address, State
// says so and when it retries; once one listens there, the consumer
// connects and delivers.
func TestAnUnreachableBrokerIsRetried(t *testing.T) {
	port := kafkatest.FreePort(t)
	sk := newSink()
	c := kafkasrc.New(&v1alpha1.KafkaSource{Brokers: []string{kafkatest.Addr(port)}, Topics: []string{"orders"}, Group: "g", StartOffset: v1alpha1.OffsetEarliest}, "", nil)
	run(t, c, sk)
	eventually(t, time.Minute, "State to say the broker is unreachable", func() bool {
		s := c.State()
		return !s.Connected && s.Err != nil && !s.RetryAt.IsZero()
	})
	if s := c.State(); !strings.Contains(s.Err.Error(), kafkatest.Addr(port)) || s.RetryAt.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("State = %+v, want Err naming the broker and a RetryAt", s)
	}

	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 1, Port: port})
	records := cluster.ProduceN("orders", 1, 3)
	eventually(t, 2*time.Minute, "the records delivered once the broker listens", func() bool { return sk.has(ids(records)) })
	if s := c.State(); !s.Connected || s.Err != nil {
		t.Errorf("State = %+v, want connected without error", s)
	}
}

// TestABrokerLostWhileConsumingIsSaidAndReconnected: the broker stops
// while the consumer runs; State says so before long, and when the broker
// is back the consumer delivers from where it was.
func TestABrokerLostWhileConsumingIsSaidAndReconnected(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 1})
	records := cluster.ProduceN("orders", 1, 10)
	sk := newSink()
	c := kafkasrc.New(spec(cluster, "g", "orders"), "", nil)
	run(t, c, sk)
	eventually(t, time.Minute, "the first records delivered", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "them committed", committedAll(cluster, "g", "orders", records))

	cluster.Stop()
	eventually(t, 2*time.Minute, "State to say the broker is lost", func() bool {
		s := c.State()
		return !s.Connected && s.Err != nil && !s.RetryAt.IsZero()
	})
	t.Logf("with the broker stopped: %v", c.State().Err)
	cluster.Restart()
	more := cluster.ProduceN("orders", 1, 10)
	eventually(t, 3*time.Minute, "the records produced after the restart delivered", func() bool { return sk.has(ids(more)) })
	if n := len(sk.delivered()); n != 20 {
		t.Errorf("%d deliveries of 20 records, want each once (the first ten were committed)", n)
	}
}

// TestLagIsWhatTheSinkHasNotTaken: while the sink holds the first of 100
// records, Lag is 100; once all are taken, 0.
func TestLagIsWhatTheSinkHasNotTaken(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}, Partitions: 1})
	records := cluster.ProduceN("orders", 1, 100)
	release := make(chan struct{})
	sk := newSink()
	sk.fail = func(source.Message) error { <-release; return nil }
	c := kafkasrc.New(spec(cluster, "g", "orders"), "", nil)
	run(t, c, sk)
	eventually(t, time.Minute, "Lag 100 while the first record is held", func() bool { return c.State().Lag == 100 })
	close(release)
	eventually(t, time.Minute, "all delivered", func() bool { return sk.has(ids(records)) })
	eventually(t, time.Minute, "Lag 0", func() bool { return c.State().Lag == 0 })
}

// TestTenThousandRecordsFlow reports the rate at which 10,000 records of
// 3 partitions are delivered and committed.
func TestTenThousandRecordsFlow(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Options{Topics: []string{"orders"}})
	records := cluster.ProduceN("orders", 3, 10_000)
	var n atomic.Int32
	start := time.Now()
	c := kafkasrc.New(spec(cluster, "g", "orders"), "", nil)
	run(t, c, source.SinkFunc(func(context.Context, source.Message) error { n.Add(1); return nil }))
	eventually(t, 2*time.Minute, "10,000 records delivered", func() bool { return n.Load() >= 10_000 })
	took := time.Since(start)
	eventually(t, time.Minute, "every partition committed to its end", committedAll(cluster, "g", "orders", records))
	if n.Load() != 10_000 {
		t.Errorf("%d deliveries, want 10,000", n.Load())
	}
	t.Logf("10,000 records delivered in %s (from the consumer's start): %.0f records/s", took.Round(time.Millisecond), 10_000/took.Seconds())
}

// TestRunRefusesASpecItCanNeverConsume: Run returns an error at once for a
// spec no retry mends.
func TestRunRefusesASpecItCanNeverConsume(t *testing.T) {
	for name, sp := range map[string]*v1alpha1.KafkaSource{
		"no spec":        nil,
		"no topics":      {Brokers: []string{"127.0.0.1:9092"}, Group: "g", StartOffset: v1alpha1.OffsetLatest},
		"a bad offset":   {Brokers: []string{"127.0.0.1:9092"}, Topics: []string{"t"}, Group: "g", StartOffset: "Middle"},
		"a bad SASL":     {Brokers: []string{"127.0.0.1:9092"}, Topics: []string{"t"}, Group: "g", StartOffset: v1alpha1.OffsetLatest, SASL: &v1alpha1.KafkaSASL{Mechanism: "GSSAPI"}},
		"no group":       {Brokers: []string{"127.0.0.1:9092"}, Topics: []string{"t"}, StartOffset: v1alpha1.OffsetLatest},
		"no brokers ...": {Topics: []string{"t"}, Group: "g", StartOffset: v1alpha1.OffsetLatest},
	} {
		if err := kafkasrc.New(sp, "", nil).Run(t.Context(), newSink()); err == nil {
			t.Errorf("%s: Run returned nil, want an error", name)
		}
	}
}
