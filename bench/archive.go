package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" driver, the archive's own

	"github.com/opkit-dev/opkit/bench/baseline"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/runsapi"
)

// The archive and console scenarios run on each store of -archive-stores:
// the same runs, filled the same way, measured the same way. A
// controller-runtime operator keeps no run archive: no baseline applies.

// store is a kind of archive the archive and console scenarios run on, as
// -archive-stores names it.
type store string

const (
	sqliteStore   store = "sqlite"
	postgresStore store = "postgres"
)

var allStores = []store{sqliteStore, postgresStore}

// title is the store's name in the tables.
func (s store) title() string {
	if s == postgresStore {
		return "PostgreSQL"
	}
	return "SQLite"
}

// filled is an archive of the archive and console scenarios.
type filled struct {
	store archive.Store
	// seq counts the runs it has had: run i starts i seconds after
	// runBase, so that each archive holds the same runs.
	seq int
}

type archiveKey struct {
	store store
	n     int
}

// archiveScale: runs recorded as the engine records them (Insert while
// running, Finish at the end) into an archive that already holds n runs,
// then the two queries the console and opkit runs make most, then the
// retention that brings the archive back to n runs (Prune by count: the
// batch's worth of the oldest runs). The batch is -archive-batch. The archive is filled once, at the
// first run.
func (b *bench) archiveScale(ctx context.Context, st store, n int) error {
	a, err := b.filledArchive(ctx, st, n)
	if err != nil {
		return err
	}
	s, batch := a.store, b.opts.ArchiveBatch
	start := time.Now()
	for range batch {
		r := b.nextRun(a, archive.Running)
		if err := s.Insert(ctx, r); err != nil {
			return err
		}
		r.Outcome, r.FinishedAt = archive.Succeeded, r.StartedAt.Add(time.Second)
		if a.seq%20 == 0 {
			r.Outcome, r.Error = archive.Failed, "exit status 1"
		}
		if err := s.Finish(ctx, r); err != nil {
			return err
		}
	}
	subject := sizeLabel(n) + " runs"
	b.addFor(st, "archive", subject, "runs recorded/s", "/s", float64(batch)/time.Since(start).Seconds())
	for _, q := range []struct {
		name string
		q    archive.Query
	}{
		{"one object's runs p99", archive.Query{Namespace: b.c.ns, Name: "obj-1234"}},
		{"latest failures p99", archive.Query{Failed: true}},
	} {
		var lat []time.Duration
		for range 500 {
			t0 := time.Now()
			page, err := s.List(ctx, q.q)
			if err != nil {
				return fmt.Errorf("query %s: %w", q.name, err)
			}
			if len(page.Runs) == 0 {
				return fmt.Errorf("query %s: no runs", q.name)
			}
			lat = append(lat, time.Since(t0))
		}
		b.addFor(st, "archive", subject, q.name, "ms", percentile(lat, 99))
	}
	if err := b.runsAPIList(ctx, st, s, subject); err != nil {
		return err
	}
	t0 := time.Now()
	pruned, err := s.Prune(ctx, archive.Retention{MaxRuns: n})
	if err != nil {
		return err
	}
	if pruned != batch {
		return fmt.Errorf("prune to %d runs deleted %d, want the %d recorded since", n, pruned, batch)
	}
	b.addFor(st, "archive", subject, fmt.Sprintf("prune %s oldest", sizeLabel(batch)), "ms", float64(time.Since(t0).Microseconds())/1000)
	return nil
}

// runsAPIObjectQueries are the lists of runsAPIList: one object's runs
// (kubectl get runs -l opkit.dev/object=NAME) in every namespace and in
// its own, with the metric each gives.
var runsAPIObjectQueries = []struct{ metric, path string }{
	{"runs API one object, all namespaces", "/apis/runs.opkit.dev/v1alpha1/runs"},
	{"runs API one object, one namespace", "/apis/runs.opkit.dev/v1alpha1/namespaces/%s/runs"},
}

