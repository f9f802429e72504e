package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is the Store of an archive kept in a PostgreSQL database: for an
// archive that must outlive the engine's machine, or be shared by several
// engines (a leader and its standby), the console and the CLI. It passes
// the same conformance suite as SQLite; what differs:
//
// Driver. pgx's own pool (pgxpool), not database/sql over pgx's stdlib
// driver: each connection prepares and caches every statement it runs
// (what SQLite's store does by hand with *sql.Stmt), bytea and bigint
// columns scan straight into []byte and int64, the server's errors come
// typed (a unique violation, a connection lost), and a connection the
// server dropped (a restart) is found by a ping before it is handed out
// again and replaced. database/sql would add a second pool around pgx's
// connections and hide those errors behind driver.ErrBadConn.
//
// Schema. The tables and indexes of SQLite's store, in the first schema of
// the connection's search_path: give opkit a database, or a schema
// (search_path=opkit in the DSN), of its own. Every text column is
// COLLATE "C", so that ids sort by their bytes (their time) and state
// records by key in byte order, as the contract says, whatever the
// database's default collation. Times are bigint nanoseconds since the
// epoch, as in SQLite: timestamptz keeps microseconds, and the archive
// returns the times it was given. failed is a smallint 0 or 1, as in
// SQLite, so that both stores share Query's conditions.
//
// Migrations. Versioned: the schema_migrations table has a row per
// migration applied. An engine that starts reads the version without a
// lock (so that a role that may only read, the console's, opens an archive
// that is up to date); if it is behind, it takes a transaction-scoped
// advisory lock, reads the version again, and applies what is missing in
// the same transaction: engines that start at once against one database
// migrate it once, one after the other, and a failed migration leaves
// nothing half done (PostgreSQL's DDL is transactional).
//
// Durability. A transaction is durable when its commit returns as long as
// synchronous_commit is on (PostgreSQL's default: the commit waits for
// its WAL to be flushed) and the server runs with fsync on. A Pending
// delivery must be durable when RecordDelivery returns, whatever the
// database's default: its transaction sets synchronous_commit on for
// itself when the session's is off. Runs and handler records are written
// with the server's setting. A server with fsync off is reported once, at
// open, through Options.Log.
//
// Several writers. Nothing assumes one writer: run and delivery ids are
// time and randomness (NewID), every write is one statement or one
// transaction, a replayed delivery is refused by the unique index
// deliveries_accepted under any concurrency (INSERT ... ON CONFLICT DO
// NOTHING), AppendLog locks its run's row (SELECT ... FOR UPDATE) for its
// read-modify-write of the log, and Prune runs under a transaction-scoped
// advisory lock: an engine that finds another pruning returns 0 and
// leaves it to it. CancelRunning, though, ends every Running run, those
// of other engines too: with engines sharing a database, only the one
// that leads may call it.
//
// Health. While the server cannot be reached every call fails with an
// error that wraps ErrUnavailable and names the database (its password
// redacted), and the store needs no reopening: the pool dials again on the
// next call. Every Options.CheckEvery a ping checks the server, and each
// change (unreachable, reachable again) is reported once through
// Options.Log. [Postgres.Check] is that ping.
type Postgres struct {
	pool *pgxpool.Pool
	opts Options
	// where is the DSN with its password redacted, for messages.
	where string

	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

var _ Store = &Postgres{}

// ErrUnavailable is wrapped by the errors of a store that cannot reach its
// database server (it is down, restarting, or out of reach).
var ErrUnavailable = errors.New("archive unavailable")

// defaultConnectTimeout bounds a connection attempt when the DSN sets no
// connect_timeout: a server out of reach fails calls in seconds rather
// than at the operating system's TCP timeout.
const defaultConnectTimeout = 10 * time.Second

// Advisory lock keys ("opkit" and a number), in the database of the
// archive: one serialises migrations, the other prunes.
const (
	migrateLockKey int64 = 0x6f706b6974_01
	pruneLockKey   int64 = 0x6f706b6974_02
)

// pgMigrations are applied in order, each once, in one transaction with
// its row in schema_migrations (version i+1 for pgMigrations[i]). Append,
// never edit.
var pgMigrations = []string{
	// The schema of SQLite's store at its fourth migration: runs and their
	// logs, handler records, webhook deliveries; the same indexes, each for
	// the query sqlite.go and sqlite_deliveries.go say it is for.
	// PostgreSQL uses a partial index where the query's condition implies
	// the index's, as SQLite does: the statements write those outcomes as
	// literals.
	`CREATE TABLE runs (
		id            text COLLATE "C" PRIMARY KEY,
		operator      text COLLATE "C" NOT NULL,
		handler       text COLLATE "C" NOT NULL,
		action        text COLLATE "C" NOT NULL,
		trigger_name  text COLLATE "C" NOT NULL,
		api_version   text COLLATE "C" NOT NULL,
		kind          text COLLATE "C" NOT NULL,
		namespace     text COLLATE "C" NOT NULL,
		name          text COLLATE "C" NOT NULL,
		uid           text COLLATE "C" NOT NULL,
		generation    bigint NOT NULL,
		idem_key      text COLLATE "C" NOT NULL,
		attempt       integer NOT NULL,
		diff          text COLLATE "C" NOT NULL,
		started_at    bigint NOT NULL,
		finished_at   bigint NOT NULL,
		outcome       text COLLATE "C" NOT NULL,
		failed        smallint NOT NULL,
		error         text COLLATE "C" NOT NULL,
		next_retry_at bigint NOT NULL,
		writes        text COLLATE "C" NOT NULL,
		log_bytes     bigint NOT NULL DEFAULT 0,
		log_truncated boolean NOT NULL DEFAULT false
	);
	CREATE INDEX runs_operator ON runs (operator, id);
	CREATE INDEX runs_object ON runs (namespace, name, id);
	CREATE INDEX runs_uid ON runs (uid, id);
	CREATE INDEX runs_failed ON runs (id) WHERE failed = 1;
	CREATE INDEX runs_running ON runs (id) WHERE outcome = 'Running';
	CREATE INDEX runs_succeeded ON runs (idem_key) WHERE outcome = 'Succeeded';
	CREATE TABLE logs (
		run_id text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
		pos    bigint NOT NULL,
		data   bytea NOT NULL,
		PRIMARY KEY (run_id, pos)
	);
	CREATE TABLE states (
		operator    text COLLATE "C" NOT NULL,
		state_key   text COLLATE "C" NOT NULL,
		api_version text COLLATE "C" NOT NULL,
		kind        text COLLATE "C" NOT NULL,
		namespace   text COLLATE "C" NOT NULL,
		name        text COLLATE "C" NOT NULL,
		data        bytea NOT NULL,
		updated_at  bigint NOT NULL,
		PRIMARY KEY (operator, state_key)
	);
	CREATE TABLE deliveries (
		id                text COLLATE "C" PRIMARY KEY,
		operator          text COLLATE "C" NOT NULL,
		source            text COLLATE "C" NOT NULL,
		delivery_id       text COLLATE "C" NOT NULL,
		received_at       bigint NOT NULL,
		outcome           text COLLATE "C" NOT NULL,
		reason            text COLLATE "C" NOT NULL,
		event             text COLLATE "C" NOT NULL,
		runs              text COLLATE "C" NOT NULL,
		objects           text COLLATE "C" NOT NULL,
		handled_at        bigint NOT NULL,
		payload_bytes     bigint NOT NULL,
		payload_truncated boolean NOT NULL,
		headers           text COLLATE "C" NOT NULL,
		payload           bytea NOT NULL
	);
	CREATE UNIQUE INDEX deliveries_accepted ON deliveries (operator, source, delivery_id) WHERE delivery_id <> '' AND outcome <> 'Refused';
	CREATE INDEX deliveries_operator ON deliveries (operator, id);
	CREATE INDEX deliveries_pending ON deliveries (operator, id) WHERE outcome = 'Pending';
	CREATE INDEX deliveries_refused ON deliveries (id) WHERE outcome = 'Refused';`,
	// Run.Actor: the person whose decision caused a state transition
	// (SQLite's fifth migration).
	`ALTER TABLE runs ADD COLUMN actor text COLLATE "C" NOT NULL DEFAULT '';`,
	// Run.Runner: the runner Pod that ran an exec handler with an image
	// (SQLite's sixth migration).
	`ALTER TABLE runs ADD COLUMN runner text COLLATE "C" NOT NULL DEFAULT '';`,
	// rerun37: Run.RerunOf, Run.Reason, Run.Input and Run.Result (SQLite's
	// seventh migration).
	`ALTER TABLE runs ADD COLUMN rerun_of text COLLATE "C" NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN reason text NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN input text NOT NULL DEFAULT '';
	ALTER TABLE runs ADD COLUMN result text NOT NULL DEFAULT '';
	CREATE INDEX runs_rerun_of ON runs (rerun_of) WHERE rerun_of <> '';`,
	// Redeliveries on purpose (SQLite's eighth migration, of the same name:
	// Delivery.RedeliveryOf, RedeliveredBy, RedeliveryReason). A bytea
	// is stored out of line when large, so the payload need not stay the
	// last column here.
	`ALTER TABLE deliveries ADD COLUMN redelivery_of text COLLATE "C" NOT NULL DEFAULT '';
	ALTER TABLE deliveries ADD COLUMN redelivered_by text COLLATE "C" NOT NULL DEFAULT '';
	ALTER TABLE deliveries ADD COLUMN redelivery_reason text COLLATE "C" NOT NULL DEFAULT '';
	DROP INDEX deliveries_accepted;
	CREATE UNIQUE INDEX deliveries_accepted ON deliveries (operator, source, delivery_id) WHERE delivery_id <> '' AND outcome <> 'Refused' AND redelivery_of = '';
	CREATE INDEX deliveries_redeliveries ON deliveries (redelivery_of, id) WHERE redelivery_of <> '';`,
	// deliveries_turned_down: every refusal, by the source's checks and
	// by a handler (SQLite's ninth migration).
	`CREATE INDEX deliveries_turned_down ON deliveries (id) WHERE ` + turnedDown + `;`,
	// runs_name: one object's runs in every namespace, newest first
	// (SQLite's tenth migration, which says why).
	`CREATE INDEX runs_name ON runs (name, id);`,
	// Source cursors (SQLite's eleventh migration).
	`CREATE TABLE source_cursors (
		operator   text COLLATE "C" NOT NULL,
		source     text COLLATE "C" NOT NULL,
		cursor     text COLLATE "C" NOT NULL,
		updated_at bigint NOT NULL,
		PRIMARY KEY (operator, source)
	);`,
	// Run.Trace and Delivery.Trace (SQLite's twelfth migration).
	`ALTER TABLE runs ADD COLUMN trace text NOT NULL DEFAULT '';
	ALTER TABLE deliveries ADD COLUMN trace text NOT NULL DEFAULT '';`,
}

// OpenPostgres opens the archive in the PostgreSQL database dsn names (a
// postgres:// URL or a key=value string, as pgx reads them; pool_max_conns
// sizes the pool) and brings its schema up to date. It fails if the server
// cannot be reached. Its errors and Options.Log lines never show the
// DSN's password.
func OpenPostgres(ctx context.Context, dsn string, opts Options) (*Postgres, error) {
	opts = opts.withDefaults()
	where := RedactDSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx redacts what it can of the DSN it quotes; scrub the rest.
		return nil, fmt.Errorf("archive %s: not a PostgreSQL connection string: %s", where, scrubDSN(err.Error(), dsn))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %s", where, scrubDSN(err.Error(), dsn))
	}
	p := &Postgres{pool: pool, opts: opts, where: where, stop: make(chan struct{}), stopped: make(chan struct{})}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		if unreachable(err) {
			return nil, p.fail("opening", err)
		}
		return nil, fmt.Errorf("archive %s: %w", where, err)
	}
	var fsync string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync')`).Scan(&fsync); err == nil && fsync == "off" {
		opts.Log(fmt.Sprintf("archive %s: the PostgreSQL server runs with fsync off: a crash of its machine can lose what was recorded, acknowledged webhook deliveries included", where))
	}
	go p.watch()
	return p, nil
}

