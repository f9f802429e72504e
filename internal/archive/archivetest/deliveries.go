package archivetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The subtests of webhook deliveries (archive.DeliveryRecorder and DeliveryReader).

// newDelivery returns an accepted GitHub delivery received at t.
func newDelivery(t time.Time, op, source, deliveryID string) *archive.Delivery {
	return &archive.Delivery{
		ID: archive.NewID(t), Operator: op, Source: source, DeliveryID: deliveryID, ReceivedAt: t.UTC(),
		Outcome: archive.DeliveryPending, Event: "issue_comment",
		Headers: map[string][]string{"X-Github-Delivery": {deliveryID}, "X-Github-Event": {"issue_comment"}},
		Payload: []byte(`{"action":"created","comment":{"body":"/deploy"}}`),
	}
}

// refused returns a refused delivery received at t.
func refused(t time.Time, op, source, deliveryID, reason string) *archive.Delivery {
	d := newDelivery(t, op, source, deliveryID)
	d.Outcome, d.Reason = archive.DeliveryRefused, reason
	return d
}

func recordDelivery(t *testing.T, s archive.Store, d *archive.Delivery) {
	t.Helper()
	if err := s.RecordDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func finishDelivery(t *testing.T, s archive.Store, d *archive.Delivery, o archive.DeliveryOutcome) {
	t.Helper()
	d.Outcome, d.HandledAt = o, d.ReceivedAt.Add(time.Second)
	if o == archive.DeliveryFailed {
		d.Reason = "the handler gave up"
	}
	if err := s.FinishDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func getDelivery(t *testing.T, s archive.Store, id string) *archive.Delivery {
	t.Helper()
	d, err := s.GetDelivery(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pending(t *testing.T, s archive.Store, op string) []string {
	t.Helper()
	ds, err := s.PendingDeliveries(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	return ids
}

// allDeliveries lists every delivery q selects, page by page, and returns
// their ids.
func allDeliveries(t *testing.T, s archive.Store, q archive.DeliveryQuery) []string {
	t.Helper()
	next := func() ([]archive.Delivery, bool, error) {
		page, err := s.ListDeliveries(context.Background(), q)
		if err != nil {
			return nil, false, err
		}
		q.Cursor = page.Next
		return page.Deliveries, page.Next != "", nil
	}
	return pageIDs(t, orDefault(q.Limit, 50), next, func(d archive.Delivery) string { return d.ID })
}

// orDefault is n, or def if n is zero.
func orDefault(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// sameDelivery reports how two records differ, their times compared as
// instants and their payloads as bytes; "" if they do not.
func sameDelivery(got, want archive.Delivery) string {
	if !got.ReceivedAt.Equal(want.ReceivedAt) || !got.HandledAt.Equal(want.HandledAt) {
		return fmt.Sprintf("times %v, %v; want %v, %v", got.ReceivedAt, got.HandledAt, want.ReceivedAt, want.HandledAt)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		return fmt.Sprintf("payload %q, want %q", got.Payload, want.Payload)
	}
	got.ReceivedAt, got.HandledAt, got.Payload = time.Time{}, time.Time{}, nil
	want.ReceivedAt, want.HandledAt, want.Payload = time.Time{}, time.Time{}, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("\n%+v\nwant\n%+v", got, want)
	}
	return ""
}

func deliveriesRoundTrip(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	d := newDelivery(at, "printer", "github", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	d.Headers["Content-Type"] = []string{"application/json"}
	d.Headers["X-Hub-Signature-256"] = []string{"[redacted]"}
	d.Headers["Accept"] = []string{"*/*", "application/json"} // a header given twice
	recordDelivery(t, s, d)
	if d.PayloadBytes != int64(len(d.Payload)) || d.PayloadTruncated {
		t.Errorf("RecordDelivery set PayloadBytes %d, truncated %v; want %d, false", d.PayloadBytes, d.PayloadTruncated, len(d.Payload))
	}
	want := *d
	if diff := sameDelivery(*getDelivery(t, s, d.ID), want); diff != "" {
		t.Errorf("read back: %s", diff)
	}

	d.Outcome, d.HandledAt = archive.DeliveryHandled, at.Add(1500*time.Millisecond)
	d.Runs = []string{archive.NewID(at.Add(time.Second)), archive.NewID(at.Add(time.Second))}
	d.Objects = []string{"Printer team-a/pr-1234", "Namespace preview-1234"}
	if err := s.FinishDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	want = *d
	if diff := sameDelivery(*getDelivery(t, s, d.ID), want); diff != "" {
		t.Errorf("after FinishDelivery: %s", diff)
	}
	// Finished again (a retry of the write), with more: the last call's
	// record stands.
	d.Outcome, d.Reason, d.Runs = archive.DeliveryFailed, "the handler gave up: exit status 1", d.Runs[:1]
	if err := s.FinishDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	if diff := sameDelivery(*getDelivery(t, s, d.ID), *d); diff != "" {
		t.Errorf("after a second FinishDelivery: %s", diff)
	}

	// A refused delivery, without a sender's id or headers.
	r := &archive.Delivery{Operator: "printer", Source: "github", Outcome: archive.DeliveryRefused, Reason: "bad signature", Payload: []byte("{}")}
	before := time.Now()
	recordDelivery(t, s, r)
	after := time.Now()
	if !archive.ValidID(r.ID) || r.ReceivedAt.Before(before) || r.ReceivedAt.After(after) {
		t.Errorf("a delivery recorded without an id or time got %q, %v; want a NewID and the time of the call, in [%v, %v]", r.ID, r.ReceivedAt, before, after)
	}
	if at, _ := archive.TimeOfID(r.ID); at.UnixMilli() != r.ReceivedAt.UnixMilli() {
		t.Errorf("the id set %s is of %v, not of the time received %v", r.ID, at, r.ReceivedAt)
	}
	if diff := sameDelivery(*getDelivery(t, s, r.ID), *r); diff != "" {
		t.Errorf("refused delivery read back: %s", diff)
	}

	// A zero HandledAt is set to the time of the call.
	p := newDelivery(time.Now(), "printer", "github", "d-2")
	recordDelivery(t, s, p)
	p.Outcome = archive.DeliveryHandled
	before = time.Now()
	if err := s.FinishDelivery(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := getDelivery(t, s, p.ID); got.HandledAt.Before(before.Truncate(time.Microsecond)) || got.HandledAt.After(time.Now()) || !got.HandledAt.Equal(p.HandledAt) {
		t.Errorf("finished without HandledAt: %v (set on the delivery: %v), want the time of the call", got.HandledAt, p.HandledAt)
	}

	if _, err := s.GetDelivery(ctx, archive.NewID(at)); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("GetDelivery of an unknown id: %v, want ErrNotFound", err)
	}
	unknown := newDelivery(at, "printer", "github", "never")
	unknown.Outcome = archive.DeliveryHandled
	if err := s.FinishDelivery(ctx, unknown); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("FinishDelivery of an unknown id: %v, want ErrNotFound", err)
	}
}

// deliveriesRefuseBadRecords: what RecordDelivery and FinishDelivery refuse,
// and that a refusal stores nothing.
func deliveriesRefuseBadRecords(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	for name, bad := range map[string]*archive.Delivery{
		"no operator":            {Source: "github", DeliveryID: "a"},
		"no source":              {Operator: "printer", DeliveryID: "a"},
		"recorded handled":       {Operator: "printer", Source: "github", DeliveryID: "a", Outcome: archive.DeliveryHandled},
		"recorded failed":        {Operator: "printer", Source: "github", DeliveryID: "a", Outcome: archive.DeliveryFailed, Reason: "x"},
		"unknown outcome":        {Operator: "printer", Source: "github", DeliveryID: "a", Outcome: "Accepted"},
		"refused without reason": {Operator: "printer", Source: "github", DeliveryID: "a", Outcome: archive.DeliveryRefused},
		"malformed id":           {ID: "not-an-id", Operator: "printer", Source: "github", DeliveryID: "a"},
	} {
		if err := s.RecordDelivery(ctx, bad); err == nil {
			t.Errorf("RecordDelivery accepted a delivery with %s: %+v", name, bad)
		}
	}
	if got := allDeliveries(t, s, archive.DeliveryQuery{}); len(got) != 0 {
		t.Errorf("refused records were stored: %v", got)
	}

	d := newDelivery(now, "printer", "github", "a")
	recordDelivery(t, s, d)
	for name, o := range map[string]archive.DeliveryOutcome{"pending": archive.DeliveryPending, "refused": archive.DeliveryRefused, "none": ""} {
		e := *d
		e.Outcome, e.Reason = o, "why"
		if err := s.FinishDelivery(ctx, &e); err == nil {
			t.Errorf("FinishDelivery accepted the outcome %s (%q)", name, o)
		}
	}
	e := *d
	e.Outcome, e.Reason = archive.DeliveryFailed, ""
	if err := s.FinishDelivery(ctx, &e); err == nil {
		t.Error("FinishDelivery accepted Failed without a reason")
	}
	r := refused(now, "printer", "github", "b", "bad signature")
	recordDelivery(t, s, r)
	r.Outcome = archive.DeliveryHandled
	if err := s.FinishDelivery(ctx, r); err == nil || errors.Is(err, archive.ErrNotFound) {
		t.Errorf("FinishDelivery of a refused delivery: %v, want an error saying it was refused", err)
	}
	if got := getDelivery(t, s, r.ID); got.Outcome != archive.DeliveryRefused {
		t.Errorf("a refused delivery became %s", got.Outcome)
	}
	if got := getDelivery(t, s, d.ID); got.Outcome != archive.DeliveryPending {
		t.Errorf("refused finishes changed a pending delivery to %s", got.Outcome)
	}
}

func deliveriesCapPayload(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{PayloadLimit: 100, LogLimit: 10})
	now := time.Now()
	// Every byte value, NULs and invalid UTF-8 included.
	body := make([]byte, 250)
	for i := range body {
		body[i] = byte(i*7 + 3)
	}
	for _, c := range []struct {
		name      string
		payload   []byte
		bytes     int64 // what the caller says it received
		want      []byte
		wantBytes int64
		truncated bool
	}{
		{"under the limit", body[:99], 0, body[:99], 99, false},
		{"at the limit", body[:100], 0, body[:100], 100, false},
		{"over the limit", body, 0, body[:100], 250, true},
		{"a part read by the caller", body[:40], 1 << 20, body[:40], 1 << 20, true},
		{"a size below the payload's", body[:40], 7, body[:40], 40, false},
		{"empty", nil, 0, nil, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := refused(now, "printer", "github", "", "body larger than the source's limit")
			d.Payload, d.PayloadBytes = bytes.Clone(c.payload), c.bytes
			recordDelivery(t, s, d)
			for _, got := range []*archive.Delivery{d, getDelivery(t, s, d.ID)} {
				if !bytes.Equal(got.Payload, c.want) || got.PayloadBytes != c.wantBytes || got.PayloadTruncated != c.truncated {
					t.Errorf("payload of %d bytes (%d, truncated %v), want %d (%d, truncated %v); first difference at %d",
						len(got.Payload), got.PayloadBytes, got.PayloadTruncated, len(c.want), c.wantBytes, c.truncated, firstDifference(got.Payload, c.want))
				}
			}
		})
	}

	// An accepted delivery keeps its whole payload: its handling, after a
	// restart too, reads it from the archive.
	d := newDelivery(now, "printer", "github", "")
	d.Payload = bytes.Clone(body)
	recordDelivery(t, s, d)
	if got := getDelivery(t, s, d.ID); !bytes.Equal(got.Payload, body) || got.PayloadBytes != 250 || got.PayloadTruncated {
		t.Errorf("an accepted payload of 250 bytes over a limit of 100 kept %d bytes (%d, truncated %v), want all of it", len(got.Payload), got.PayloadBytes, got.PayloadTruncated)
	}

	// By default, 256 KiB.
	s = openStore(t, open, archive.Options{})
	d = refused(now, "printer", "github", "", "body larger than the source's limit")
	d.Payload = bytes.Repeat([]byte("0123456789abcdef"), 16<<10+1)
	recordDelivery(t, s, d)
	if got := getDelivery(t, s, d.ID); len(got.Payload) != archive.DefaultPayloadLimit || got.PayloadBytes != 256<<10+16 || !got.PayloadTruncated {
		t.Errorf("a payload of 256 KiB + 16 B kept %d bytes (%d, truncated %v), want the default limit %d", len(got.Payload), got.PayloadBytes, got.PayloadTruncated, archive.DefaultPayloadLimit)
	}
}

// deliveriesRefuseReplays: an accepted delivery's key is accepted once;
// refused records and deliveries without a sender's id never conflict.
func deliveriesRefuseReplays(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now().Add(-time.Minute)
	// Refused first (a bad signature), then the real one: accepted.
	recordDelivery(t, s, refused(now, "printer", "github", "d-1", "bad signature"))
	first := newDelivery(now.Add(time.Second), "printer", "github", "d-1")
	recordDelivery(t, s, first)

	replay := newDelivery(now.Add(2*time.Second), "printer", "github", "d-1")
	err := s.RecordDelivery(ctx, replay)
	if !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Fatalf("a replay: %v, want ErrDuplicateDelivery", err)
	}
	if _, err := s.GetDelivery(ctx, replay.ID); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("the refused replay was stored: %v", err)
	}
	replay.Outcome, replay.Reason = archive.DeliveryRefused, "replay of delivery d-1"
	recordDelivery(t, s, replay)
	// Handled, its key still refuses a replay.
	finishDelivery(t, s, first, archive.DeliveryHandled)
	if err := s.RecordDelivery(ctx, newDelivery(now.Add(3*time.Second), "printer", "github", "d-1")); !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Errorf("a replay of a handled delivery: %v, want ErrDuplicateDelivery", err)
	}
	// As does a failed one's.
	failed := newDelivery(now.Add(4*time.Second), "printer", "github", "d-2")
	recordDelivery(t, s, failed)
	finishDelivery(t, s, failed, archive.DeliveryFailed)
	if err := s.RecordDelivery(ctx, newDelivery(now.Add(5*time.Second), "printer", "github", "d-2")); !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Errorf("a replay of a failed delivery: %v, want ErrDuplicateDelivery", err)
	}
	// The key is the operator's, the source's and the sender's id.
	for i, d := range []*archive.Delivery{
		newDelivery(now.Add(6*time.Second), "printer", "gitlab", "d-1"),
		newDelivery(now.Add(7*time.Second), "website", "github", "d-1"),
		newDelivery(now.Add(8*time.Second), "printer", "github", "D-1"),
		newDelivery(now.Add(9*time.Second), "printer", "github", ""),
		newDelivery(now.Add(10*time.Second), "printer", "github", ""),
		refused(now.Add(11*time.Second), "printer", "github", "d-1", "replay of delivery d-1"),
	} {
		if err := s.RecordDelivery(ctx, d); err != nil {
			t.Errorf("delivery %d (%s/%s %q %s): %v, want it recorded", i, d.Operator, d.Source, d.DeliveryID, d.Outcome, err)
		}
	}
	q := archive.DeliveryQuery{Operator: "printer", Source: "github"}
	if got := len(allDeliveries(t, s, q)); got != 8 {
		t.Errorf("printer/github has %d records, want 8", got)
	}
	q.Refused = true
	if got := len(allDeliveries(t, s, q)); got != 3 {
		t.Errorf("printer/github has %d refused records, want 3", got)
	}
}

