package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Group commit: the engine's writes of a run (its record at the start,
// its end, a watched object's state when a step starts no run, log
// pieces) come
// from many goroutines at once, and each was a transaction of its own on
// the one writer connection. A transaction's commit costs as much as a
// few statements (its WAL frames, the WAL index, the locks): the writer
// was the busiest part of a burst of runs. So the writes that queue while
// a transaction commits go into the next one together, and each caller
// returns only once its write is committed, as before. A write that fails
// leaves the others of its transaction untouched: the transaction is
// rolled back and made again with each write in a savepoint of its own
// (savepoints throughout would cost two statements a write for a failure
// that hardly comes). Alone, a write is one transaction, as before.
//
// No goroutine runs the transactions: the caller whose write finds none
// running leads one, with every write queued by then; the first write
// queued meanwhile leads the next, so that no caller carries other
// callers' writes for long.

// maxGroup bounds the writes of one transaction: a long one holds the
// writer connection from the other writers (deliveries, pruning).
const maxGroup = 64

// groupWrite is a write waiting for its transaction.
type groupWrite struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan groupTurn
}

// groupTurn tells a waiting write how it ended, or that its caller leads
// the next transaction.
type groupTurn struct {
	err  error
	lead bool
}

// committer queues writes for the writer connection.
type committer struct {
	mu      sync.Mutex
	queue   []*groupWrite
	leading bool
}

// write runs fn in a transaction on w, with whatever other writes queue
// meanwhile, and returns fn's error, or the transaction's. The caller
// holds s.mu for reading (w is not replaced meanwhile). A write whose ctx
// ends before its transaction starts is not made; once started, it is
// finished whatever ctx does: an interrupted statement would roll back
// the other writes of its transaction.
func (c *committer) write(ctx context.Context, w *sql.DB, fn func(ctx context.Context, tx *sql.Tx) error) error {
	me := &groupWrite{ctx: ctx, fn: fn, done: make(chan groupTurn, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, me)
	if c.leading {
		c.mu.Unlock()
		turn := <-me.done
		if !turn.lead {
			return turn.err
		}
		c.mu.Lock()
	}
	c.leading = true
	n := min(len(c.queue), maxGroup)
	group := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()

	commitGroup(w, group)

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- groupTurn{lead: true} // its caller leads the next transaction
	} else {
		c.leading = false
	}
	c.mu.Unlock()
	turn := <-me.done // me is in group: commitGroup answered it
	return turn.err
}

// commitGroup makes the writes of group in one transaction and answers
// each.
func commitGroup(w *sql.DB, group []*groupWrite) {
	answer := func(g *groupWrite, err error) { g.done <- groupTurn{err: err} }
	live := group[:0:0]
	for _, g := range group {
		if err := g.ctx.Err(); err != nil {
			answer(g, err)
			continue
		}
		live = append(live, g)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		for _, g := range live {
			answer(g, err)
		}
		return
	}
	if commitPlain(tx, live) {
		return
	}
	// A write failed, and the transaction was rolled back: again, each
	// write in a savepoint of its own, so that the one that fails leaves
	// the others whole.
	if tx, err = w.BeginTx(ctx, nil); err != nil {
		for _, g := range live {
			answer(g, err)
		}
		return
	}
	var made []*groupWrite // the writes in the transaction
	for i, g := range live {
		wctx := context.WithoutCancel(g.ctx)
		if _, err := tx.ExecContext(wctx, `SAVEPOINT write`); err != nil {
			_ = tx.Rollback()
			for _, g := range append(made, live[i:]...) {
				answer(g, err)
			}
			return
		}
		err := g.fn(wctx, tx)
		if err == nil {
			_, err = tx.ExecContext(wctx, `RELEASE write`)
			if err == nil {
				made = append(made, g)
				continue
			}
		}
		answer(g, err)
		if _, rerr := tx.ExecContext(wctx, `ROLLBACK TO write`); rerr != nil {
			// The failure ended the transaction (SQLite rolls back the
			// whole of it on some errors): nothing of it was made.
			_ = tx.Rollback()
			for _, g := range made {
				answer(g, fmt.Errorf("archive: another write of the same transaction failed: %w", errors.Join(err, rerr)))
			}
			for _, g := range live[i+1:] {
				answer(g, fmt.Errorf("archive: another write of the same transaction failed: %w", err))
			}
			return
		}
		if _, rerr := tx.ExecContext(wctx, `RELEASE write`); rerr != nil {
			_ = tx.Rollback()
			for _, g := range append(made, live[i+1:]...) {
				answer(g, rerr)
			}
			return
		}
	}
	err = tx.Commit()
	for _, g := range made {
		answer(g, err)
	}
}

// commitPlain makes the writes of group in tx without savepoints, which
// cost two statements a write: a failed write is rare, and then the
// caller does them again with savepoints. It reports false, with tx
// rolled back and no write answered, when one of several writes failed;
// else it answers each, a lone write that failed with its error, the
// others with the commit's.
func commitPlain(tx *sql.Tx, group []*groupWrite) bool {
	for _, g := range group {
		if err := g.fn(context.WithoutCancel(g.ctx), tx); err != nil {
			_ = tx.Rollback()
			if len(group) == 1 {
				g.done <- groupTurn{err: err} // nothing else to keep whole
				return true
			}
			return false
		}
	}
	err := tx.Commit()
	for _, g := range group {
		g.done <- groupTurn{err: err}
	}
	return true
}
