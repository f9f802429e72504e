package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements of runs, logs and handler records; see sqlite.go for why
// each is as it is. pgx prepares each on every connection the first time
// it runs there.
const (
	pgInsertRunSQL = `INSERT INTO runs (id, operator, handler, action, trigger_name, api_version, kind, namespace, name, uid, generation,
		idem_key, attempt, diff, started_at, finished_at, outcome, failed, error, next_retry_at, writes, actor, runner, rerun_of, reason, input, trace)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)`
	// pgFinishRunSQL replaces no later end, nor the same one (SQLite's
	// supersedesSQL).
	pgFinishRunSQL = `UPDATE runs SET finished_at = $1, outcome = $2, failed = $3, error = $4, next_retry_at = $5, writes = $6,
		runner = coalesce(nullif($7, ''), runner), result = $8 WHERE id = $9 AND (finished_at = 0 OR finished_at < $1 OR outcome = 'Cancelled' AND finished_at <> $1)`
	pgFinishedAtSQL = `SELECT finished_at FROM runs WHERE id = $1`
	pgRerunsSQL     = `SELECT id FROM runs WHERE rerun_of = $1 AND rerun_of <> '' ORDER BY id`
	pgSetRunnerSQL  = `UPDATE runs SET runner = $1 WHERE id = $2`
	pgFoldSkipped   = `DELETE FROM runs WHERE uid = $1 AND handler = $2 AND outcome = 'Skipped' AND id < $3`
	pgGetRunSQL     = `SELECT ` + runDetailColumns + ` FROM runs WHERE id = $1`
	pgKeySucceeded  = `SELECT EXISTS (SELECT 1 FROM runs WHERE idem_key = $1 AND outcome = 'Succeeded')`
	// pgKeySucceededRun is the latest: ids sort by time.
	pgKeySucceededRun = `SELECT id FROM runs WHERE idem_key = $1 AND outcome = 'Succeeded' ORDER BY id DESC LIMIT 1`
	pgCancelRunning   = `UPDATE runs SET outcome = 'Cancelled', failed = 0, error = $1, finished_at = $2 WHERE outcome = 'Running'`
	pgCountsSQL       = `SELECT operator, count(*), count(*) FILTER (WHERE failed = 1) FROM runs WHERE id >= $1 GROUP BY operator`

	// AppendLog's, in one transaction that holds the run's row, so that
	// two writers of one log (two engines, or a retry beside a late
	// write) append one after the other.
	pgLogHeadSQL   = `SELECT log_bytes, log_truncated FROM runs WHERE id = $1 FOR UPDATE`
	pgLogInsertSQL = `INSERT INTO logs (run_id, pos, data) VALUES ($1, $2, $3)`
	pgLogSizeSQL   = `UPDATE runs SET log_bytes = $1, log_truncated = $2 WHERE id = $3`
	pgLogCutSQL    = `DELETE FROM logs WHERE run_id = $1 AND pos >= $2 AND pos + length(data) <= $3`
	// $3 is the cut: the piece that straddles it keeps its part after it.
	pgLogShortenSQL = `UPDATE logs SET data = substring(data FROM ($3 - pos + 1)::integer), pos = $3
		WHERE run_id = $1 AND pos >= $2 AND pos < $3 AND pos + length(data) > $3`
	pgLogTruncatedSQL = `SELECT log_truncated FROM runs WHERE id = $1`
	pgLogPiecesSQL    = `SELECT pos, data FROM logs WHERE run_id = $1 AND pos + length(data) > $2 ORDER BY pos`

	// Prune's. Running runs are never pruned; by count, the MaxRuns
	// newest runs are kept, the running ones among them.
	pgPruneRunsByAge   = `DELETE FROM runs WHERE id < $1 AND outcome <> 'Running'`
	pgPruneRunsByCount = `DELETE FROM runs WHERE outcome <> 'Running' AND id < (
		SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET $1)`

	pgPutStateSQL = `INSERT INTO states (operator, state_key, api_version, kind, namespace, name, data, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (operator, state_key) DO UPDATE SET api_version = excluded.api_version, kind = excluded.kind,
			namespace = excluded.namespace, name = excluded.name, data = excluded.data, updated_at = excluded.updated_at`
	// pgPutLaterStateSQL is pgPutStateSQL for a run's Record: it replaces
	// a record no later than itself, never a later one.
	pgPutLaterStateSQL = pgPutStateSQL + ` WHERE excluded.updated_at >= states.updated_at`
	pgStatesSQL        = `SELECT operator, state_key, api_version, kind, namespace, name, data, updated_at FROM states WHERE operator = $1 ORDER BY state_key`
	pgDeleteStateSQL   = `DELETE FROM states WHERE operator = $1 AND state_key = $2`
)

