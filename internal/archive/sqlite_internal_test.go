package archive

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// migrated builds an archive file with the statements of an older opkit
// (its migrations, then its rows), opens it with this one's, and checks
// the schema came to this version. It is closed when the test ends.
func migrated(t *testing.T, statements ...string) *SQLite {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "runs.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range statements {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_ = old.Close()
	s, err := OpenSQLite(ctx, path, Options{})
	if err != nil {
		t.Fatalf("migrating: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var version int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil || version != len(migrations) {
		t.Fatalf("schema version %d (%v), want %d", version, err, len(migrations))
	}
	return s
}

// TestSQLiteMigratesAnOldArchive opens an archive from before the partial
// indexes and finds its runs, by key and as failures, through them.
func TestSQLiteMigratesAnOldArchive(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	ok, bad := NewID(now), NewID(now.Add(time.Millisecond))
	s := migrated(t, migrations[0], `PRAGMA user_version = 1`,
		`INSERT INTO runs VALUES ('`+ok+`', 'op', 'h', 'exec', 'create', 'v1', 'K', 'ns', 'a', 'u1', 1, 'u1/1/h', 1, '', 1, 2, 'Succeeded', 0, '', 0, '', 0, 0)`,
		`INSERT INTO runs VALUES ('`+bad+`', 'op', 'h', 'exec', 'create', 'v1', 'K', 'ns', 'b', 'u2', 1, 'u2/1/h', 1, '', 1, 2, 'Failed', 1, 'exit status 1', 0, '', 0, 0)`,
	)
	if found, err := s.Succeeded(ctx, "u1/1/h"); err != nil || !found {
		t.Errorf("Succeeded(u1/1/h) = %v, %v after migrating; want true", found, err)
	}
	if found, _ := s.Succeeded(ctx, "u2/1/h"); found {
		t.Error("a failed run's key counts as succeeded after migrating")
	}
	page, err := s.List(ctx, Query{Failed: true})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != bad {
		t.Errorf("failed runs after migrating: %+v, %v; want only %s", page, err, bad)
	}
}

// TestSQLiteMigratesAnArchiveOfVersion2ToStateRecordsKeepingItsRuns opens
// an archive made by the opkit before handler records (schema version 2),
// built here with that opkit's migrations only, and finds its runs, logs
// and failures as they were, and handler records working beside them.
func TestSQLiteMigratesAnArchiveOfVersion2ToStateRecordsKeepingItsRuns(t *testing.T) {
	ctx := t.Context()
	now := time.Now()
	ok, bad := NewID(now), NewID(now.Add(time.Millisecond))
	s := migrated(t, migrations[0], migrations[1], `PRAGMA user_version = 2`,
		`INSERT INTO runs VALUES ('`+ok+`', 'op', 'h', 'exec', 'create', 'v1', 'K', 'ns', 'a', 'u1', 1, 'u1/1/h', 1, '', 1, 2, 'Succeeded', 0, '', 0, '', 12, 0)`,
		`INSERT INTO runs VALUES ('`+bad+`', 'op', 'h', 'exec', 'schedule', 'opkit.dev/v1alpha1', 'Operator', '', 'op', 'u2', 1, 'u2/1/h', 1, '', 1, 2, 'Failed', 1, 'exit status 1', 0, '', 0, 0)`,
		`INSERT INTO logs VALUES ('`+ok+`', 0, CAST('the log of a' AS BLOB))`,
	)
	page, err := s.List(ctx, Query{})
	if err != nil || len(page.Runs) != 2 || page.Runs[0].ID != bad || page.Runs[1].ID != ok {
		t.Fatalf("runs after migrating: %+v, %v; want %s and %s", page, err, bad, ok)
	}
	if l, err := s.Logs(ctx, ok, 0); err != nil || string(l.Data) != "the log of a" {
		t.Errorf("log after migrating: %+v, %v", l, err)
	}
	if found, err := s.Succeeded(ctx, "u1/1/h"); err != nil || !found {
		t.Errorf("Succeeded(u1/1/h) = %v, %v after migrating; want true", found, err)
	}
	if page, err := s.List(ctx, Query{Kind: "Operator", Trigger: "schedule"}); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != bad {
		t.Errorf("the operator-wide schedule's runs after migrating: %+v, %v; want only %s", page, err, bad)
	}
	st := &HandlerRecord{Operator: "op", Key: "u1", Kind: "K", Namespace: "ns", Name: "a", Data: []byte(`{"handled":1}`), UpdatedAt: now}
	if err := s.PutHandlerRecord(ctx, st); err != nil {
		t.Fatalf("PutState after migrating: %v", err)
	}
	if got, err := s.HandlerRecords(ctx, "op"); err != nil || len(got) != 1 || string(got[0].Data) != `{"handled":1}` {
		t.Errorf("States after migrating: %+v, %v", got, err)
	}
}

// TestSQLiteMigratesAnArchiveOfVersion3ToDeliveriesKeepingItsRunsAndStates
// opens an archive made by the opkit before webhook deliveries (schema
// version 3), built here with that opkit's migrations only, and finds its
// runs and handler records as they were, and deliveries working beside them.
func TestSQLiteMigratesAnArchiveOfVersion3ToDeliveriesKeepingItsRunsAndStates(t *testing.T) {
	ctx := t.Context()
	now := time.Now()
	ok, bad := NewID(now), NewID(now.Add(time.Millisecond))
	s := migrated(t, migrations[0], migrations[1], migrations[2], `PRAGMA user_version = 3`,
		`INSERT INTO runs VALUES ('`+ok+`', 'op', 'h', 'exec', 'create', 'v1', 'K', 'ns', 'a', 'u1', 1, 'u1/1/h', 1, '', 1, 2, 'Succeeded', 0, '', 0, '', 12, 0)`,
		`INSERT INTO runs VALUES ('`+bad+`', 'op', 'h', 'exec', 'update', 'v1', 'K', 'ns', 'b', 'u2', 1, 'u2/1/h', 1, '', 1, 2, 'Failed', 1, 'exit status 1', 0, '', 0, 0)`,
		`INSERT INTO logs VALUES ('`+ok+`', 0, CAST('the log of a' AS BLOB))`,
		`INSERT INTO states VALUES ('op', 'u1', 'v1', 'K', 'ns', 'a', CAST('{"handled":1}' AS BLOB), 1)`,
	)
	page, err := s.List(ctx, Query{})
	if err != nil || len(page.Runs) != 2 || page.Runs[0].ID != bad || page.Runs[1].ID != ok {
		t.Fatalf("runs after migrating: %+v, %v; want %s and %s", page, err, bad, ok)
	}
	if l, err := s.Logs(ctx, ok, 0); err != nil || string(l.Data) != "the log of a" {
		t.Errorf("log after migrating: %+v, %v", l, err)
	}
	if page, err := s.List(ctx, Query{Failed: true}); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != bad {
		t.Errorf("failed runs after migrating: %+v, %v; want only %s", page, err, bad)
	}
	if got, err := s.HandlerRecords(ctx, "op"); err != nil || len(got) != 1 || string(got[0].Data) != `{"handled":1}` {
		t.Errorf("States after migrating: %+v, %v", got, err)
	}

	d := &Delivery{Operator: "op", Source: "github", DeliveryID: "d-1", Event: "push", Payload: []byte(`{"ref":"main"}`)}
	if err := s.RecordDelivery(ctx, d); err != nil {
		t.Fatalf("RecordDelivery after migrating: %v", err)
	}
	if err := s.RecordDelivery(ctx, &Delivery{Operator: "op", Source: "github", DeliveryID: "d-1"}); !errors.Is(err, ErrDuplicateDelivery) {
		t.Errorf("a replay after migrating: %v, want ErrDuplicateDelivery", err)
	}
	if got, err := s.PendingDeliveries(ctx, "op"); err != nil || len(got) != 1 || got[0].ID != d.ID || string(got[0].Payload) != `{"ref":"main"}` {
		t.Errorf("PendingDeliveries after migrating: %+v, %v; want %s", got, err, d.ID)
	}
	if n, err := s.Prune(ctx, Retention{MaxRuns: 1}); err != nil || n != 1 {
		t.Errorf("Prune to 1 after migrating = %d, %v; want 1 run (the delivery is pending)", n, err)
	}
}

// TestSQLiteRecordsAPendingDeliveryWithAFullSync: a Pending delivery's
// commit is synced (synchronous FULL), and the writer goes back to NORMAL
// for the runs after it, a refused delivery's included.
func TestSQLiteRecordsAPendingDeliveryWithAFullSync(t *testing.T) {
	ctx := t.Context()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	synchronous := func() int {
		t.Helper()
		var level int
		if err := s.w.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&level); err != nil {
			t.Fatal(err)
		}
		return level
	}
	const normal = 1
	if got := synchronous(); got != normal {
		t.Fatalf("the writer's synchronous is %d, want NORMAL (%d)", got, normal)
	}
	// The commit is seen with the connection: a trigger records the
	// level in effect as the row is written.
	if _, err := s.w.ExecContext(ctx, `CREATE TEMP TABLE levels (level INTEGER);
		CREATE TEMP TRIGGER level AFTER INSERT ON deliveries BEGIN INSERT INTO levels SELECT synchronous FROM pragma_synchronous; END;`); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Delivery{
		{Operator: "op", Source: "github", DeliveryID: "d-1"},
		{Operator: "op", Source: "github", DeliveryID: "d-1", Outcome: DeliveryRefused, Reason: "replay of delivery d-1"},
	} {
		if err := s.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got := synchronous(); got != normal {
			t.Errorf("after a %s delivery the writer's synchronous is %d, want NORMAL (%d)", d.Outcome, got, normal)
		}
	}
	rows, err := s.w.QueryContext(ctx, `SELECT level FROM levels`)
	if err != nil {
		t.Fatal(err)
	}
	var levels []int
	for rows.Next() {
		var l int
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		levels = append(levels, l)
	}
	_ = rows.Close()
	if want := []int{2, normal}; !slices.Equal(levels, want) {
		t.Errorf("written with synchronous %v, want FULL (2) for the pending delivery, NORMAL for the refused one: %v", levels, want)
	}
}

