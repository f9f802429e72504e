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
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 2000 {
			t.Fatal("paging does not end")
		}
		page, err := s.ListDeliveries(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if limit := orDefault(q.Limit, 50); len(page.Deliveries) > limit {
			t.Fatalf("page of %d deliveries, limit %d", len(page.Deliveries), limit)
		}
		for _, d := range page.Deliveries {
			ids = append(ids, d.ID)
		}
		if page.Next == "" {
			return ids
		}
		q.Cursor = page.Next
	}
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
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[string]int{}
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Go(func() {
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
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
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

func deliveriesListFiltersAndPages(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	var all []*archive.Delivery
	for i := range 30 {
		op, source := "printer", "github"
		if i%3 == 0 {
			op = "website"
		}
		if i%4 == 0 {
			source = "gitlab"
		}
		d := newDelivery(base.Add(time.Duration(i)*time.Second), op, source, fmt.Sprintf("d-%d", i))
		if i%5 == 2 {
			d.Outcome, d.Reason = archive.DeliveryRefused, "bad signature"
		}
		recordDelivery(t, s, d)
		switch {
		case d.Outcome == archive.DeliveryRefused:
		case i%7 == 0:
			finishDelivery(t, s, d, archive.DeliveryFailed)
		case i%6 == 0:
			// A handler refused it: Handled, nothing done, with why.
			d.Reason = "refused by handler deploy: alice is not a member of packit/deployers"
			finishDelivery(t, s, d, archive.DeliveryHandled)
		case i%2 == 0:
			finishDelivery(t, s, d, archive.DeliveryHandled)
		}
		all = append(all, d)
	}
	want := func(pred func(d *archive.Delivery) bool) []string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			if pred(all[i]) {
				ids = append(ids, all[i].ID)
			}
		}
		return ids
	}
	for _, c := range []struct {
		name string
		q    archive.DeliveryQuery
		pred func(d *archive.Delivery) bool
	}{
		{"all", archive.DeliveryQuery{}, func(*archive.Delivery) bool { return true }},
		{"operator", archive.DeliveryQuery{Operator: "website"}, func(d *archive.Delivery) bool { return d.Operator == "website" }},
		{"source", archive.DeliveryQuery{Source: "gitlab"}, func(d *archive.Delivery) bool { return d.Source == "gitlab" }},
		{"operator and source", archive.DeliveryQuery{Operator: "printer", Source: "gitlab"}, func(d *archive.Delivery) bool {
			return d.Operator == "printer" && d.Source == "gitlab"
		}},
		// Every refusal: by the source's checks, and by a handler.
		{"refused", archive.DeliveryQuery{Refused: true}, func(d *archive.Delivery) bool {
			return d.Outcome == archive.DeliveryRefused || d.Outcome == archive.DeliveryHandled && d.Reason != ""
		}},
		{"refused of an operator", archive.DeliveryQuery{Operator: "printer", Refused: true}, func(d *archive.Delivery) bool {
			return d.Operator == "printer" && d.TurnedDown()
		}},
		{"refused by a handler", archive.DeliveryQuery{Refused: true, Outcome: archive.DeliveryHandled}, func(d *archive.Delivery) bool {
			return d.Outcome == archive.DeliveryHandled && d.Reason != ""
		}},
		{"refused by the source", archive.DeliveryQuery{Refused: true, Outcome: archive.DeliveryRefused}, func(d *archive.Delivery) bool {
			return d.Outcome == archive.DeliveryRefused
		}},
		{"pending", archive.DeliveryQuery{Outcome: archive.DeliveryPending}, func(d *archive.Delivery) bool { return d.Outcome == archive.DeliveryPending }},
		{"handled", archive.DeliveryQuery{Outcome: archive.DeliveryHandled}, func(d *archive.Delivery) bool { return d.Outcome == archive.DeliveryHandled }},
		{"failed of an operator", archive.DeliveryQuery{Operator: "printer", Outcome: archive.DeliveryFailed}, func(d *archive.Delivery) bool {
			return d.Operator == "printer" && d.Outcome == archive.DeliveryFailed
		}},
		{"time bounds", archive.DeliveryQuery{Since: base.Add(10 * time.Second), Until: base.Add(20 * time.Second)}, func(d *archive.Delivery) bool {
			return !d.ReceivedAt.Before(base.Add(10*time.Second)) && d.ReceivedAt.Before(base.Add(20*time.Second))
		}},
		{"operator none has", archive.DeliveryQuery{Operator: "print"}, func(*archive.Delivery) bool { return false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, limit := range []int{4, 1000} {
				q := c.q
				q.Limit = limit
				if got, w := allDeliveries(t, s, q), want(c.pred); !reflect.DeepEqual(got, w) {
					t.Errorf("limit %d: got %d deliveries %v\nwant %d %v", limit, len(got), got, len(w), w)
				}
			}
		})
	}

	// A page holds every field but the payload.
	page, err := s.ListDeliveries(ctx, archive.DeliveryQuery{Limit: 1})
	if err != nil || len(page.Deliveries) != 1 || page.Next == "" {
		t.Fatalf("ListDeliveries(limit 1) = %+v, %v", page, err)
	}
	got, last := page.Deliveries[0], *all[len(all)-1]
	if got.Payload != nil {
		t.Errorf("a listed delivery has its payload %q; lists leave it out", got.Payload)
	}
	last.Payload = nil
	if diff := sameDelivery(got, last); diff != "" {
		t.Errorf("listed: %s", diff)
	}
	// 50 by default, at most 1000.
	for i := range 1010 {
		recordDelivery(t, s, refused(base.Add(time.Minute+time.Duration(i)*time.Millisecond), "printer", "github", "", "filtered out"))
	}
	for _, c := range []struct{ limit, want int }{{0, 50}, {-1, 50}, {2000, 1000}} {
		page, err := s.ListDeliveries(ctx, archive.DeliveryQuery{Limit: c.limit})
		if err != nil || len(page.Deliveries) != c.want {
			t.Errorf("limit %d: %d deliveries (%v), want %d", c.limit, len(page.Deliveries), err, c.want)
		}
	}
	for _, bad := range []archive.DeliveryQuery{{Cursor: "'; DROP TABLE deliveries; --"}, {Outcome: "Pending' OR '1'='1"}} {
		if _, err := s.ListDeliveries(ctx, bad); err == nil {
			t.Errorf("ListDeliveries accepted %+v", bad)
		}
	}
}

