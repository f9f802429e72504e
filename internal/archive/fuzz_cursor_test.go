package archive

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzCursor sets and reads source cursors (CursorStore) of any operator,
// source and cursor, in a SQLite archive, and checks what a store must
// do with each: refuse it with an error that says what is wrong, and keep
// nothing of it; or keep it exactly, under its own operator and source
// only, where no write to another source's cursor reaches it. What one
// store accepts, every store keeps as given: the PostgreSQL archive's
// text holds UTF-8 without NUL bytes, so a cursor or key that is not is
// refused by both alike.
func FuzzCursor(f *testing.F) {
	for _, seed := range [][5]string{
		{"notifier", "github", "31337", "notifier", "gitlab"},
		{"notifier", "github", "", "printer", "github"},
		{"notifier", "github", strings.Repeat("9", maxCursor), "notifier", "github"},
		{"notifier", "github", strings.Repeat("9", maxCursor+1), "notifier", "github2"},
		{"", "github", "1", "x", "y"},
		{"notifier", "", "1", "x", "y"},
		{"a\x00b", "s", "1", "a\x00c", "s"},
		{"a", "s\x00", "1", "a", "s"},
		{"a", "s", "1\x002", "a", "t"},
		{"a", "s", "\xff\xfe", "a", "t"},
		{"a\xff", "s", "1", "a", "s"},
		{"a/b", "c", "a/b:7", "a", "b/c"},
		{"op", "src", "x' OR '1'='1", "op", "src2"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4])
	}
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(f.TempDir(), "runs.db"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, operator, source, cursor, otherOperator, otherSource string) {
		start := time.Now()
		defer func() {
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("setting and reading a cursor took %s", took)
			}
		}()
		before, readErr := s.Cursor(ctx, operator, source)
		err := s.SetCursor(ctx, operator, source, cursor)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "archive: ") || !strings.Contains(msg, "cursor") {
				t.Fatalf("SetCursor(%q, %q, %d bytes): %q does not say it is the cursor that is refused", operator, source, len(cursor), msg)
			}
			if after, err := s.Cursor(ctx, operator, source); err == nil && after != before {
				t.Fatalf("SetCursor(%q, %q, %q) refused (%v), but the cursor changed from %q to %q", operator, source, cursor, msg, before, after)
			}
			if readErr == nil && checkCursor(operator, source, "") != nil {
				t.Fatalf("Cursor(%q, %q) read a cursor that cannot be set", operator, source)
			}
			return
		}
		if readErr != nil {
			t.Fatalf("Cursor(%q, %q): %v, where SetCursor succeeds", operator, source, readErr)
		}
		for _, v := range []string{operator, source, cursor} {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				t.Fatalf("SetCursor(%q, %q, %q) accepted text that PostgreSQL's text cannot hold", operator, source, cursor)
			}
		}
		if operator == "" || source == "" || len(cursor) > maxCursor {
			t.Fatalf("SetCursor(%q, %q, %d bytes) accepted", operator, source, len(cursor))
		}
		if got, err := s.Cursor(ctx, operator, source); err != nil || got != cursor {
			t.Fatalf("Cursor(%q, %q) = %q, %v; want %q, as set", operator, source, got, err, cursor)
		}
		if otherOperator == operator && otherSource == source {
			return
		}
		// Another source's cursor is its own.
		other := cursor + "+"
		if err := s.SetCursor(ctx, otherOperator, otherSource, other); err != nil {
			return // refused: checked as the first is
		}
		if got, err := s.Cursor(ctx, operator, source); err != nil || got != cursor {
			t.Fatalf("Cursor(%q, %q) = %q, %v after SetCursor(%q, %q, %q); want %q, as set", operator, source, got, err, otherOperator, otherSource, other, cursor)
		}
		if got, err := s.Cursor(ctx, otherOperator, otherSource); err != nil || got != other {
			t.Fatalf("Cursor(%q, %q) = %q, %v; want %q, as set", otherOperator, otherSource, got, err, other)
		}
	})
}
