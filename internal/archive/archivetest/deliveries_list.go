package archivetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The archive conformance's checks of listing, pruning and redelivering deliveries.

func deliveriesListFiltersAndPages(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	all := seedFilteredDeliveries(t, s, base)
	list := func(t *testing.T, q archive.DeliveryQuery, limit int) []string {
		q.Limit = limit
		return allDeliveries(t, s, q)
	}
	checkFilters(t, all, func(d *archive.Delivery) string { return d.ID }, list, []filterCase[archive.DeliveryQuery, *archive.Delivery]{
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
	})

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

// seedFilteredDeliveries records the 30 deliveries
// deliveriesListFiltersAndPages filters: of two operators and two
// sources, refused by a check or by a handler, each outcome. They are
// returned oldest first, received a second apart from base on.
func seedFilteredDeliveries(t *testing.T, s archive.Store, base time.Time) []*archive.Delivery {
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
	return all
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
		d := newDelivery(now.Add(-pruneAge(i)), "printer", "github", fmt.Sprintf("d-%d", i))
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