// Insert records a new run.
func (p *Postgres) Insert(ctx context.Context, r *Run) error {
	if !ValidID(r.ID) {
		return fmt.Errorf("archive: run id %q is not one of NewID", r.ID)
	}
	if r.Outcome == "" {
		r.Outcome = Running
	}
	put, err := recordWith(r)
	if err != nil {
		return fmt.Errorf("archive: recording run %s: %w", r.ID, err)
	}
	args := []any{r.ID, r.Operator, r.Handler, r.Action, r.Trigger, r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID,
		r.Generation, r.Key, r.Attempt, marshal(keptDiff(r.Diff)), nanos(r.StartedAt), nanos(r.FinishedAt), string(r.Outcome), failedFlag(r.Outcome),
		r.Error, nanos(r.NextRetryAt), marshal(r.Writes), r.Actor, r.Runner, r.RerunOf, r.Reason, string(r.Input), r.Trace}
	if put == nil {
		_, err = p.pool.Exec(ctx, pgInsertRunSQL, args...)
	} else {
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgInsertRunSQL, args...); err != nil {
				return err
			}
			return put(ctx, tx)
		})
	}
	if err != nil {
		return p.fail("recording run "+r.ID, err)
	}
	return nil
}

// recordWith is the write of r.Record in a run's transaction (nil
// without one), or why the record cannot be stored.
func recordWith(r *Run) (func(ctx context.Context, tx pgx.Tx) error, error) {
	st := r.Record
	if st == nil {
		return nil, nil
	}
	updated, data, err := prepareState(st)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pgPutLaterStateSQL, st.Operator, st.Key, st.APIVersion, st.Kind, st.Namespace, st.Name, data, updated.UnixNano())
		return err
	}, nil
}

// failedFlag is the failed column of a run of outcome o.
func failedFlag(o Outcome) int16 {
	if o.Failure() {
		return 1
	}
	return 0
}

// Finish records how a run ended, with the tail of its log (LogTail)
// in the same transaction.
func (p *Postgres) Finish(ctx context.Context, r *Run) error {
	put, err := recordWith(r)
	if err != nil {
		return fmt.Errorf("archive: finishing run %s: %w", r.ID, err)
	}
	args := []any{nanos(r.FinishedAt), string(r.Outcome), failedFlag(r.Outcome), r.Error, nanos(r.NextRetryAt),
		marshal(r.Writes), r.Runner, string(r.Result), r.ID}
	var n int64
	if len(r.LogTail) == 0 && put == nil {
		var tag pgconn.CommandTag
		tag, err = p.pool.Exec(ctx, pgFinishRunSQL, args...)
		n = tag.RowsAffected()
	} else {
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if put != nil {
				if err := put(ctx, tx); err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, pgFinishRunSQL, args...)
			if n = tag.RowsAffected(); err != nil {
				return err
			}
			if n == 0 {
				// Superseded, or unknown: an unknown run's record is not
				// written (as SQLite's transaction, rolled back).
				if put != nil {
					var recorded int64
					switch err := tx.QueryRow(ctx, pgFinishedAtSQL, r.ID).Scan(&recorded); {
					case errors.Is(err, pgx.ErrNoRows):
						return ErrNotFound
					case err != nil:
						return err
					}
				}
				return nil
			}
			if len(r.LogTail) == 0 {
				return nil // the end of a run whose Record alone took the transaction
			}
			return p.appendLog(ctx, tx, r.ID, r.LogTail)
		})
	}
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("archive: finishing run %s: %w", r.ID, ErrNotFound)
	}
	if err != nil {
		return p.fail("finishing run "+r.ID, err)
	}
	if n == 0 {
		return p.superseded(ctx, r)
	}
	return p.foldSkipped(ctx, r)
}

// foldSkipped deletes, after a Skipped run's end, the object's earlier
// Skipped runs of the handler (again, if its end is written again: the
// fold of the first write may have failed after its commit).
func (p *Postgres) foldSkipped(ctx context.Context, r *Run) error {
	if r.Outcome != Skipped {
		return nil
	}
	// Through runs_uid; the logs go with their runs (ON DELETE CASCADE).
	// It may meet a Prune deleting the same runs in another order:
	// PostgreSQL then aborts one of the two, and it is run again.
	err := retryConflicts(func() error {
		_, err := p.pool.Exec(ctx, pgFoldSkipped, r.UID, r.Handler, r.ID)
		return err
	})
	if err != nil {
		return p.fail("folding the skipped runs before "+r.ID, err)
	}
	return nil
}

