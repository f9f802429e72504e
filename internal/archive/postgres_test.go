package archive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/archivetest"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// TestMain stops the PostgreSQL server the tests started, if any.
func TestMain(m *testing.M) { pgtest.Main(m) }

// openPostgres opens a store on dsn, its health lines in t's log unless
// opts says where; it is closed when t ends.
func openPostgres(t testing.TB, dsn string, opts archive.Options) *archive.Postgres {
	t.Helper()
	if opts.Log == nil {
		opts.Log = func(line string) { t.Log(line) }
	}
	p, err := archive.OpenPostgres(t.Context(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestPostgresConformance(t *testing.T) {
	pgtest.Shared(t) // skipped once, not in each subtest, without a server
	archivetest.Run(t, func(t *testing.T, opts archive.Options) archive.Store {
		return openPostgres(t, pgtest.DSN(t), opts)
	})
}

// TestPostgresEnginesShareOneDatabase: engines that start at once against
// one new database (a leader and its standby, and more) migrate it once
// without error, and then share it: a replay is refused across engines.
func TestPostgresEnginesShareOneDatabase(t *testing.T) {
	dsn := pgtest.DSN(t)
	const engines = 6
	stores := make([]*archive.Postgres, engines)
	errs := make([]error, engines)
	var wg sync.WaitGroup
	for i := range engines {
		wg.Go(func() {
			stores[i], errs[i] = archive.OpenPostgres(t.Context(), dsn, archive.Options{Log: func(string) {}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, _ := conn.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	want := make([]int, max(len(versions), 4))
	for i := range want {
		want[i] = i + 1
	}
	if err != nil || !slices.Equal(versions, want) {
		t.Errorf("schema_migrations holds versions %v (%v), want %v: each migration once", versions, err, want)
	}

	// A run one engine records, another reads.
	r := &archive.Run{ID: archive.NewID(time.Now()), Operator: "printer", Name: "a", UID: "u", Key: "u/1/h", StartedAt: time.Now().UTC()}
	if err := stores[0].Insert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if got, err := stores[1].Get(t.Context(), r.ID); err != nil || got.Name != "a" {
		t.Errorf("a run recorded by engine 0, read by engine 1: %+v, %v", got, err)
	}
	// Deliveries of 20 ids, each sent 10 times to the engines in turn:
	// each id is accepted once, by one engine.
	accepted := make([]int, 20)
	var mu sync.Mutex
	for i := range 200 {
		wg.Go(func() {
			d := &archive.Delivery{Operator: "printer", Source: "github", DeliveryID: fmt.Sprintf("d-%d", i%20), Payload: []byte(`{}`)}
			err := stores[i%engines].RecordDelivery(t.Context(), d)
			switch {
			case err == nil:
				mu.Lock()
				accepted[i%20]++
				mu.Unlock()
			case !errors.Is(err, archive.ErrDuplicateDelivery):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for id, n := range accepted {
		if n != 1 {
			t.Errorf("delivery d-%d accepted %d times by the engines, want once", id, n)
		}
	}
}

// TestPostgresRefusesANewerSchema: an archive migrated by a newer opkit is
// not opened by this one.
func TestPostgresRefusesANewerSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	openPostgres(t, dsn, archive.Options{})
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_migrations (version) VALUES (99)`); err != nil {
		t.Fatal(err)
	}
	_, err = archive.OpenPostgres(t.Context(), dsn, archive.Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than this opkit knows") {
		t.Errorf("opening an archive of schema version 99: %v, want an error saying it is newer", err)
	}
}

// TestPostgresWorksAgainAfterTheServerRestarts: PostgreSQL stopped while
// the store is open. Every call fails at once with an error that says the
// archive cannot be reached, the health check says so once, and the same
// store works again once the server is back, with what it had recorded.
// The store connects with a password, which no error or line shows.
func TestPostgresWorksAgainAfterTheServerRestarts(t *testing.T) {
	server := pgtest.Own(t)
	const password = "Restart-pw-7f3a9c"
	if err := server.Exec(t.Context(), "postgres", `CREATE ROLE engine LOGIN PASSWORD '`+password+`'`, `CREATE DATABASE archive OWNER engine`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	logged := func(part string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, part) {
				return true
			}
		}
		return false
	}
	// A call that tried to connect until its connect timeout, instead of
	// failing on the refused connection, would take ten minutes: the calls
	// below are checked to take less than that, on a machine however busy.
	const connectTimeout = 10 * time.Minute
	dsn := server.DSNFor("engine", password, "archive") + fmt.Sprintf("&connect_timeout=%d", int(connectTimeout.Seconds()))
	p := openPostgres(t, dsn, archive.Options{CheckEvery: 50 * time.Millisecond, Log: func(line string) {
		mu.Lock()
		lines = append(lines, line)
		mu.Unlock()
	}})
	ctx := t.Context()
	before := run(time.Now())
	if err := p.Insert(ctx, before); err != nil {
		t.Fatal(err)
	}

	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	calls := map[string]func() error{
		"Insert": func() error { return p.Insert(ctx, run(time.Now())) },
		"Get": func() error {
			_, err := p.Get(ctx, before.ID)
			return err
		},
		"AppendLog": func() error { return p.AppendLog(ctx, before.ID, []byte("line\n")) },
		"RecordDelivery": func() error {
			return p.RecordDelivery(ctx, &archive.Delivery{Operator: "printer", Source: "github", DeliveryID: "down"})
		},
		"Prune": func() error {
			_, err := p.Prune(ctx, archive.Retention{MaxRuns: 10})
			return err
		},
		"Check": func() error { return p.Check(ctx) },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, archive.ErrUnavailable) || !strings.Contains(err.Error(), "cannot be reached") {
			t.Errorf("%s while PostgreSQL is down: %v; want an error that says the archive cannot be reached", name, err)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("%s: the error shows the DSN's password: %v", name, err)
		}
	}
	if d := time.Since(start); d >= connectTimeout {
		t.Errorf("the calls took %s to fail, as long as a connect timeout; want them to fail at once, on the refused connection", d)
	}
	waitFor(t, "a line saying the archive cannot be reached", func() bool { return logged("cannot be reached") })

	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	after := run(time.Now())
	waitFor(t, "the store to record again", func() bool { return p.Insert(ctx, after) == nil })
	for _, id := range []string{before.ID, after.ID} {
		if _, err := p.Get(ctx, id); err != nil {
			t.Errorf("run %s after the restart: %v", id, err)
		}
	}
	if err := p.RecordDelivery(ctx, &archive.Delivery{Operator: "printer", Source: "github", DeliveryID: "up"}); err != nil {
		t.Errorf("RecordDelivery after the restart: %v", err)
	}
	waitFor(t, "a line saying the archive answers again", func() bool { return logged("answers again") })
	mu.Lock()
	defer mu.Unlock()
	var health []string
	for _, l := range lines {
		if strings.Contains(l, password) {
			t.Errorf("a line shows the DSN's password: %s", l)
		}
		if !strings.Contains(l, "fsync off") { // the test server's, said at open
			health = append(health, l)
		}
	}
	if n := len(health); n != 2 {
		t.Errorf("%d health lines %q, want 2: one when the server went, one when it came back", n, health)
	}
}

func run(at time.Time) *archive.Run {
	return &archive.Run{ID: archive.NewID(at), Operator: "printer", Handler: "h", Name: "a", UID: "u", Key: "u/1/h", StartedAt: at.UTC()}
}

// waitFor polls cond for up to 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostgresErrorsNeverShowThePassword: a DSN's password, in its user
// part or as a parameter, is in no error: a wrong password, a server out
// of reach, a DSN pgx cannot read.
func TestPostgresErrorsNeverShowThePassword(t *testing.T) {
	server := pgtest.Shared(t)
	const right, wrong = "Right-pw-41b7e2", "Wrong-pw-9d0c55"
	if err := server.Exec(t.Context(), "postgres", `CREATE ROLE pwtest LOGIN PASSWORD '`+right+`'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Exec(context.Background(), "postgres", `DROP ROLE pwtest`) })
	db := strings.TrimPrefix(strings.SplitN(pgtest.DSN(t), "?", 2)[0], "postgres://postgres@/")
	if err := server.Exec(t.Context(), "postgres", `ALTER DATABASE `+db+` OWNER TO pwtest`); err != nil {
		t.Fatal(err)
	}
	openPostgres(t, server.DSNFor("pwtest", right, db), archive.Options{}) // the right one opens it

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, dsn string
		notURL    bool // Open takes it for a file
	}{
		{"a wrong password", server.DSNFor("pwtest", wrong, db), false},
		{"a server out of reach", "postgres://opkit:" + wrong + "@127.0.0.1:1/archive?sslmode=disable&connect_timeout=5", false},
		{"a password parameter", "postgresql://opkit@127.0.0.1:1/archive?sslmode=disable&password=" + wrong, false},
		{"an escaped password", "postgres://opkit:" + wrong + "%2F%40x@127.0.0.1:1/archive", false},
		{"a bad port", "postgres://opkit:" + wrong + "@localhost:port/archive", false},
		{"a bad parameter", "postgres://opkit:" + wrong + "@localhost/archive?pool_max_conns=many", false},
		{"a bad URL", "postgres://opkit:" + wrong + "@[::1/archive", false},
		{"a bad key=value string", "host=localhost password=" + wrong + " port=x", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opens := []func() error{func() error { _, err := archive.OpenPostgres(ctx, c.dsn, archive.Options{}); return err }}
			if !c.notURL {
				opens = append(opens, func() error { _, err := archive.Open(ctx, c.dsn, archive.Options{}); return err })
			}
			for _, open := range opens {
				err := open()
				if err == nil {
					t.Fatal("opened")
				}
				if strings.Contains(err.Error(), wrong) || strings.Contains(fmt.Sprintf("%+v", err), wrong) {
					t.Errorf("the error shows the password: %v", err)
				}
				t.Log(err)
			}
		})
	}
}

// TestOpenChoosesTheStoreByLocation: a postgres:// or postgresql:// URL is
// a PostgreSQL archive, anything else a SQLite file.
func TestOpenChoosesTheStoreByLocation(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, location := range []string{dsn, "postgresql://" + strings.TrimPrefix(dsn, "postgres://")} {
		s, err := archive.Open(t.Context(), location, archive.Options{Log: func(string) {}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*archive.Postgres); !ok {
			t.Errorf("Open(%s) is a %T, want *archive.Postgres", location, s)
		}
		_ = s.Close()
	}
	path := t.TempDir() + "/postgres:/runs.db"
	s, err := archive.Open(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if _, ok := s.(*archive.SQLite); !ok {
		t.Errorf("Open(%s) is a %T, want *archive.SQLite", path, s)
	}
}

// TestPostgresOpensForAReaderThatMayOnlyRead: a role that may only read
// the tables (the console's, the CLI's) opens an archive that is up to
// date and reads it: opening migrates nothing it need not.
func TestPostgresOpensForAReaderThatMayOnlyRead(t *testing.T) {
	server := pgtest.Shared(t)
	dsn := pgtest.DSN(t)
	writer := openPostgres(t, dsn, archive.Options{})
	r := run(time.Now())
	if err := writer.Insert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	const password = "Reader-pw-2c9e14"
	db := strings.TrimPrefix(strings.SplitN(dsn, "?", 2)[0], "postgres://postgres@/")
	if err := server.Exec(t.Context(), "postgres", `CREATE ROLE reader LOGIN PASSWORD '`+password+`'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Exec(context.Background(), db, `DROP OWNED BY reader`)
		_ = server.Exec(context.Background(), "postgres", `DROP ROLE reader`)
	})
	if err := server.Exec(t.Context(), db, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader`); err != nil {
		t.Fatal(err)
	}
	reader := openPostgres(t, server.DSNFor("reader", password, db), archive.Options{})
	if page, err := reader.List(t.Context(), archive.Query{}); err != nil || len(page.Runs) != 1 {
		t.Errorf("the reader lists %+v, %v; want the run", page, err)
	}
	if err := reader.Insert(t.Context(), run(time.Now())); err == nil {
		t.Error("the reader recorded a run")
	}
}