// runsAPIList lists one object's runs through the runs API's handler
// (package runsapi, in process: no API server, no TLS), as kubectl get
// runs asks: a Table, a page of 500 (kubectl's --chunk-size), with the
// label selector opkit.dev/object. The object has a run in 2000 (500 at
// 1M runs): every list is a full page. p50 and p99 of 200 lists each.
func (b *bench) runsAPIList(ctx context.Context, st store, s archive.Reader, subject string) error {
	h, err := runsapi.New(runsapi.Options{
		Archive: s, Namespace: "opkit-system", // not the runs': their namespace's list is one query
		Authenticator: runsapi.AuthenticatorFunc(func(*http.Request) (*runsapi.User, bool, error) {
			return &runsapi.User{Name: "bench"}, true, nil
		}),
		Authorizer: runsapi.AuthorizerFunc(func(context.Context, runsapi.Attributes) (bool, string, error) { return true, "", nil }),
	})
	if err != nil {
		return err
	}
	for _, q := range runsAPIObjectQueries {
		path := q.path
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, b.c.ns)
		}
		path += "?limit=500&labelSelector=" + url.QueryEscape("opkit.dev/object=obj-1234")
		var lat []time.Duration
		var body string
		for range 200 {
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
			req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(t0))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("%s: %s: %d %s", q.metric, path, rec.Code, rec.Body)
			}
			body = rec.Body.String()
		}
		// An empty table would time nothing: the object has runs.
		if !strings.Contains(body, `"kind":"Table"`) || !strings.Contains(body, `"obj-1234"`) {
			return fmt.Errorf("%s: %s answers no Table of obj-1234's runs: %.300s", q.metric, path, body)
		}
		b.addLatencies(st, "archive", subject, q.metric, lat, 50, 99)
	}
	return nil
}

// filledArchive returns the archive of store st and size n, filling a new
// one with finished runs (one object in 2000, one run in 20 failed) on
// first use. The fill writes straight into the store's tables, many runs
// to a statement or transaction (a loader), after checking on a sample
// that it writes a run's row as the engine's Insert and Finish do.
func (b *bench) filledArchive(ctx context.Context, st store, n int) (*filled, error) {
	key := archiveKey{st, n}
	if a := b.archives[key]; a != nil {
		return a, nil
	}
	location, err := b.newArchive(ctx, st, n)
	if err != nil {
		return nil, err
	}
	s, err := archive.Open(ctx, location, archive.Options{})
	if err != nil {
		return nil, err
	}
	a := &filled{store: s}
	b.archives[key] = a
	l, err := openLoader(ctx, st, location)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if err := sameRows(ctx, s, l, b.sampleRun()); err != nil {
		return nil, fmt.Errorf("the %s archive's fill: %w", st.title(), err)
	}
	start := time.Now()
	if err := l.load(ctx, n, func() *archive.Run { return b.nextRun(a, archive.Succeeded) }); err != nil {
		return nil, fmt.Errorf("filling the %s archive: %w", st.title(), err)
	}
	fill := time.Since(start)
	start = time.Now()
	if err := l.settle(ctx); err != nil {
		return nil, fmt.Errorf("the %s archive, once filled: %w", st.title(), err)
	}
	settle := time.Since(start)
	size, err := l.size(ctx)
	if err != nil {
		return nil, fmt.Errorf("the %s archive's size: %w", st.title(), err)
	}
	fmt.Fprintf(b.log, "  %s archive: %d runs filled in %s, then %s in %s; %s\n",
		st.title(), n, fill.Round(100*time.Millisecond), l.settling(), settle.Round(100*time.Millisecond), archive.HumanBytes(size))
	subject := sizeLabel(n) + " runs"
	b.addFor(st, "archive", subject, "bulk fill", "runs/s", float64(n)/fill.Seconds())
	b.addFor(st, "archive", subject, "size on disk", "MiB", float64(size)/(1<<20))
	return a, nil
}

// newArchive returns the location of a new, empty archive of store st: a
// file in the work directory, or a new database of the bench's
// PostgreSQL server.
func (b *bench) newArchive(ctx context.Context, st store, n int) (string, error) {
	if st == sqliteStore {
		return tempArchive(b.workDir), nil
	}
	srv, err := b.postgres(ctx)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("bench_%d", n)
	if err := srv.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+name, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return srv.DSN(name), nil
}