// superseded is Finish of an end the run's recorded end supersedes:
// the same end (a retry of a commit whose answer was lost) changes
// nothing but folds again; an older one's log lines are kept. An
// unknown run is ErrNotFound.
func (p *Postgres) superseded(ctx context.Context, r *Run) error {
	var recorded int64
	err := p.pool.QueryRow(ctx, pgFinishedAtSQL, r.ID).Scan(&recorded)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("archive: finishing run %s: %w", r.ID, ErrNotFound)
	}
	if err != nil {
		return p.fail("finishing run "+r.ID, err)
	}
	if recorded == nanos(r.FinishedAt) {
		return p.foldSkipped(ctx, r)
	}
	if len(r.LogTail) == 0 {
		return nil
	}
	if err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return p.appendLog(ctx, tx, r.ID, r.LogTail) }); err != nil {
		return p.fail("finishing run "+r.ID, err)
	}
	return nil
}

// SetRunner records the runner that claimed a running run.
func (p *Postgres) SetRunner(ctx context.Context, id, runner string) error {
	tag, err := p.pool.Exec(ctx, pgSetRunnerSQL, runner, id)
	if err != nil {
		return p.fail("recording the runner of run "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("archive: recording the runner of run %s: %w", id, ErrNotFound)
	}
	return nil
}

// retryConflicts runs fn again, up to twice, when PostgreSQL aborted it
// for its conflict with another transaction (retryable).
func retryConflicts(fn func() error) error {
	err := fn()
	for i := 0; i < 2 && retryable(err); i++ {
		err = fn()
	}
	return err
}

// AppendLog adds p to the run's log, with SQLite's limits: up to
// LogLimit it is kept whole; past it, the first LogHead bytes stay and
// the rest of the limit holds the latest bytes.
func (p *Postgres) AppendLog(ctx context.Context, id string, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	what := "log of run " + id
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return p.appendLog(ctx, tx, id, data) })
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("archive: %s: %w", what, err)
	}
	if err != nil {
		return p.fail(what, err)
	}
	return nil
}

// appendLog is AppendLog's write, in tx, which holds the run's row from
// then on; an unknown run is ErrNotFound.
func (p *Postgres) appendLog(ctx context.Context, tx pgx.Tx, id string, data []byte) error {
	var size int64
	var truncated bool
	err := tx.QueryRow(ctx, pgLogHeadSQL, id).Scan(&size, &truncated)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	limit, head := p.opts.LogLimit, p.opts.LogHead
	pieces, end, cut := placeLog(size, data, limit, head)
	for _, piece := range pieces {
		if _, err := tx.Exec(ctx, pgLogInsertSQL, id, piece.Pos, piece.Data); err != nil {
			return err
		}
	}
	if end > limit {
		truncated = true
		if _, err := tx.Exec(ctx, pgLogCutSQL, id, head, cut); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgLogShortenSQL, id, head, cut); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, pgLogSizeSQL, end, truncated, id)
	return err
}

// Get returns one run.
func (p *Postgres) Get(ctx context.Context, id string) (*Run, error) {
	r, err := scanRun(p.pool.QueryRow(ctx, pgGetRunSQL, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, p.fail("run "+id, err)
	}
	if r.Reruns, err = p.ids(ctx, pgRerunsSQL, id); err != nil {
		return nil, p.fail("re-runs of run "+id, err)
	}
	return r, nil
}

// ids returns the ids a query of one column of them selects, in its
// order; nil for none, as SQLite's.
func (p *Postgres) ids(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return ids, nil
}

// Logs returns the run's log from offset on.
func (p *Postgres) Logs(ctx context.Context, id string, offset int64) (*Log, error) {
	what := "log of run " + id
	var truncated bool
	err := p.pool.QueryRow(ctx, pgLogTruncatedSQL, id).Scan(&truncated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, p.fail(what, err)
	}
	rows, err := p.pool.Query(ctx, pgLogPiecesSQL, id, offset)
	if err != nil {
		return nil, p.fail(what, err)
	}
	pieces, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LogPiece, error) {
		var piece LogPiece
		err := row.Scan(&piece.Pos, &piece.Data)
		return piece, err
	})
	if err != nil {
		return nil, p.fail(what, err)
	}
	l := JoinLog(offset, pieces)
	l.Truncated = truncated
	return l, nil
}

// List returns the runs q selects, newest first.
func (p *Postgres) List(ctx context.Context, q Query) (*Page, error) {
	where, args, limit, err := q.sql()
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, numbered(listSQL(where)), append(args, limit+1)...)
	if err != nil {
		return nil, p.fail("listing runs", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		r, err := scanRun(row)
		if err != nil {
			return Run{}, err
		}
		return *r, nil
	})
	if err != nil {
		return nil, p.fail("listing runs", err)
	}
	if runs == nil {
		runs = []Run{}
	}
	page := &Page{}
	page.Runs, page.Next = cutPage(runs, limit, runID)
	return page, nil
}

