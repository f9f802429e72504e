package archive_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/archivetest"
)

func openSQLite(t testing.TB, opts archive.Options) *archive.SQLite {
	s, err := archive.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "runs.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSQLiteConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T, opts archive.Options) archive.Store { return openSQLite(t, opts) })
}

func TestSQLiteKeepsRunsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "runs.db")
	ctx := context.Background()
	s, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &archive.Run{ID: archive.NewID(time.Now()), Operator: "op", Name: "n", StartedAt: time.Now()}
	if err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer func() { _ = s.Close() }()
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Errorf("run lost across reopen: %v", err)
	}
}

func TestIDsSortByTimeAndDecode(t *testing.T) {
	base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 100 {
		ids = append(ids, archive.NewID(base.Add(time.Duration(i)*time.Millisecond)))
	}
	if !slices.IsSorted(ids) {
		t.Error("ids of later runs do not sort after earlier ones")
	}
	if got, ok := archive.TimeOfID(ids[42]); !ok || !got.Equal(base.Add(42*time.Millisecond)) {
		t.Errorf("TimeOfID = %v, %v", got, ok)
	}
	for _, bad := range []string{"", "short", "0123456789abcdefgI", "../../etc/passwd!!"} {
		if archive.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

// BenchmarkQueries fills an archive with 100k runs over 2,000 objects, 5% of
// them failed, and measures the two queries a person makes when something
// broke: one object's runs, and the latest failures. It reports p99 latency.
func BenchmarkQueries(b *testing.B) {
	s := openSQLite(b, archive.Options{})
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	start := time.Now().Add(-100 * time.Hour)
	for i := range 100_000 {
		r := &archive.Run{
			ID: archive.NewID(start.Add(time.Duration(i) * 3 * time.Second)), Operator: "printer", Handler: "announce",
			Action: "exec", Trigger: "update", Namespace: "default", Name: fmt.Sprintf("obj-%d", i%2000),
			UID: fmt.Sprintf("uid-%d", i%2000), Generation: int64(i / 2000), Attempt: 1, StartedAt: start,
			Outcome: archive.Succeeded, FinishedAt: start,
		}
		if i%20 == 0 {
			r.Outcome, r.Error = archive.Failed, "exit status 1"
		}
		if err := s.Insert(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	for _, q := range []struct {
		name string
		q    archive.Query
	}{
		{"object", archive.Query{Namespace: "default", Name: "obj-1234"}},
		{"failures", archive.Query{Failed: true}},
	} {
		b.Run(q.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				page, err := s.List(ctx, q.q)
				if err != nil || len(page.Runs) != 50 {
					b.Fatalf("%d runs, %v", len(page.Runs), err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkRecordingConcurrently records runs as the engine does (a
// lookup by key, insert, a log line, finish) from 16 goroutines, as 16
// concurrent handler runs would: the log line in a write of its own, as
// the engine wrote a run's log before, and with the run's end
// (Run.LogTail), as it writes a short run's log now.
func BenchmarkRecordingConcurrently(b *testing.B) {
	for _, withEnd := range []bool{false, true} {
		name := "log apart"
		if withEnd {
			name = "log with the end"
		}
		b.Run(name, func(b *testing.B) {
			s := openSQLite(b, archive.Options{})
			defer func() { _ = s.Close() }()
			ctx := context.Background()
			b.SetParallelism(8) // 8 x GOMAXPROCS(2) = 16 goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := time.Now()
					id := archive.NewID(now)
					// Each run its own key, as each object's generation has in the engine.
					r := &archive.Run{ID: id, Operator: "op", Handler: "h", Name: "n", Key: "uid-" + id + "/1/h", StartedAt: now, Outcome: archive.Running}
					if _, err := s.Succeeded(ctx, r.Key); err != nil {
						b.Fatal(err)
					}
					if err := s.Insert(ctx, r); err != nil {
						b.Fatal(err)
					}
					line := []byte("a line of log\n")
					if withEnd {
						r.LogTail = line
					} else if err := s.AppendLog(ctx, r.ID, line); err != nil {
						b.Fatal(err)
					}
					r.Outcome, r.FinishedAt = archive.Succeeded, time.Now()
					if err := s.Finish(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
