package archive_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

// pages serves runs in pages of its own size, as a store's List does.
type pages struct {
	runs    []archive.Run
	size    int
	queries []archive.Query
	fail    bool
}

func (p *pages) List(_ context.Context, q archive.Query) (*archive.Page, error) {
	p.queries = append(p.queries, q)
	if p.fail && len(p.queries) == 2 {
		return nil, errors.New("the archive is gone")
	}
	from := 0
	if q.Cursor != "" {
		from, _ = strconv.Atoi(q.Cursor)
	}
	to := min(from+p.size, len(p.runs))
	page := &archive.Page{Runs: p.runs[from:to]}
	if to < len(p.runs) {
		page.Next = strconv.Itoa(to)
	}
	return page, nil
}

func TestListAllReadsEveryPageWithTheQuerysFilters(t *testing.T) {
	p := &pages{size: 2}
	for i := range 5 {
		p.runs = append(p.runs, archive.Run{ID: strconv.Itoa(i)})
	}
	runs, err := archive.ListAll(t.Context(), p, archive.Query{Operator: "op", Limit: 3, Cursor: "4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 || runs[0].ID != "0" || runs[4].ID != "4" {
		t.Errorf("runs %v, want all five in order", runs)
	}
	if len(p.queries) != 3 || p.queries[0].Cursor != "" || p.queries[0].Limit != 1000 || p.queries[2].Operator != "op" {
		t.Errorf("queries %+v: want three pages of 1,000 from the start, filtered by operator", p.queries)
	}
	p.fail, p.queries = true, nil
	if _, err := archive.ListAll(t.Context(), p, archive.Query{}); err == nil {
		t.Error("a page that fails was not an error")
	}
}
