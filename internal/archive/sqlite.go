package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver; pure Go, no cgo
)

// migrations are applied in order, each once; the database records how many
// it has had. Append, never edit.
var migrations = []string{
	`CREATE TABLE runs (
		id            TEXT PRIMARY KEY,
		operator      TEXT NOT NULL,
		handler       TEXT NOT NULL,
		action        TEXT NOT NULL,
		trigger_name  TEXT NOT NULL,
		api_version   TEXT NOT NULL,
		kind          TEXT NOT NULL,
		namespace     TEXT NOT NULL,
		name          TEXT NOT NULL,
		uid           TEXT NOT NULL,
		generation    INTEGER NOT NULL,
		idem_key      TEXT NOT NULL,
		attempt       INTEGER NOT NULL,
		diff          TEXT NOT NULL,
		started_at    INTEGER NOT NULL,
		finished_at   INTEGER NOT NULL,
		outcome       TEXT NOT NULL,
		failed        INTEGER NOT NULL,
		error         TEXT NOT NULL,
		next_retry_at INTEGER NOT NULL,
		writes        TEXT NOT NULL,
		log_bytes     INTEGER NOT NULL DEFAULT 0,
		log_truncated INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX runs_operator ON runs (operator, id);
	CREATE INDEX runs_object ON runs (namespace, name, id);
	CREATE INDEX runs_uid ON runs (uid, id);
	CREATE INDEX runs_failed ON runs (failed, id);
	CREATE INDEX runs_outcome ON runs (outcome, id);
	CREATE INDEX runs_key ON runs (idem_key, outcome);
	CREATE TABLE logs (
		run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
		pos    INTEGER NOT NULL,
		data   BLOB NOT NULL,
		PRIMARY KEY (run_id, pos)
	);`,
	// Each index is one more B-tree every run writes, and the three below
	// were also rewritten when a run finished (its outcome changed). Partial
	// indexes hold only the runs they are asked for: the failed ones, the
	// running ones, the keys that succeeded. SQLite uses one only where it
	// can see that the query's condition implies the index's: a literal, or
	// a parameter bound before the plan is made. A test checks each query's
	// plan.
	`DROP INDEX runs_failed;
	DROP INDEX runs_outcome;
	DROP INDEX runs_key;
	CREATE INDEX runs_failed ON runs (id) WHERE failed = 1;
	CREATE INDEX runs_running ON runs (id) WHERE outcome = 'Running';
	CREATE INDEX runs_succeeded ON runs (idem_key) WHERE outcome = 'Succeeded';`,
	// handler records, one per operator and key. A rowid table: its data may
	// be large, and WITHOUT ROWID suits small rows only.
	`CREATE TABLE states (
		operator    TEXT NOT NULL,
		state_key   TEXT NOT NULL,
		api_version TEXT NOT NULL,
		kind        TEXT NOT NULL,
		namespace   TEXT NOT NULL,
		name        TEXT NOT NULL,
		data        BLOB NOT NULL,
		updated_at  INTEGER NOT NULL,
		PRIMARY KEY (operator, state_key)
	);`,
	// Webhook deliveries, accepted and refused. Runs, objects and headers
	// are JSON. The payload is the last column, so that a list, which does
	// not read it, does not read its overflow pages. The indexes, each for
	// its query (a test checks each plan):
	//   - deliveries_accepted: RecordDelivery's replay check, the insert's
	//     conflict target. Unique over the accepted deliveries with a
	//     sender's id only: refused ones never conflict.
	//   - deliveries_operator: ListDeliveries of an operator (opkit events
	//     --operator), newest first; its source is filtered on the way.
	//   - deliveries_pending: PendingDeliveries of an operator, oldest
	//     first, when an engine starts; it holds only what is not handled.
	//   - deliveries_refused: ListDeliveries of the refused ones (opkit
	//     events --refused), newest first.
	// Time bounds, the cursor, GetDelivery and Prune use the primary key:
	// ids sort by the time received.
	`CREATE TABLE deliveries (
		id                TEXT PRIMARY KEY,
		operator          TEXT NOT NULL,
		source            TEXT NOT NULL,
		delivery_id       TEXT NOT NULL,
		received_at       INTEGER NOT NULL,
		outcome           TEXT NOT NULL,
		reason            TEXT NOT NULL,
		event             TEXT NOT NULL,
		runs              TEXT NOT NULL,
		objects           TEXT NOT NULL,
		handled_at        INTEGER NOT NULL,
		payload_bytes     INTEGER NOT NULL,
		payload_truncated INTEGER NOT NULL,
		headers           TEXT NOT NULL,
		payload           BLOB NOT NULL
	);
	CREATE UNIQUE INDEX deliveries_accepted ON deliveries (operator, source, delivery_id) WHERE delivery_id != '' AND outcome != 'Refused';
	CREATE INDEX deliveries_operator ON deliveries (operator, id);
	CREATE INDEX deliveries_pending ON deliveries (operator, id) WHERE outcome = 'Pending';
	CREATE INDEX deliveries_refused ON deliveries (id) WHERE outcome = 'Refused';`,
	// Run.Actor: the person whose decision caused a state transition.
	`ALTER TABLE runs ADD COLUMN actor TEXT NOT NULL DEFAULT '';`,
	// Run.Runner: the runner Pod that ran an exec handler with an image.
	`ALTER TABLE runs ADD COLUMN runner TEXT NOT NULL DEFAULT '';`,
	// rerun37: re-runs and replays. Run.RerunOf and Run.Reason (a re-run
	// and why it was asked), Run.Input and Run.Result (the binding
	// context and the result, JSON).
	`ALTER TABLE runs ADD COLUMN rerun_of TEXT NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN reason TEXT NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN input TEXT NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN result TEXT NOT NULL DEFAULT '';
	CREATE INDEX runs_rerun_of ON runs (rerun_of) WHERE rerun_of != '';`,
	// Redeliveries on purpose (Delivery.RedeliveryOf, RedeliveredBy,
	// RedeliveryReason). The table is made again, so that the payload
	// stays its last column (ADD COLUMN would put the new ones after it,
	// and a list would read its overflow pages). deliveries_accepted
	// leaves redeliveries out: one has its original's sender's id, and
	// is no replay. deliveries_redeliveries: a delivery's redeliveries
	// (GetDelivery).
	`CREATE TABLE deliveries_redelivery (
		id                TEXT PRIMARY KEY,
		operator          TEXT NOT NULL,
		source            TEXT NOT NULL,
		delivery_id       TEXT NOT NULL,
		received_at       INTEGER NOT NULL,
		outcome           TEXT NOT NULL,
		reason            TEXT NOT NULL,
		event             TEXT NOT NULL,
		runs              TEXT NOT NULL,
		objects           TEXT NOT NULL,
		handled_at        INTEGER NOT NULL,
		payload_bytes     INTEGER NOT NULL,
		payload_truncated INTEGER NOT NULL,
		headers           TEXT NOT NULL,
		redelivery_of     TEXT NOT NULL DEFAULT '',
		redelivered_by    TEXT NOT NULL DEFAULT '',
		redelivery_reason TEXT NOT NULL DEFAULT '',
		payload           BLOB NOT NULL
	);
	INSERT INTO deliveries_redelivery (id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, payload)
		SELECT id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, payload FROM deliveries;
	DROP TABLE deliveries;
	ALTER TABLE deliveries_redelivery RENAME TO deliveries;
	CREATE UNIQUE INDEX deliveries_accepted ON deliveries (operator, source, delivery_id) WHERE delivery_id != '' AND outcome != 'Refused' AND redelivery_of = '';
	CREATE INDEX deliveries_operator ON deliveries (operator, id);
	CREATE INDEX deliveries_pending ON deliveries (operator, id) WHERE outcome = 'Pending';
	CREATE INDEX deliveries_refused ON deliveries (id) WHERE outcome = 'Refused';
	CREATE INDEX deliveries_redeliveries ON deliveries (redelivery_of, id) WHERE redelivery_of != '';`,
	// deliveries_turned_down: ListDeliveries of every refusal (opkit
	// events --refused), by the source's checks and by a handler, newest
	// first. Its condition is turnedDown's.
	`CREATE INDEX deliveries_turned_down ON deliveries (id) WHERE ` + turnedDown + `;`,
	// runs_name: one object's runs in every namespace, newest first (the
	// runs API's kubectl get runs -A -l opkit.dev/object=NAME, a Query
	// with a Name and no Namespace), which runs_object, led by the
	// namespace, cannot serve: without it the list read every run
	// (about 40 ms at 100k runs, 0.5 s at 1M). It costs each run's
	// insert one more index entry.
	`CREATE INDEX runs_name ON runs (name, id);`,
	// Source cursors: where a consumer whose source keeps no position (a
	// GitHub poll) stands, one row per operator and source. WITHOUT
	// ROWID: the rows are small and read by their key only.
	`CREATE TABLE source_cursors (
		operator   TEXT NOT NULL,
		source     TEXT NOT NULL,
		cursor     TEXT NOT NULL,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (operator, source)
	) WITHOUT ROWID;`,
	// Run.Trace and Delivery.Trace: the W3C traceparent of the run's span
	// and of the delivery's receipt (package tracing).
	`ALTER TABLE runs ADD COLUMN trace TEXT NOT NULL DEFAULT '';
	ALTER TABLE deliveries ADD COLUMN trace TEXT NOT NULL DEFAULT '';`,
}

