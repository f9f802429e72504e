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
	ctx := context.Background()
	all := seedFilteredRuns(t, s)
	want := func(pred func(r *archive.Run) bool) []string {
		return newestFirst(all, func(r *archive.Run) string { return r.ID }, pred)
	}
	for _, c := range []struct {
		name string
		q    archive.Query
		pred func(r *archive.Run) bool
	}{
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
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, limit := range []int{4, 1000} {
				var got []string
				q := c.q
				q.Limit = limit
				for pages := 0; ; pages++ {
					if pages > 40 {
						t.Fatal("paging does not end")
					}
					page, err := s.List(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					if len(page.Runs) > limit {
						t.Fatalf("page of %d runs, limit %d", len(page.Runs), limit)
					}
					for _, r := range page.Runs {
						got = append(got, r.ID)
					}
					if page.Next == "" {
						break
					}
					q.Cursor = page.Next
				}
				if w := want(c.pred); !reflect.DeepEqual(got, w) {
					t.Errorf("limit %d: got %d runs %v\nwant %d %v", limit, len(got), got, len(w), w)
				}
			}
		})
	}
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
	page, err := s.List(context.Background(), archive.Query{Since: base.Add(3 * time.Minute), Until: base.Add(6 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Runs {
		got = append(got, r.ID)
	}
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
