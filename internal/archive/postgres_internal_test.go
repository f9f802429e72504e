package archive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// TestPendingDeliveriesCommitDurablyWhateverTheDatabaseSays: the
// statement RecordDelivery runs before a Pending delivery's insert turns
// synchronous_commit on where the database has it off (the test server
// does), and leaves the settings that flush the commit's WAL already.
func TestPendingDeliveriesCommitDurablyWhateverTheDatabaseSays(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	for _, c := range []struct{ session, want string }{
		{"", "on"}, // the server's: off
		{"off", "on"},
		{"local", "local"},
		{"remote_write", "remote_write"},
		{"remote_apply", "remote_apply"},
	} {
		var got string
		err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
			if c.session != "" {
				if _, err := tx.Exec(t.Context(), `SELECT set_config('synchronous_commit', $1, true)`, c.session); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(t.Context(), pgDurableCommitSQL); err != nil {
				return err
			}
			return tx.QueryRow(t.Context(), `SELECT current_setting('synchronous_commit')`).Scan(&got)
		})
		if err != nil || got != c.want {
			t.Errorf("synchronous_commit %q: %q in the delivery's transaction (%v), want %q", c.session, got, err, c.want)
		}
	}
}

// TestPostgresQueriesUseTheirIndexes checks, with PostgreSQL's own
// plans over an analysed table of 50,000 runs (on an empty one the
// planner reads the table whatever the indexes), that a list of one
// object's runs searches an index instead of reading the runs newest
// first until the page is full: in one namespace runs_object, in every
// namespace runs_name.
func TestPostgresQueriesUseTheirIndexes(t *testing.T) {
	dsn := pgtest.DSN(t)
	p, err := OpenPostgres(t.Context(), dsn, Options{Log: func(line string) { t.Log(line) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(t.Context()) }()
	if _, err := conn.Exec(t.Context(), `INSERT INTO runs (id, operator, handler, action, trigger_name, api_version, kind, namespace, name, uid,
		generation, idem_key, attempt, diff, started_at, finished_at, outcome, failed, error, next_retry_at, writes)
		SELECT lpad(i::text, 26, '0'), 'op', 'h', 'exec', 'update', 'v1', 'Printer', 'ns-' || (i % 10), 'obj-' || (i % 2000), 'uid-' || (i % 2000),
		0, 'k' || i, 1, '', i, i, 'Succeeded', 0, '', 0, '' FROM generate_series(1, 50000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		index string
		q     Query
	}{
		{"object", "runs_object", Query{Namespace: "ns-3", Name: "obj-1233"}},
		// The runs API's kubectl get runs -A -l opkit.dev/object=obj-1233.
		{"object in every namespace", "runs_name", Query{Name: "obj-1233"}},
		{"object of an operator in every namespace", "runs_name", Query{Operator: "op", Name: "obj-1233"}},
		{"uid", "runs_uid", Query{UID: "uid-1233"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			where, args, limit, err := c.q.sql()
			if err != nil {
				t.Fatal(err)
			}
			rows, err := conn.Query(t.Context(), `EXPLAIN `+numbered(listSQL(where)), append(args, limit+1)...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, strings.TrimSpace(line))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(plan, "; "); !strings.Contains(got, " on "+c.index) {
				t.Errorf("plan %q does not use %s", got, c.index)
			}
		})
	}
}

// TestASkippedEndWrittenAgainFoldsTheEarlierSkippedRuns: an end whose
// update committed while its fold of the earlier Skipped runs did not
// (the fold failed, or the connection broke before it) is written again
// by the engine's archive writer; the same end then changes nothing of
// the run, and folds.
func TestASkippedEndWrittenAgainFoldsTheEarlierSkippedRuns(t *testing.T) {
	ctx := t.Context()
	p, err := OpenPostgres(ctx, pgtest.DSN(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	at := time.Now().UTC().Truncate(time.Microsecond)
	run := func(i int) *Run {
		r := &Run{ID: NewID(at.Add(time.Duration(i) * time.Second)), Operator: "op", Handler: "h", Action: "exec", Trigger: "update",
			APIVersion: "example.com/v1", Kind: "K", Namespace: "ns", Name: "n", UID: "uid-fold", StartedAt: at.Add(time.Duration(i) * time.Second)}
		if err := p.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Outcome, r.FinishedAt = Skipped, r.StartedAt.Add(time.Millisecond)
		return r
	}
	first, second := run(0), run(1)
	if err := p.Finish(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The second's update, committed alone, as if its fold never ran.
	if _, err := p.pool.Exec(ctx, `UPDATE runs SET finished_at = $1, outcome = 'Skipped' WHERE id = $2`, nanos(second.FinishedAt), second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, first.ID); err != nil {
		t.Fatalf("the first Skipped run before the end is written again: %v", err)
	}
	if err := p.Finish(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, first.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the first Skipped run after the second's end was written again: %v, want it folded (ErrNotFound)", err)
	}
	if got, err := p.Get(ctx, second.ID); err != nil || got.Outcome != Skipped {
		t.Errorf("the second run: %+v, %v; want Skipped", got, err)
	}
}