// SQLite is the embedded Store: one database file in WAL mode. Writes go
// through one connection, so that concurrent writers queue in Go instead of
// meeting SQLITE_BUSY and sleeping in SQLite's busy handler; reads use a
// pool of their own, which WAL lets run beside the writer.
type SQLite struct {
	path string
	opts Options

	// mu guards the handles below: every call reads them, recover
	// replaces them.
	mu sync.RWMutex
	db *sql.DB // reads
	w  *sql.DB // writes: one connection
	// The statements of every run, and of a handler record, prepared once:
	// preparing took a seventh of the archive's time per run.
	insert, finish, logHead, logInsert, logSize, putState, putLater *sql.Stmt // on w
	succeeded, succeededRun                                         *sql.Stmt // on db
	file                                                            os.FileInfo
	// lost is why the archive cannot record runs, or nil.
	lost error
	// commit groups the writes of runs and states (sqlite_commit.go).
	commit committer

	stop    chan struct{}
	stopped chan struct{}
}

var _ Store = &SQLite{}

// OpenSQLite opens (creating it and its directory if needed) the archive at
// path and brings its schema up to date. It then checks every
// Options.CheckEvery that the file at path is still the one open (see
// [SQLite.Check]).
func OpenSQLite(ctx context.Context, path string, opts Options) (*SQLite, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	s := &SQLite{path: path, opts: opts, stop: make(chan struct{}), stopped: make(chan struct{})}
	if err := s.open(ctx); err != nil {
		return nil, fmt.Errorf("archive %s: %w", path, err)
	}
	go s.watch()
	return s, nil
}

