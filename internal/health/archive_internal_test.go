package health

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opkit-dev/opkit/internal/archive"
)

// A source's cursor the archive refuses for what it is (too long, not
// text: a hostile or broken value from the source) is the source's error
// alone: the archive is not counted as failing for it (readyz's archive
// check, opkit_archive_writable, the notice that no handler starts),
// while a write the archive itself cannot make still is.
func TestARefusedCursorDoesNotCountTheArchiveAsFailing(t *testing.T) {
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	writable := &setGauge{Gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "writable"})}
	writable.Set(1)
	w := NewArchiveWriter(store, func(s string) { notices = append(notices, s) }, writable)

	for _, cursor := range []string{strings.Repeat("9", 4096), "bad\x00cursor", "\xff\xfe"} {
		err := w.SetCursor(ctx, "notifier", "github", cursor)
		if !errors.Is(err, archive.ErrInvalidCursor) {
			t.Fatalf("SetCursor(%d bytes): %v, want archive.ErrInvalidCursor", len(cursor), err)
		}
	}
	if err := w.Failure(); err != nil || writable.v != 1 || len(notices) > 0 {
		t.Errorf("after refused cursors: failure %v, writable %v, notices %q; want the archive counted as working", err, writable.v, notices)
	}
	if err := w.SetCursor(ctx, "notifier", "github", "31337"); err != nil {
		t.Fatalf("a good cursor: %v", err)
	}

	// The archive gone: that is a failure.
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.SetCursor(ctx, "notifier", "github", "31338"); err == nil {
		t.Fatal("SetCursor on a closed archive succeeded")
	}
	if err := w.Failure(); err == nil || writable.v != 0 || len(notices) != 1 {
		t.Errorf("after a write the archive could not make: failure %v, writable %v, notices %q; want it counted as failing", err, writable.v, notices)
	}
}

// setGauge is a gauge that keeps the value last set.
type setGauge struct {
	prometheus.Gauge
	v float64
}

func (g *setGauge) Set(v float64) { g.v = v; g.Gauge.Set(v) }