// queryer is what migrations read with: the pool or a transaction.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion is the number of migrations the database has had.
func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var table *string
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migrations')::text`).Scan(&table); err != nil {
		return 0, err
	}
	if table == nil {
		return 0, nil
	}
	var version int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&version)
	return version, err
}

// migrate brings the schema up to date; see Postgres.
func (p *Postgres) migrate(ctx context.Context) error {
	version, err := schemaVersion(ctx, p.pool)
	if err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if err := knownVersion(version); err != nil || version == len(pgMigrations) {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
			return fmt.Errorf("waiting for the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		version, err := schemaVersion(ctx, tx) // another engine may have migrated meanwhile
		if err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if err := knownVersion(version); err != nil {
			return err
		}
		for i := version; i < len(pgMigrations); i++ {
			if _, err := tx.Exec(ctx, pgMigrations[i]); err != nil {
				var pg *pgconn.PgError
				if errors.As(err, &pg) && pg.Code == "42P07" { // duplicate_table
					return fmt.Errorf("migration %d: %w: the database has tables of another application; give opkit a database of its own, or a schema (search_path=SCHEMA in the DSN)", i+1, err)
				}
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, i+1); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		return nil
	})
}

func knownVersion(version int) error {
	if version > len(pgMigrations) {
		return fmt.Errorf("schema version %d is newer than this opkit knows (%d); use a newer opkit", version, len(pgMigrations))
	}
	return nil
}

// Check pings the database server: nil when it answers, else an error
// that wraps ErrUnavailable.
func (p *Postgres) Check(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return p.fail("checking", err)
	}
	return nil
}