// open opens the handles on the file at s.path and prepares the
// statements.
func (s *SQLite) open(ctx context.Context) error {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate") // writers queue at BEGIN instead of failing at COMMIT
	dsn := "file:" + s.path + "?" + q.Encode()
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	w.SetMaxOpenConns(1)
	s.w = w
	if err := s.migrate(ctx); err != nil {
		_ = w.Close()
		return err
	}
	if s.file, err = os.Stat(s.path); err != nil {
		_ = w.Close()
		return err
	}
	if s.db, err = sql.Open("sqlite", dsn); err != nil {
		_ = w.Close()
		return err
	}
	// Readers' connections are kept (database/sql keeps 2 idle): the
	// engine's workers look up keys at once, and a connection opened
	// anew applies its pragmas and prepares its statements again, which
	// cost more than the look-up.
	s.db.SetMaxIdleConns(readConns)
	prepare := func(db *sql.DB, query string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var stmt *sql.Stmt
		stmt, err = db.PrepareContext(ctx, query)
		return stmt
	}
	s.insert, s.finish = prepare(w, insertRunSQL), prepare(w, finishRunSQL)
	s.logHead, s.logInsert, s.logSize = prepare(w, logHeadSQL), prepare(w, logInsertSQL), prepare(w, logSizeSQL)
	s.putState, s.putLater = prepare(w, putStateSQL), prepare(w, putLaterStateSQL)
	s.succeeded, s.succeededRun = prepare(s.db, keySucceededSQL), prepare(s.db, keySucceededRunSQL)
	if err != nil {
		_ = s.closeHandles()
		return err
	}
	return nil
}

// readConns is how many of the readers' connections are kept idle.
const readConns = 16

