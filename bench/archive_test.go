package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// TestArchiveScenarioOnEachStore runs the archive scenario, small, on
// SQLite and on PostgreSQL, without a cluster: each store is filled in
// bulk (its loader writes the sample run as the store does, or the fill
// fails), records, answers the queries (the runs API's lists of one
// object's runs too), is pruned back to its size, and gives every figure. PostgreSQL is skipped where it cannot start, unless
// CI=true.
func TestArchiveScenarioOnEachStore(t *testing.T) {
	const n = 3000
	opts := defaultOptions()
	opts.ArchiveBatch = 500
	b := &bench{
		opts: opts, c: &cluster{ns: benchNamespace}, workDir: t.TempDir(), log: io.Discard,
		archives: map[archiveKey]*filled{}, runBase: time.Now().Add(-24 * time.Hour),
	}
	defer b.closeArchives()
	for _, st := range allStores {
		t.Run(st.title(), func(t *testing.T) {
			if st == postgresStore {
				srv, err := pgtest.Start()
				if err != nil {
					pgtest.Unavailable(t, err)
				}
				b.pg = srv // closed by closeArchives
			}
			for run := range 2 {
				if err := b.archiveScale(t.Context(), st, n); err != nil {
					t.Fatalf("run %d: %v", run+1, err)
				}
			}
			counts, err := b.archives[archiveKey{st, n}].store.Counts(t.Context(), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got := counts[operatorName]; got.Runs != n || got.Failed != n/20 {
				t.Errorf("after two runs pruned back: %d runs, %d failed; want %d and %d", got.Runs, got.Failed, n, n/20)
			}
			for _, m := range []struct {
				metric string
				runs   int
			}{
				{"bulk fill", 1}, {"size on disk", 1}, {"runs recorded/s", 2}, {"one object's runs p99", 2},
				{"latest failures p99", 2}, {"prune 500 oldest", 2},
				{"runs API one object, all namespaces p50", 2}, {"runs API one object, all namespaces p99", 2},
				{"runs API one object, one namespace p50", 2}, {"runs API one object, one namespace p99", 2},
			} {
				f := b.find(st, "archive", "3k runs", m.metric)
				if f == nil || len(f.Values) != m.runs || f.Min <= 0 {
					t.Errorf("%s: figure %+v, want %d positive values", m.metric, f, m.runs)
				}
			}
		})
	}
}

// TestArchiveStoresPrintSideBySide checks the stores' table: a row per
// measure, a column per store, a dash where a store has no figure.
func TestArchiveStoresPrintSideBySide(t *testing.T) {
	b := &bench{}
	b.add("drain", "opkit", "objects/s", "/s", 286)
	b.addFor(sqliteStore, "archive", "1M runs", "bulk fill", "runs/s", 90_000)
	b.addFor(postgresStore, "archive", "1M runs", "bulk fill", "runs/s", 60_000)
	b.addFor(sqliteStore, "archive", "1M runs", "latest failures p99", "ms", 1.2)
	b.addFor(sqliteStore, "archive", "1M runs", "latest failures p99", "ms", 1.4)
	b.addFor(postgresStore, "console 1M runs", "run", "page p99", "ms", 0.8)
	var out strings.Builder
	b.printStores(&out)
	want := `ARCHIVE          SUBJECT  METRIC               SQLITE            POSTGRESQL  UNIT    RUNS
archive          1M runs  bulk fill            90000             60000       runs/s  1
archive          1M runs  latest failures p99  1.30 (1.20-1.40)  -           ms      2
console 1M runs  run      page p99             -                 0.80        ms      1
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