// watch runs Check every Options.CheckEvery until Close, and reports each
// change of the server's health once.
func (p *Postgres) watch() {
	defer close(p.stopped)
	stopped, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	go func() {
		<-p.stop
		cancelAll() // Close does not wait for a check of a server out of reach
	}()
	t := time.NewTicker(p.opts.CheckEvery)
	defer t.Stop()
	var down time.Time // when the server stopped answering; zero while it answers
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(stopped, max(p.opts.CheckEvery, defaultConnectTimeout))
		err := p.Check(ctx)
		cancel()
		if stopped.Err() != nil {
			return
		}
		switch {
		case err != nil && down.IsZero():
			down = time.Now()
			p.opts.Log(fmt.Sprintf("%v: runs and deliveries are not recorded until it answers", err))
		case err == nil && !down.IsZero():
			p.opts.Log(fmt.Sprintf("archive: the PostgreSQL archive %s answers again after %s", p.where, time.Since(down).Round(time.Second)))
			down = time.Time{}
		}
	}
}

// Close stops the checks and closes the pool, waiting for the calls in
// flight.
func (p *Postgres) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		<-p.stopped
		p.pool.Close()
	})
	return nil
}

// fail wraps an error of what the store was doing: one of a server out of
// reach names the archive and wraps ErrUnavailable as well.
func (p *Postgres) fail(what string, err error) error {
	if unreachable(err) {
		return &unavailableError{what: what, where: p.where, err: err}
	}
	return fmt.Errorf("archive: %s: %w", what, err)
}

// unavailableError is an error of a server out of reach.
type unavailableError struct {
	what, where string
	err         error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("archive: %s: the PostgreSQL archive %s cannot be reached: %v", e.what, e.where, e.err)
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// unreachable reports whether err says the server cannot be reached, or
// dropped the connection: down, restarting, shutting down, out of reach.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	var pg *pgconn.PgError
	switch {
	case errors.As(err, &connect), errors.As(err, &netErr):
		return true
	case errors.As(err, &pg):
		// Class 08, connection exception; admin_shutdown, crash_shutdown,
		// cannot_connect_now (starting up or shutting down).
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ENOENT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retryable reports whether a statement failed for its concurrency with
// another (a deadlock, a serialization failure), and may be run again.
func retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001")
}

// numbered replaces the ? placeholders of a statement made with where
// (Query.sql, DeliveryQuery.sql), whose conditions hold no other ?, with
// PostgreSQL's $1, $2...
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