// The statements every run makes.
const (
	insertRunSQL = `INSERT INTO runs (id, operator, handler, action, trigger_name, api_version, kind, namespace, name, uid, generation,
		idem_key, attempt, diff, started_at, finished_at, outcome, failed, error, next_retry_at, writes, actor, runner, rerun_of, reason, input, trace)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// finishRunSQL replaces no later end, nor the same one (supersedes).
	finishRunSQL = `UPDATE runs SET finished_at = ?1, outcome = ?2, failed = ?3, error = ?4, next_retry_at = ?5, writes = ?6,
		runner = coalesce(nullif(?7, ''), runner), result = ?8 WHERE id = ?9 AND ` + supersedesSQL
	// supersedesSQL holds for an end (finished_at ?1) that may replace
	// the run's recorded one: none is, or an earlier one, or one another
	// engine's start wrote for the run it found Running (Cancelled).
	supersedesSQL = `(finished_at = 0 OR finished_at < ?1 OR outcome = 'Cancelled' AND finished_at <> ?1)`
	finishedAtSQL = `SELECT finished_at FROM runs WHERE id = ?`
	rerunsSQL     = `SELECT id FROM runs WHERE rerun_of = ? AND rerun_of != '' ORDER BY id`
	setRunnerSQL  = `UPDATE runs SET runner = ? WHERE id = ?`
	logHeadSQL    = `SELECT log_bytes, log_truncated FROM runs WHERE id = ?`
	logInsertSQL  = `INSERT INTO logs (run_id, pos, data) VALUES (?, ?, ?)`
	logSizeSQL    = `UPDATE runs SET log_bytes = ?, log_truncated = ? WHERE id = ?`
	// EXISTS stops at the first: a key may have many runs. The outcome is
	// literal, as runs_succeeded's condition is.
	keySucceededSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE idem_key = ? AND outcome = 'Succeeded')`
	// keySucceededRunSQL is the latest: ids sort by time.
	keySucceededRunSQL = `SELECT id FROM runs WHERE idem_key = ? AND outcome = 'Succeeded' ORDER BY id DESC LIMIT 1`
)

// cancelRunningSQL is CancelRunning's statement, made once at start-up.
// The outcome is literal, as runs_running's condition is.
const cancelRunningSQL = `UPDATE runs SET outcome = ?, failed = 0, error = ?, finished_at = ? WHERE outcome = 'Running'`

func (s *SQLite) migrate(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this opkit knows (%d); use a newer opkit", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return err
	}
	return tx.Commit()
}

// Close stops the file's checks and closes the database.
func (s *SQLite) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
		<-s.stopped
	}
	// A file deleted since the last check is copied back first.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = s.Check(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.closeHandles()
	s.w, s.db, s.lost = nil, nil, errClosed
	return err
}

func (s *SQLite) closeHandles() error {
	var errs []error
	for _, stmt := range []*sql.Stmt{s.insert, s.finish, s.logHead, s.logInsert, s.logSize, s.putState, s.putLater, s.succeeded, s.succeededRun} {
		if stmt != nil {
			errs = append(errs, stmt.Close())
		}
	}
	for _, db := range []*sql.DB{s.db, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Insert records a new run.
func (s *SQLite) Insert(ctx context.Context, r *Run) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.lost != nil {
		return fmt.Errorf("archive: recording run %s: %w", r.ID, s.lost)
	}
	if !ValidID(r.ID) {
		return fmt.Errorf("archive: run id %q is not one of NewID", r.ID)
	}
	if r.Outcome == "" {
		r.Outcome = Running
	}
	put, err := s.recordWith(r)
	if err != nil {
		return fmt.Errorf("archive: recording run %s: %w", r.ID, err)
	}
	diff, writes := marshal(keptDiff(r.Diff)), marshal(r.Writes)
	err = s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, s.insert).ExecContext(ctx, r.ID, r.Operator, r.Handler, r.Action, r.Trigger, r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID, r.Generation,
			r.Key, r.Attempt, diff, nanos(r.StartedAt), nanos(r.FinishedAt), string(r.Outcome), r.Outcome.Failure(), r.Error,
			nanos(r.NextRetryAt), writes, r.Actor, r.Runner, r.RerunOf, r.Reason, string(r.Input), r.Trace)
		if err != nil {
			return err
		}
		return put(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("archive: recording run %s: %w", r.ID, err)
	}
	return nil
}