// Counts returns each operator's runs since a time, and its failed ones.
func (p *Postgres) Counts(ctx context.Context, since time.Time) (map[string]Counts, error) {
	rows, err := p.pool.Query(ctx, pgCountsSQL, idPrefix(since))
	if err != nil {
		return nil, p.fail("counting runs", err)
	}
	defer rows.Close()
	out := map[string]Counts{}
	for rows.Next() {
		var op string
		var c Counts
		if err := rows.Scan(&op, &c.Runs, &c.Failed); err != nil {
			return nil, p.fail("counting runs", err)
		}
		out[op] = c
	}
	if err := rows.Err(); err != nil {
		return nil, p.fail("counting runs", err)
	}
	return out, nil
}

// Succeeded reports whether a run with this idempotency key succeeded.
func (p *Postgres) Succeeded(ctx context.Context, key string) (bool, error) {
	var found bool
	if err := p.pool.QueryRow(ctx, pgKeySucceeded, key).Scan(&found); err != nil {
		return false, p.fail("looking up key "+key, err)
	}
	return found, nil
}

// SucceededRun returns the latest run with this idempotency key that
// succeeded, or nil.
func (p *Postgres) SucceededRun(ctx context.Context, key string) (*Run, error) {
	var id string
	err := p.pool.QueryRow(ctx, pgKeySucceededRun, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, p.fail("looking up the succeeded run of key "+key, err)
	}
	return p.Get(ctx, id)
}

// CancelRunning ends every Running run as Cancelled, those of every
// engine that shares the database: only the one that leads may call it.
func (p *Postgres) CancelRunning(ctx context.Context, reason string) (int, error) {
	tag, err := p.pool.Exec(ctx, pgCancelRunning, reason, time.Now().UnixNano())
	if err != nil {
		return 0, p.fail("cancelling the running runs", err)
	}
	return int(tag.RowsAffected()), nil
}

// Prune deletes finished runs beyond the retention, and deliveries that
// are not Pending, counted apart, in one transaction under an advisory
// lock: an engine that finds another engine pruning the same database
// returns 0 and leaves it to it.
func (p *Postgres) Prune(ctx context.Context, keep Retention) (int, error) {
	var total int64
	err := retryConflicts(func() error {
		total = 0
		return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			var mine bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pruneLockKey).Scan(&mine); err != nil || !mine {
				return err
			}
			exec := func(query string, arg any) error {
				tag, err := tx.Exec(ctx, query, arg)
				total += tag.RowsAffected()
				return err
			}
			if keep.MaxAge > 0 {
				before := idPrefix(time.Now().Add(-keep.MaxAge))
				for _, q := range []string{pgPruneRunsByAge, pgPruneDeliveriesByAge} {
					if err := exec(q, before); err != nil {
						return err
					}
				}
			}
			if keep.MaxRuns > 0 {
				for _, q := range []string{pgPruneRunsByCount, pgPruneRefusedByCount, pgPruneAcceptedByCount} {
					if err := exec(q, keep.MaxRuns-1); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, p.fail("pruning", err)
	}
	return int(total), nil
}

// HandlerRecords returns an operator's handler records, ordered by key.
func (p *Postgres) HandlerRecords(ctx context.Context, operator string) ([]HandlerRecord, error) {
	what := "handler records of operator " + operator
	rows, err := p.pool.Query(ctx, pgStatesSQL, operator)
	if err != nil {
		return nil, p.fail(what, err)
	}
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HandlerRecord, error) {
		var st HandlerRecord
		var updated int64
		err := row.Scan(&st.Operator, &st.Key, &st.APIVersion, &st.Kind, &st.Namespace, &st.Name, &st.Data, &updated)
		st.UpdatedAt = fromNanos(updated)
		return st, err
	})
	if err != nil {
		return nil, p.fail(what, err)
	}
	if states == nil {
		states = []HandlerRecord{}
	}
	return states, nil
}

// PutHandlerRecord inserts or replaces a handler record.
func (p *Postgres) PutHandlerRecord(ctx context.Context, st *HandlerRecord) error {
	updated, data, err := prepareState(st)
	if err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, pgPutStateSQL, st.Operator, st.Key, st.APIVersion, st.Kind, st.Namespace, st.Name, data, updated.UnixNano())
	if err != nil {
		return p.fail(fmt.Sprintf("recording state %s of operator %s", st.Key, st.Operator), err)
	}
	return nil
}

// DeleteHandlerRecord deletes a handler record, if there is one.
func (p *Postgres) DeleteHandlerRecord(ctx context.Context, operator, key string) error {
	if _, err := p.pool.Exec(ctx, pgDeleteStateSQL, operator, key); err != nil {
		return p.fail(fmt.Sprintf("deleting state %s of operator %s", key, operator), err)
	}
	return nil
}
