package archivetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The archive conformance's checks of listing runs: filters, pages, time bounds, counts.

func listFiltersAndPages(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	all := seedFilteredRuns(t, s)
	list := func(t *testing.T, q archive.Query, limit int) []string {
		q.Limit = limit
		return allRuns(t, s, q)
	}
	checkFilters(t, all, func(r *archive.Run) string { return r.ID }, list, []filterCase[archive.Query, *archive.Run]{
		{"all", archive.Query{}, func(*archive.Run) bool { return true }},
		{"operator", archive.Query{Operator: "website"}, func(r *archive.Run) bool { return r.Operator == "website" }},
		{"object", archive.Query{Namespace: "ns", Name: "obj-2"}, func(r *archive.Run) bool { return r.Namespace == "ns" && r.Name == "obj-2" }},
		{"no namespace", archive.Query{NoNamespace: true}, func(r *archive.Run) bool { return r.Namespace == "" }},
		{"object of no namespace", archive.Query{NoNamespace: true, Name: "printer"}, func(r *archive.Run) bool { return r.Namespace == "" && r.Name == "printer" }},
		{"uid", archive.Query{UID: "uid-ns-obj-3"}, func(r *archive.Run) bool { return r.UID == "uid-ns-obj-3" }},
		{"handler", archive.Query{Handler: "cleanup"}, func(r *archive.Run) bool { return r.Handler == "cleanup" }},
		{"failed", archive.Query{Failed: true}, func(r *archive.Run) bool { return r.Outcome.Failure() }},
		{"outcome", archive.Query{Outcome: archive.Running}, func(r *archive.Run) bool { return r.Outcome == archive.Running }},
		{"combined", archive.Query{Operator: "printer", Failed: true}, func(r *archive.Run) bool { return r.Operator == "printer" && r.Outcome.Failure() }},
		{"kind", archive.Query{Kind: "Deployment"}, func(r *archive.Run) bool { return r.Kind == "Deployment" }},
		{"trigger", archive.Query{Trigger: "create"}, func(r *archive.Run) bool { return r.Trigger == "create" }},
		{"operator-wide schedule", archive.Query{Operator: "printer", Kind: "Operator", Trigger: "schedule"}, func(r *archive.Run) bool {
			return r.Operator == "printer" && r.Kind == "Operator" && r.Trigger == "schedule"
		}},
		{"kind and object", archive.Query{Kind: "Printer", Namespace: "ns", Name: "obj-1"}, func(r *archive.Run) bool {
			return r.Kind == "Printer" && r.Namespace == "ns" && r.Name == "obj-1"
		}},
		{"kind no run has", archive.Query{Kind: "printer"}, func(*archive.Run) bool { return false }},
	})
}

// seedFilteredRuns inserts the 30 runs listFiltersAndPages filters: of
// two operators, two handlers, objects of two kinds and of an
// operator-wide schedule, each outcome, the last one Running. They are
// returned oldest first.
func seedFilteredRuns(t *testing.T, s archive.Store) []*archive.Run {
	base := time.Now().Add(-time.Hour)
	var all []*archive.Run
	for i := range 30 {
		op, handler := "printer", "announce"
		if i%3 == 0 {
			op = "website"
		}
		if i%2 == 0 {
			handler = "cleanup"
		}
		r := newRun(base.Add(time.Duration(i)*time.Second), op, "ns", fmt.Sprintf("obj-%d", i%5), handler)
		switch {
		case i%10 == 3:
			// A run of an operator-wide schedule: its object is the
			// Operator.
			r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID = "opkit.dev/v1alpha1", "Operator", "", op, "uid-"+op
			r.Trigger, r.Key = "schedule", "uid-"+op+"/1/"+handler
		case i%5 == 1:
			r.APIVersion, r.Kind = "apps/v1", "Deployment"
		}
		if i%4 == 1 {
			r.Trigger = "create"
		}
		insert(t, s, r)
		switch {
		case i%7 == 0:
			finish(t, s, r, archive.GaveUp)
		case i%4 == 0:
			finish(t, s, r, archive.Failed)
		case i != 29:
			finish(t, s, r, archive.Succeeded)
		}
		all = append(all, r)
	}
	return all
}