// postgres returns the bench's PostgreSQL server, starting it on first
// use: a throwaway one (pgtest) in a temporary directory, on a Unix
// socket, closed when the bench ends (closeArchives).
func (b *bench) postgres(ctx context.Context) (*pgtest.Server, error) {
	if b.pg != nil {
		return b.pg, nil
	}
	fmt.Fprintln(b.log, "  starting a PostgreSQL server for the archive")
	srv, err := pgtest.Start()
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL: %w (-archive-stores sqlite runs without it)", err)
	}
	b.pg = srv
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var version, shared, syncCommit string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('shared_buffers'), current_setting('synchronous_commit')`).
		Scan(&version, &shared, &syncCommit)
	if err != nil {
		return nil, err
	}
	b.note(fmt.Sprintf("archive, console: PostgreSQL %s started by the bench (pgtest: a temporary directory, a Unix socket, shared_buffers %s, synchronous_commit %s, fsync on), on this machine; SQLite in WAL mode, synchronous NORMAL: neither store flushes to disk at each commit",
		version, shared, syncCommit))
	return srv, nil
}

// closeArchives closes the scenarios' archives, then the PostgreSQL
// server.
func (b *bench) closeArchives() {
	for _, a := range b.archives {
		_ = a.store.Close()
	}
	if b.pg != nil {
		if err := b.pg.Close(); err != nil {
			fmt.Fprintln(b.log, "bench: closing PostgreSQL:", err)
		}
	}
}

// nextRun returns the archive's next run, one second after its last: each
// of 2000 objects gets a run in turn; one in 20 finished ones failed.
func (b *bench) nextRun(a *filled, outcome archive.Outcome) *archive.Run {
	a.seq++
	r := b.runAt(a.seq, archive.Running)
	if outcome != archive.Running {
		r.Outcome, r.FinishedAt = outcome, r.StartedAt.Add(time.Second)
		if a.seq%20 == 0 {
			r.Outcome, r.Error = archive.Failed, "exit status 1"
		}
	}
	return r
}

// runAt returns the i-th run of an archive, still running.
func (b *bench) runAt(i int, outcome archive.Outcome) *archive.Run {
	at := b.runBase.Add(time.Duration(i) * time.Second)
	return &archive.Run{
		ID: archive.NewID(at), Operator: operatorName, Handler: "announce", Action: "exec", Trigger: "update",
		APIVersion: baseline.GroupVersion.String(), Kind: "Printer", Namespace: b.c.ns, Name: fmt.Sprintf("obj-%d", i%2000), UID: fmt.Sprintf("uid-%d", i%2000),
		Generation: int64(i / 2000), Attempt: 1, StartedAt: at, Outcome: outcome,
		Key: fmt.Sprintf("uid-%d/%d/announce", i%2000, i/2000),
	}
}

// sampleRun is a finished run with every field the engine may set, for
// sameRows.
func (b *bench) sampleRun() *archive.Run {
	r := b.runAt(0, archive.Failed)
	r.Attempt, r.FinishedAt, r.Error = 2, r.StartedAt.Add(1500*time.Millisecond), "exit status 1"
	r.NextRetryAt = r.FinishedAt.Add(30 * time.Second)
	r.Diff = []archive.Change{{Op: "change", Path: "spec.text", Old: "hello", New: "hello, world"}}
	r.Writes = []string{"status", "event Warning HandlerFailed"}
	return r
}

// sameRows checks that the loader writes a run's row as the engine does
// through the store: the sample recorded by the store's Insert (running)
// and Finish, and by the loader, under two ids; every column but the id
// compared; both removed.
func sameRows(ctx context.Context, s archive.Recorder, l loader, sample *archive.Run) error {
	viaStore, viaLoader := *sample, *sample
	viaStore.ID, viaLoader.ID = archive.NewID(sample.StartedAt), archive.NewID(sample.StartedAt)
	started := viaStore
	started.Outcome, started.FinishedAt, started.Error, started.NextRetryAt, started.Writes = archive.Running, time.Time{}, "", time.Time{}, nil
	if err := s.Insert(ctx, &started); err != nil {
		return err
	}
	if err := s.Finish(ctx, &viaStore); err != nil {
		return err
	}
	if err := l.load(ctx, 1, func() *archive.Run { return &viaLoader }); err != nil {
		return err
	}
	want, err := l.row(ctx, viaStore.ID)
	if err != nil {
		return err
	}
	got, err := l.row(ctx, viaLoader.ID)
	if err != nil {
		return err
	}
	var diffs []string
	for col, w := range want {
		if g := got[col]; col != "id" && !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s %#v where the store writes %#v", col, g, w))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		return fmt.Errorf("the bulk fill writes a run unlike the store (bench/archive.go, runValues): %s", strings.Join(diffs, "; "))
	}
	return l.remove(ctx, viaStore.ID, viaLoader.ID)
}

// loader writes runs straight into an archive's tables, many to a
// transaction (SQLite) or a COPY (PostgreSQL), for the scenarios' fill;
// one Insert per run, one transaction each, would take most of the
// scenario at 1M runs. It writes the columns the store's Insert writes
// (runColumns), from the same fields: sameRows checks it on a sample
// before each fill.
type loader interface {
	// load writes n runs, next() each.
	load(ctx context.Context, n int, next func() *archive.Run) error
	// row returns a run's row, by column.
	row(ctx context.Context, id string) (map[string]any, error)
	// remove deletes runs.
	remove(ctx context.Context, ids ...string) error
	// settle does what a store filled at once needs before it is read
	// as a long-lived one would be: SQLite's WAL checkpointed,
	// PostgreSQL's new table vacuumed and analysed, as autovacuum would.
	settle(ctx context.Context) error
	// settling names what settle does.
	settling() string
	// size is the archive's size on disk in bytes: its file, or its
	// tables with their indexes.
	size(ctx context.Context) (int64, error)
	close()
}

// loadBatch is the runs a loader writes per transaction.
const loadBatch = 50_000

// runColumns are the columns of the runs table that the stores' Insert
// writes, in the order of runValues; the others (log_bytes,
// log_truncated) keep their defaults, as on Insert.
var runColumns = []string{"id", "operator", "handler", "action", "trigger_name", "api_version", "kind", "namespace", "name", "uid", "generation",
	"idem_key", "attempt", "diff", "started_at", "finished_at", "outcome", "failed", "error", "next_retry_at", "writes"}

// runValues are a run's values for runColumns, encoded as the stores
// encode them: times in nanoseconds since the epoch (0 for none), the
// diff and the writes as JSON ("" for none), failed 1 or 0.
func runValues(r *archive.Run) []any {
	var failed int16
	if r.Outcome.Failure() {
		failed = 1
	}
	return []any{r.ID, r.Operator, r.Handler, r.Action, r.Trigger, r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID, r.Generation,
		r.Key, r.Attempt, jsonColumn(r.Diff), nanos(r.StartedAt), nanos(r.FinishedAt), string(r.Outcome), failed, r.Error, nanos(r.NextRetryAt),
		jsonColumn(r.Writes)}
}

func jsonColumn[T any](v []T) string {
	if v == nil {
		return ""
	}
	data, _ := json.Marshal(v)
	return string(data)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func openLoader(ctx context.Context, st store, location string) (loader, error) {
	if st == postgresStore {
		conn, err := pgx.Connect(ctx, location)
		if err != nil {
			return nil, err
		}
		return &pgLoader{conn: conn}, nil
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+location+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return &sqliteLoader{db: db, path: location}, nil
}

// sqliteLoader loads a SQLite archive through a connection of its own
// beside the store's (WAL lets it), a prepared insert per row and a
// transaction per loadBatch rows.
type sqliteLoader struct {
	db   *sql.DB
	path string
}

func (l *sqliteLoader) load(ctx context.Context, n int, next func() *archive.Run) error {
	insert := "INSERT INTO runs (" + strings.Join(runColumns, ", ") + ") VALUES (?" + strings.Repeat(", ?", len(runColumns)-1) + ")"
	for done := 0; done < n; done += loadBatch {
		err := func() error {
			tx, err := l.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			stmt, err := tx.PrepareContext(ctx, insert)
			if err != nil {
				return err
			}
			defer func() { _ = stmt.Close() }()
			for range min(loadBatch, n-done) {
				if _, err := stmt.ExecContext(ctx, runValues(next())...); err != nil {
					return err
				}
			}
			return tx.Commit()
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *sqliteLoader) row(ctx context.Context, id string) (map[string]any, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT * FROM runs WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, errors.Join(fmt.Errorf("run %s: not found", id), rows.Err())
	}
	values := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range values {
		ptrs[i] = &values[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make(map[string]any, len(cols))
	for i, c := range cols {
		out[c] = values[i]
	}
	return out, nil
}

func (l *sqliteLoader) remove(ctx context.Context, ids ...string) error {
	for _, id := range ids {
		if _, err := l.db.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return nil
}

func (l *sqliteLoader) settle(ctx context.Context) error {
	var busy, frames, done int
	return l.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done)
}

func (l *sqliteLoader) settling() string { return "the WAL checkpointed" }

// size is the database file's, and its WAL's if the checkpoint could not
// empty it.
func (l *sqliteLoader) size(context.Context) (int64, error) {
	fi, err := os.Stat(l.path)
	if err != nil {
		return 0, err
	}
	n := fi.Size()
	if wal, err := os.Stat(l.path + "-wal"); err == nil {
		n += wal.Size()
	}
	return n, nil
}

func (l *sqliteLoader) close() { _ = l.db.Close() }