// deliveriesConcurrentFloodExactlyOnce: 1,000 concurrent deliveries of 100
// sender's ids, each replay recorded as refused, as the endpoint does:
// each id is accepted once, and none is lost.
func deliveriesConcurrentFloodExactlyOnce(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	accepted := map[string]int{}
	concurrently(t, 1000, func(i int, fail func(error)) {
		id := fmt.Sprintf("delivery-%03d", i%100)
		d := newDelivery(time.Now(), "printer", "github", id)
		err := s.RecordDelivery(ctx, d)
		if errors.Is(err, archive.ErrDuplicateDelivery) {
			d.Outcome, d.Reason = archive.DeliveryRefused, "replay of delivery "+id
			err = s.RecordDelivery(ctx, d)
		} else if err == nil {
			mu.Lock()
			accepted[id]++
			mu.Unlock()
		}
		if err != nil {
			fail(err)
		}
	})
	if len(accepted) != 100 {
		t.Errorf("%d ids accepted, want 100", len(accepted))
	}
	for id, n := range accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times, want once", id, n)
		}
	}
	if got := pending(t, s, "printer"); len(got) != 100 {
		t.Errorf("%d pending deliveries, want 100", len(got))
	}
	if got := allDeliveries(t, s, archive.DeliveryQuery{Operator: "printer", Limit: 1000}); len(got) != 1000 {
		t.Errorf("%d records, want 1000: every delivery accepted or refused", len(got))
	}
	if got := allDeliveries(t, s, archive.DeliveryQuery{Refused: true, Limit: 1000}); len(got) != 900 {
		t.Errorf("%d refused records, want 900", len(got))
	}
}