func listTimeBounds(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var ids []string
	for i := range 10 {
		r := newRun(base.Add(time.Duration(i)*time.Minute), "op", "ns", "n", "h")
		insert(t, s, r)
		ids = append(ids, r.ID)
	}
	got := allRuns(t, s, archive.Query{Since: base.Add(3 * time.Minute), Until: base.Add(6 * time.Minute)})
	if want := []string{ids[5], ids[4], ids[3]}; !reflect.DeepEqual(got, want) {
		t.Errorf("runs started in [3m, 6m): %v, want %v", got, want)
	}
}

func countsByOperatorSince(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i, o := range []archive.Outcome{archive.Succeeded, archive.Failed, archive.GaveUp, archive.Succeeded, archive.Cancelled} {
		a := newRun(base.Add(time.Duration(i)*time.Minute), "a", "ns", "n", "h")
		insert(t, s, a)
		finish(t, s, a, o)
	}
	insert(t, s, newRun(base.Add(10*time.Minute), "b", "ns", "n", "h")) // still running
	insert(t, s, newRun(base.Add(-time.Minute), "c", "ns", "n", "h"))   // too old
	got, err := s.Counts(context.Background(), base.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]archive.Counts{"a": {Runs: 4, Failed: 2}, "b": {Runs: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counts since 1m: %+v, want %+v", got, want)
	}
}

func listRejectsForeignCursor(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	if _, err := s.List(context.Background(), archive.Query{Cursor: "'; DROP TABLE runs; --"}); err == nil {
		t.Error("List accepted a cursor it did not return")
	}
}

// filterCase is a query of a list check, and which of the records seeded
// it selects.
type filterCase[Q, T any] struct {
	name string
	q    Q
	pred func(T) bool
}

// checkFilters lists what each case's query selects, in pages of 4 and
// of 1000, and checks it is what the case's pred keeps of all (oldest
// first), newest first. list lists the ids a query selects, in pages of
// limit.
func checkFilters[Q, T any](t *testing.T, all []T, id func(T) string, list func(t *testing.T, q Q, limit int) []string, cases []filterCase[Q, T]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, limit := range []int{4, 1000} {
				if got, want := list(t, c.q, limit), newestFirst(all, id, c.pred); !reflect.DeepEqual(got, want) {
					t.Errorf("limit %d: got %d %v\nwant %d %v", limit, len(got), got, len(want), want)
				}
			}
		})
	}
}

// allRuns lists every run q selects, page by page, and returns their ids.
func allRuns(t *testing.T, s archive.Store, q archive.Query) []string {
	t.Helper()
	next := func() ([]archive.Run, bool, error) {
		page, err := s.List(context.Background(), q)
		if err != nil {
			return nil, false, err
		}
		q.Cursor = page.Next
		return page.Runs, page.Next != "", nil
	}
	return pageIDs(t, orDefault(q.Limit, 50), next, func(r archive.Run) string { return r.ID })
}

// pageIDs reads a list page by page, to its last, and returns the ids of
// what the pages hold, in order. next reads the next page: its records,
// and whether another follows. A page of more than limit records fails
// t, and so does a list that does not end.
func pageIDs[T any](t *testing.T, limit int, next func() ([]T, bool, error), id func(T) string) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 2000 {
			t.Fatal("paging does not end")
		}
		records, more, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if len(records) > limit {
			t.Fatalf("page of %d records, limit %d", len(records), limit)
		}
		for _, r := range records {
			ids = append(ids, id(r))
		}
		if !more {
			return ids
		}
	}
}

// newestFirst are the ids of the records of all (oldest first) that pred
// keeps, newest first, as the archive lists them.
func newestFirst[T any](all []T, id func(T) string, pred func(T) bool) []string {
	var ids []string
	for i := len(all) - 1; i >= 0; i-- {
		if pred(all[i]) {
			ids = append(ids, id(all[i]))
		}
	}
	return ids
}