// TestSQLiteQueriesUseTheirIndexes checks, with SQLite's own query plans,
// that the queries made on a large archive search an index instead of
// scanning every run. SQLite uses a partial index only where it can see
// that the query implies the index's condition, which is easy to lose in an
// edit.
func TestSQLiteQueriesUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	list := func(q Query) (string, []any) {
		where, args, limit, err := q.sql()
		if err != nil {
			t.Fatal(err)
		}
		return listSQL(where), append(args, limit+1)
	}
	listDeliveries := func(q DeliveryQuery) (string, []any) {
		where, args, limit, err := q.sql()
		if err != nil {
			t.Fatal(err)
		}
		return listDeliveriesSQL(where), append(args, limit+1)
	}
	for _, c := range []struct {
		name  string
		index string
		query func() (string, []any)
	}{
		{"key succeeded", "runs_succeeded", func() (string, []any) { return keySucceededSQL, []any{"uid/1/h"} }},
		{"failed", "runs_failed", func() (string, []any) { return list(Query{Failed: true}) }},
		{"running", "runs_running", func() (string, []any) { return list(Query{Outcome: Running}) }},
		{"object", "runs_object", func() (string, []any) { return list(Query{Namespace: "ns", Name: "n"}) }},
		{"uid", "runs_uid", func() (string, []any) { return list(Query{UID: "u"}) }},
		{"object of a kind", "runs_object", func() (string, []any) { return list(Query{Kind: "Deployment", Namespace: "ns", Name: "n"}) }},
		// The runs API's kubectl get runs -A -l opkit.dev/object=n.
		{"object in every namespace", "runs_name", func() (string, []any) { return list(Query{Name: "n"}) }},
		{"object of an operator in every namespace", "runs_name", func() (string, []any) { return list(Query{Operator: "op", Name: "n"}) }},
		{"states of an operator", "sqlite_autoindex_states_1", func() (string, []any) { return statesSQL, []any{"op"} }},
		{"delete a state", "sqlite_autoindex_states_1", func() (string, []any) { return deleteStateSQL, []any{"op", "uid"} }},
		{"pending deliveries", "deliveries_pending", func() (string, []any) { return pendingDeliveriesSQL, []any{"op"} }},
		{"deliveries of an operator", "deliveries_operator", func() (string, []any) { return listDeliveries(DeliveryQuery{Operator: "op"}) }},
		{"deliveries of a source", "deliveries_operator", func() (string, []any) {
			return listDeliveries(DeliveryQuery{Operator: "op", Source: "github"})
		}},
		{"refused deliveries", "deliveries_turned_down", func() (string, []any) { return listDeliveries(DeliveryQuery{Refused: true}) }},
		// Refused implies deliveries_turned_down's condition, and SQLite
		// takes it: either partial index reads only refusals.
		{"refused deliveries as an outcome", "deliveries_turned_down", func() (string, []any) {
			return listDeliveries(DeliveryQuery{Outcome: DeliveryRefused})
		}},
		{"get a delivery", "sqlite_autoindex_deliveries_1", func() (string, []any) { return getDeliverySQL, []any{"id"} }},
		{"redeliveries of a delivery", "deliveries_redeliveries", func() (string, []any) { return redeliveriesSQL, []any{"id"} }},
		{"cancel running", "runs_running", func() (string, []any) {
			return cancelRunningSQL, []any{string(Cancelled), "stopped", int64(1)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			query, args := c.query()
			rows, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+query, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rows.Close() }()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(plan, "; "); !strings.Contains(got, "INDEX "+c.index) {
				t.Errorf("plan %q does not use %s", got, c.index)
			}
		})
	}
}