func deliveriesPendingOldestFirst(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	var want []*archive.Delivery
	// Recorded out of order of reception: the list is by time received.
	for _, i := range []int{3, 0, 4, 1, 2} {
		d := newDelivery(base.Add(time.Duration(i)*time.Minute), "printer", "github", fmt.Sprintf("d-%d", i))
		d.Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
		recordDelivery(t, s, d)
		want = append(want, d)
	}
	slices.SortFunc(want, func(a, b *archive.Delivery) int { return a.ReceivedAt.Compare(b.ReceivedAt) })
	recordDelivery(t, s, refused(base.Add(30*time.Second), "printer", "github", "x", "filtered out"))
	recordDelivery(t, s, newDelivery(base, "website", "github", "d-0"))
	got, err := s.PendingDeliveries(ctx, "printer")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d pending deliveries, want %d", len(got), len(want))
	}
	for i := range got {
		if diff := sameDelivery(got[i], *want[i]); diff != "" {
			t.Errorf("pending delivery %d: %s", i, diff)
		}
	}
	finishDelivery(t, s, want[0], archive.DeliveryHandled)
	finishDelivery(t, s, want[3], archive.DeliveryFailed)
	if got, w := pending(t, s, "printer"), []string{want[1].ID, want[2].ID, want[4].ID}; !reflect.DeepEqual(got, w) {
		t.Errorf("after finishing two: %v, want %v", got, w)
	}
	for _, d := range want {
		d.Outcome, d.HandledAt = archive.DeliveryHandled, time.Time{}
		if err := s.FinishDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if got := pending(t, s, "printer"); len(got) != 0 {
		t.Errorf("after finishing all: %v pending", got)
	}
	if got := pending(t, s, "website"); len(got) != 1 {
		t.Errorf("finishing printer's deliveries touched website's: %v pending, want 1", got)
	}
	if got, err := s.PendingDeliveries(ctx, "nobody"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("an operator without deliveries: %#v, %v; want an empty slice", got, err)
	}
}
