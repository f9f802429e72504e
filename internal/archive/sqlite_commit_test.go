package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openCommitTest(t *testing.T) *SQLite {
	t.Helper()
	s, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// putStateWrite is PutState's write of a record of key, as a group's.
func putStateWrite(ctx context.Context, s *SQLite, key string) *groupWrite {
	return &groupWrite{ctx: ctx, done: make(chan groupTurn, 1), fn: func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, s.putState).ExecContext(ctx, "op", key, "v1", "K", "ns", key, []byte("{}"), time.Now().UnixNano())
		return err
	}}
}

func stateKeys(t *testing.T, s *SQLite) map[string]bool {
	t.Helper()
	states, err := s.HandlerRecords(t.Context(), "op")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, st := range states {
		keys[st.Key] = true
	}
	return keys
}

func TestGroupedWriteThatFailsLeavesTheOthersOfItsTransactionCommitted(t *testing.T) {
	s := openCommitTest(t)
	ctx := t.Context()
	now := time.Now()
	dup := &Run{ID: NewID(now), Operator: "op", Handler: "h", Key: "k", StartedAt: now}
	if err := s.Insert(ctx, dup); err != nil {
		t.Fatal(err)
	}
	failing := &groupWrite{ctx: ctx, done: make(chan groupTurn, 1), fn: func(ctx context.Context, tx *sql.Tx) error {
		// Half made, then refused: nothing of it stays.
		if _, err := tx.StmtContext(ctx, s.putState).ExecContext(ctx, "op", "half", "v1", "K", "ns", "half", []byte("{}"), time.Now().UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (id, operator, handler, started_at, outcome) VALUES (?, 'op', 'h', 1, 'Running')`, dup.ID)
		return err
	}}
	group := []*groupWrite{putStateWrite(ctx, s, "a"), failing, putStateWrite(ctx, s, "b")}
	commitGroup(s.w, group)
	for i, g := range group {
		turn := <-g.done
		if (turn.err != nil) != (i == 1) {
			t.Errorf("write %d ended with %v; only write 1 (a duplicate run id) should fail", i, turn.err)
		}
	}
	if got := stateKeys(t, s); !got["a"] || !got["b"] || got["half"] {
		t.Errorf("the archive holds the records %v, want a and b, and nothing of the failed write", got)
	}
}

func TestGroupedWriteWhoseContextEndedBeforeItsTransactionIsNotMade(t *testing.T) {
	s := openCommitTest(t)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	group := []*groupWrite{putStateWrite(t.Context(), s, "a"), putStateWrite(ended, s, "gone")}
	commitGroup(s.w, group)
	if turn := <-group[0].done; turn.err != nil {
		t.Errorf("the live write failed: %v", turn.err)
	}
	if turn := <-group[1].done; !errors.Is(turn.err, context.Canceled) {
		t.Errorf("the write whose context ended returned %v, want context.Canceled", turn.err)
	}
	if got := stateKeys(t, s); !got["a"] || got["gone"] {
		t.Errorf("the archive holds the records %v, want a alone", got)
	}
}

// Writes from many goroutines at once share transactions; each returns
// once its own is committed, with its own error.
func TestConcurrentWritesAreEachCommittedOrRefusedOnTheirOwn(t *testing.T) {
	s := openCommitTest(t)
	ctx := t.Context()
	now := time.Now()
	runs := make([]*Run, 64)
	for i := range runs {
		runs[i] = &Run{ID: NewID(now), Operator: "op", Handler: "h", Key: fmt.Sprintf("k%d", i), StartedAt: now}
	}
	errs := make([]error, 2*len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[2*i] = s.PutHandlerRecord(ctx, &HandlerRecord{Operator: "op", Key: fmt.Sprintf("s%d", i), Data: []byte("{}")})
		}()
		go func() {
			defer wg.Done()
			dup := *r
			if i%8 == 0 {
				dup.ID = runs[0].ID // refused, but for the first to come
			}
			errs[2*i+1] = s.Insert(ctx, &dup)
		}()
	}
	wg.Wait()
	refused := 0
	for i, err := range errs {
		switch {
		case i%2 == 0 && err != nil:
			t.Errorf("PutState %d: %v", i/2, err)
		case i%2 == 1 && err != nil:
			refused++
		}
	}
	if refused != 7 {
		t.Errorf("%d inserts refused, want the 7 of a duplicate id", refused)
	}
	if got := stateKeys(t, s); len(got) != len(runs) {
		t.Errorf("the archive holds %d handler records, want %d", len(got), len(runs))
	}
	for i, r := range runs[1:] {
		if i%8 == 7 {
			continue
		}
		if _, err := s.Get(ctx, r.ID); err != nil {
			t.Errorf("run %d: %v", i+1, err)
		}
	}
}