// deliveriesPruneKeepsPending: retention deletes old and surplus
// deliveries, never Pending ones, and counts them apart from runs.
func deliveriesPruneKeepsPending(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	var ds []*archive.Delivery
	for i := range 10 {
		// Deliveries 0-4 are two days old, 5-9 recent; 0 and 6 are pending,
		// 1 and 7 refused.
		age := time.Duration(10-i) * time.Minute
		if i < 5 {
			age += 48 * time.Hour
		}
		d := newDelivery(now.Add(-age), "printer", "github", fmt.Sprintf("d-%d", i))
		if i%6 == 1 {
			d.Outcome, d.Reason = archive.DeliveryRefused, "bad signature"
		}
		recordDelivery(t, s, d)
		if i%6 > 1 {
			finishDelivery(t, s, d, archive.DeliveryHandled)
		}
		ds = append(ds, d)
	}
	var runs []*archive.Run
	for i := range 4 {
		r := newRun(now.Add(-time.Duration(4-i)*time.Minute), "printer", "ns", "n", "h")
		insert(t, s, r)
		finish(t, s, r, archive.Succeeded)
		runs = append(runs, r)
	}
	n, err := s.Prune(ctx, archive.Retention{MaxAge: 24 * time.Hour})
	if err != nil || n != 4 {
		t.Fatalf("Prune by age = %d, %v; want 4 (the old deliveries but the pending one)", n, err)
	}
	if got, want := allDeliveries(t, s, archive.DeliveryQuery{}), []string{ds[9].ID, ds[8].ID, ds[7].ID, ds[6].ID, ds[5].ID, ds[0].ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	// A flood of refused deliveries: 5 more.
	var flood []string
	for i := range 5 {
		r := refused(now.Add(time.Duration(i)*time.Second), "printer", "github", fmt.Sprintf("forged-%d", i), "bad signature")
		recordDelivery(t, s, r)
		flood = append(flood, r.ID)
	}
	// Counted apart: of 4 runs, the 3 newest are kept; of 6 refused
	// deliveries, the 3 newest; of the 5 accepted ones, the 3 newest
	// (pending ones count, and are kept however old): ds[5] goes, and the
	// flood pushed out no other accepted delivery.
	n, err = s.Prune(ctx, archive.Retention{MaxRuns: 3})
	if err != nil || n != 1+3+1 {
		t.Fatalf("Prune to 3 = %d, %v; want 5 (1 run, 3 refused deliveries, 1 accepted)", n, err)
	}
	if got, want := allDeliveries(t, s, archive.DeliveryQuery{}), []string{flood[4], flood[3], flood[2], ds[9].ID, ds[8].ID, ds[6].ID, ds[0].ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want the 3 newest refused, the 3 newest accepted and the pending ones %v", got, want)
	}
	// With room for 2: the pending ds[6] and ds[0] stay, older than the
	// 2 newest accepted as they are.
	if n, err := s.Prune(ctx, archive.Retention{MaxRuns: 2}); err != nil || n != 1+1 {
		t.Fatalf("Prune to 2 = %d, %v; want 2 (1 run, 1 refused)", n, err)
	}
	if got, want := allDeliveries(t, s, archive.DeliveryQuery{}), []string{flood[4], flood[3], ds[9].ID, ds[8].ID, ds[6].ID, ds[0].ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	page, _ := s.List(ctx, archive.Query{})
	if len(page.Runs) != 2 || page.Runs[1].ID != runs[2].ID {
		t.Errorf("runs kept: %+v, want the 2 newest", page.Runs)
	}
	if got, want := pending(t, s, "printer"), []string{ds[0].ID, ds[6].ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("pending after pruning: %v, want %v", got, want)
	}
	// A pruned delivery's key is forgotten: its sender may deliver it anew.
	if err := s.RecordDelivery(ctx, newDelivery(now, "printer", "github", "d-5")); err != nil {
		t.Errorf("a delivery whose record was pruned: %v, want it accepted", err)
	}
	if err := s.RecordDelivery(ctx, newDelivery(now, "printer", "github", "d-0")); !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Errorf("a replay of a delivery kept pending: %v, want ErrDuplicateDelivery", err)
	}
}

// deliveriesSurviveCancelRunning: CancelRunning ends runs, not pending
// deliveries; Counts counts runs only.
func deliveriesSurviveCancelRunning(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	d := newDelivery(now, "printer", "github", "d-1")
	recordDelivery(t, s, d)
	recordDelivery(t, s, refused(now, "printer", "github", "d-1", "replay of delivery d-1"))
	r := newRun(now, "printer", "ns", "n", "h")
	insert(t, s, r)
	if n, err := s.CancelRunning(ctx, "the engine stopped"); err != nil || n != 1 {
		t.Fatalf("CancelRunning = %d, %v; want 1", n, err)
	}
	if got := pending(t, s, "printer"); !reflect.DeepEqual(got, []string{d.ID}) {
		t.Errorf("pending after CancelRunning: %v, want %s", got, d.ID)
	}
	if got := getDelivery(t, s, d.ID); got.Outcome != archive.DeliveryPending || !got.HandledAt.IsZero() {
		t.Errorf("after CancelRunning: %s, handled at %v; want Pending", got.Outcome, got.HandledAt)
	}
	counts, err := s.Counts(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]archive.Counts{"printer": {Runs: 1}}; !reflect.DeepEqual(counts, want) {
		t.Errorf("Counts = %+v, want %+v: deliveries are not runs", counts, want)
	}
}

// deliveriesRedeliveries: a redelivery on purpose has its original's
// sender's id and is no replay, nor makes the sender's later delivery of
// that id one; it is linked both ways, with who asked and why.
func deliveriesRedeliveries(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	orig := newDelivery(now, "printer", "github", "x-1")
	recordDelivery(t, s, orig)
	finishDelivery(t, s, orig, archive.DeliveryHandled)

	redeliver := func(of *archive.Delivery, at time.Time, by string) *archive.Delivery {
		t.Helper()
		r := newDelivery(at, of.Operator, of.Source, of.DeliveryID)
		r.RedeliveryOf, r.RedeliveredBy, r.RedeliveryReason = of.ID, by, "the handler is fixed"
		recordDelivery(t, s, r)
		return r
	}
	r1 := redeliver(orig, now.Add(time.Second), "alice")
	r2 := redeliver(orig, now.Add(2*time.Second), "bob")
	if err := s.RecordDelivery(ctx, newDelivery(now.Add(3*time.Second), "printer", "github", "x-1")); !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Errorf("the sender's replay of a delivery redelivered on purpose: %v, want ErrDuplicateDelivery", err)
	}
	got := getDelivery(t, s, orig.ID)
	if !reflect.DeepEqual(got.Redeliveries, []string{r1.ID, r2.ID}) {
		t.Errorf("the original's Redeliveries = %v, want %v", got.Redeliveries, []string{r1.ID, r2.ID})
	}
	g1 := getDelivery(t, s, r1.ID)
	if g1.RedeliveryOf != orig.ID || g1.RedeliveredBy != "alice" || g1.RedeliveryReason != "the handler is fixed" || g1.DeliveryID != "x-1" || g1.Outcome != archive.DeliveryPending {
		t.Errorf("a redelivery read back as %+v, want of %s by alice, its reason, delivery id x-1, Pending", g1, orig.ID)
	}
	if len(g1.Redeliveries) != 0 {
		t.Errorf("a redelivery not redelivered has Redeliveries %v", g1.Redeliveries)
	}
	pending, err := s.PendingDeliveries(ctx, "printer")
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 || pending[0].ID != r1.ID || pending[0].RedeliveredBy != "alice" || pending[1].RedeliveryOf != orig.ID {
		t.Errorf("PendingDeliveries = %+v, want the two redeliveries, with whom and of what", pending)
	}
	page, err := s.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "printer"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Deliveries) != 3 || page.Deliveries[0].RedeliveryOf != orig.ID || page.Deliveries[0].RedeliveredBy != "bob" {
		t.Errorf("ListDeliveries = %+v, want the redeliveries with whom and of what first", page.Deliveries)
	}
	finishDelivery(t, s, r1, archive.DeliveryHandled)
	if g := getDelivery(t, s, r1.ID); g.Outcome != archive.DeliveryHandled || g.RedeliveredBy != "alice" {
		t.Errorf("a redelivery finished: %s by %q, want Handled by alice", g.Outcome, g.RedeliveredBy)
	}

	// A refused delivery redelivered does not make the sender's next
	// delivery of its id a replay: only the sender's accepted ones do.
	ref := refused(now, "printer", "github", "y-1", "filtered out")
	recordDelivery(t, s, ref)
	redeliver(ref, now.Add(time.Second), "alice")
	recordDelivery(t, s, newDelivery(now.Add(2*time.Second), "printer", "github", "y-1"))

	for name, bad := range map[string]func(d *archive.Delivery){
		"no one asked":                func(d *archive.Delivery) { d.RedeliveredBy = "" },
		"not an id":                   func(d *archive.Delivery) { d.RedeliveryOf = "nope" },
		"refused":                     func(d *archive.Delivery) { d.Outcome, d.Reason = archive.DeliveryRefused, "filtered out" },
		"who without what":            func(d *archive.Delivery) { d.RedeliveryOf = "" },
		"a reason without redelivery": func(d *archive.Delivery) { d.RedeliveryOf, d.RedeliveredBy = "", "" },
	} {
		d := newDelivery(now, "printer", "github", "z-1")
		d.RedeliveryOf, d.RedeliveredBy, d.RedeliveryReason = orig.ID, "alice", "why"
		bad(d)
		if err := s.RecordDelivery(ctx, d); err == nil {
			t.Errorf("RecordDelivery accepted a redelivery with %s: %+v", name, d)
		}
	}
}