// Finish records how a run ended.
func (s *SQLite) Finish(ctx context.Context, r *Run) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	put, err := s.recordWith(r)
	if err != nil {
		return fmt.Errorf("archive: finishing run %s: %w", r.ID, err)
	}
	writes := marshal(r.Writes)
	return s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		if err := put(ctx, tx); err != nil {
			return err
		}
		res, err := tx.StmtContext(ctx, s.finish).ExecContext(ctx, nanos(r.FinishedAt), string(r.Outcome), r.Outcome.Failure(), r.Error, nanos(r.NextRetryAt), writes, r.Runner, string(r.Result), r.ID)
		if err != nil {
			return fmt.Errorf("archive: finishing run %s: %w", r.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var recorded int64
			if err := tx.QueryRowContext(ctx, finishedAtSQL, r.ID).Scan(&recorded); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("archive: finishing run %s: %w", r.ID, ErrNotFound)
				}
				return fmt.Errorf("archive: finishing run %s: %w", r.ID, err)
			}
			if recorded == nanos(r.FinishedAt) {
				return nil // this end, recorded already
			}
			// A later end is recorded: this one's log lines are kept.
		} else if r.Outcome == Skipped {
			// Through runs_uid; the logs go with their runs (ON DELETE CASCADE).
			if _, err := tx.ExecContext(ctx, foldSkippedSQL, r.UID, r.Handler, r.ID); err != nil {
				return fmt.Errorf("archive: folding the skipped runs before %s: %w", r.ID, err)
			}
		}
		if len(r.LogTail) > 0 {
			return s.appendLog(ctx, tx, r.ID, r.LogTail)
		}
		return nil
	})
}

// recordWith is the write of r.Record in a run's transaction (nothing
// without one), or why the record cannot be stored.
func (s *SQLite) recordWith(r *Run) (func(ctx context.Context, tx *sql.Tx) error, error) {
	st := r.Record
	if st == nil {
		return func(context.Context, *sql.Tx) error { return nil }, nil
	}
	updated, data, err := prepareState(st)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.StmtContext(ctx, s.putLater).ExecContext(ctx, st.Operator, st.Key, st.APIVersion, st.Kind, st.Namespace, st.Name, data, updated.UnixNano()); err != nil {
			return fmt.Errorf("recording state %s of operator %s: %w", st.Key, st.Operator, err)
		}
		return nil
	}, nil
}

// SetRunner records the runner that claimed a running run.
func (s *SQLite) SetRunner(ctx context.Context, id, runner string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	return s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, setRunnerSQL, runner, id)
		if err != nil {
			return fmt.Errorf("archive: recording the runner of run %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("archive: recording the runner of run %s: %w", id, ErrNotFound)
		}
		return nil
	})
}

// foldSkippedSQL deletes an object's earlier skipped runs of a handler.
const foldSkippedSQL = `DELETE FROM runs WHERE uid = ? AND handler = ? AND outcome = 'Skipped' AND id < ?`

// Get returns one run.
func (s *SQLite) Get(ctx context.Context, id string) (*Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+runDetailColumns+` FROM runs WHERE id = ?`, id), true)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: run %s: %w", id, err)
	}
	if r.Reruns, err = s.ids(ctx, rerunsSQL, id); err != nil {
		return nil, fmt.Errorf("archive: re-runs of run %s: %w", id, err)
	}
	return r, nil
}

// CancelRunning ends every Running run as Cancelled.
func (s *SQLite) CancelRunning(ctx context.Context, reason string) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return 0, s.lost
	}
	res, err := s.w.ExecContext(ctx, cancelRunningSQL, string(Cancelled), reason, time.Now().UnixNano())
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// Prune deletes finished runs beyond the retention, and deliveries that
// are not Pending, counted apart.
func (s *SQLite) Prune(ctx context.Context, keep Retention) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return 0, s.lost
	}
	var total int64
	if keep.MaxAge > 0 {
		res, err := s.w.ExecContext(ctx, `DELETE FROM runs WHERE id < ? AND outcome != ?`, idPrefix(time.Now().Add(-keep.MaxAge)), string(Running))
		if err != nil {
			return 0, fmt.Errorf("archive: pruning: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	if keep.MaxRuns > 0 {
		res, err := s.w.ExecContext(ctx, `DELETE FROM runs WHERE outcome != ? AND id < (
			SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?)`, string(Running), keep.MaxRuns-1)
		if err != nil {
			return 0, fmt.Errorf("archive: pruning: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	n, err := s.pruneDeliveries(ctx, keep)
	return int(total + n), err
}
