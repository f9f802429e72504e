package archivetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The subtests of source cursors (archive.CursorStore).

func cursor(t *testing.T, s archive.Store, op, src string) string {
	t.Helper()
	c, err := s.Cursor(context.Background(), op, src)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func setCursor(t *testing.T, s archive.Store, op, src, c string) {
	t.Helper()
	if err := s.SetCursor(context.Background(), op, src, c); err != nil {
		t.Fatal(err)
	}
}

func cursorsRoundTripPerOperatorAndSource(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	if got := cursor(t, s, "notifier", "github"); got != "" {
		t.Fatalf("cursor of a source that never set one: %q, want \"\"", got)
	}
	setCursor(t, s, "notifier", "github", "31337")
	setCursor(t, s, "notifier", "gitlab", "a/b:7")
	setCursor(t, s, "printer", "github", "12")
	setCursor(t, s, "notifier", "github", "31340") // replaces
	for _, c := range []struct{ op, src, want string }{
		{"notifier", "github", "31340"},
		{"notifier", "gitlab", "a/b:7"},
		{"printer", "github", "12"},
		{"printer", "gitlab", ""},
	} {
		if got := cursor(t, s, c.op, c.src); got != c.want {
			t.Errorf("cursor of %s/%s: %q, want %q", c.op, c.src, got, c.want)
		}
	}
	setCursor(t, s, "printer", "github", "") // an empty cursor is one
	if got := cursor(t, s, "printer", "github"); got != "" {
		t.Errorf("cursor of printer/github set empty: %q", got)
	}
}

func cursorsRefuseBadKeys(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	for _, c := range []struct{ op, src, cursor, want string }{
		{"", "github", "1", "must be set"},
		{"notifier", "", "1", "must be set"},
		{"notifier", "github", strings.Repeat("9", 2000), "a cursor is a position"},
	} {
		err := s.SetCursor(ctx, c.op, c.src, c.cursor)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetCursor(%q, %q, %d bytes): %v, want an error saying %q", c.op, c.src, len(c.cursor), err, c.want)
		}
		// The value is wrong, not the store: the engine does not count
		// the archive as failing for it (health.ArchiveWriter).
		if !errors.Is(err, archive.ErrInvalidCursor) {
			t.Errorf("SetCursor(%q, %q, %d bytes): %v, want it to wrap archive.ErrInvalidCursor", c.op, c.src, len(c.cursor), err)
		}
	}
	if got := cursor(t, s, "notifier", "github"); got != "" {
		t.Errorf("a refused cursor was stored: %q", got)
	}
}

func cursorsOutlivePruneAndCancelRunning(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	setCursor(t, s, "notifier", "github", "77")
	if _, err := s.CancelRunning(ctx, "engine stopped"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, archive.Retention{MaxRuns: 1, MaxAge: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cursor(t, s, "notifier", "github"); got != "77" {
		t.Errorf("cursor after CancelRunning and Prune: %q, want 77", got)
	}
}

func cursorsConcurrentWriters(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	concurrently(t, 8, func(w int, fail func(error)) {
		for i := range 20 {
			if err := s.SetCursor(ctx, "notifier", fmt.Sprintf("src-%d", w), fmt.Sprint(i)); err != nil {
				fail(err)
			}
		}
	})
	for w := range 8 {
		if got := cursor(t, s, "notifier", fmt.Sprintf("src-%d", w)); got != "19" {
			t.Errorf("cursor of src-%d after its 20 writes: %q, want 19", w, got)
		}
	}
}