// A Pending delivery lists the runs of its handlers recorded so far (a
// handler failing and retried), oldest first, in GetDelivery and
// ListDeliveries alike; another delivery's or operator's runs are not
// its. Once finished, it lists the runs its record names.
func deliveriesPendingListTheirRunsSoFar(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	d := newDelivery(now, "notifier", "github", "d-1")
	recordDelivery(t, s, d)
	other := newDelivery(now.Add(time.Millisecond), "notifier", "github", "d-2")
	recordDelivery(t, s, other)
	eventRun := func(at time.Time, op, uid string, attempt int) *archive.Run {
		r := &archive.Run{
			ID: archive.NewID(at), Operator: op, Handler: "deploy", Action: "exec", Trigger: "event", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator",
			Name: op, UID: uid, Key: op + "/event/github/d-1/deploy", Attempt: attempt, StartedAt: at.UTC(),
		}
		insert(t, s, r)
		return r
	}
	if got := getDelivery(t, s, d.ID).Runs; len(got) != 0 {
		t.Errorf("a Pending delivery with no run lists %v", got)
	}
	r1 := eventRun(now.Add(2*time.Millisecond), "notifier", d.ID, 1)
	finish(t, s, r1, archive.Failed)
	r2 := eventRun(now.Add(3*time.Millisecond), "notifier", d.ID, 2)
	eventRun(now.Add(4*time.Millisecond), "notifier", other.ID, 1)
	eventRun(now.Add(5*time.Millisecond), "another", d.ID, 1)

	want := []string{r1.ID, r2.ID}
	if got := getDelivery(t, s, d.ID).Runs; !slices.Equal(got, want) {
		t.Errorf("GetDelivery of a Pending delivery: runs %v, want %v (its runs so far, oldest first)", got, want)
	}
	page, err := s.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "notifier"})
	if err != nil {
		t.Fatal(err)
	}
	for _, listed := range page.Deliveries {
		if listed.ID == d.ID && !slices.Equal(listed.Runs, want) {
			t.Errorf("ListDeliveries: runs %v, want %v", listed.Runs, want)
		}
	}
	d.Runs = []string{r1.ID}
	finishDelivery(t, s, d, archive.DeliveryFailed)
	if got := getDelivery(t, s, d.ID).Runs; !slices.Equal(got, []string{r1.ID}) {
		t.Errorf("a finished delivery lists %v, want what its record names, %v", got, []string{r1.ID})
	}
}
