package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// TestMain stops the PostgreSQL server the tests started, if any.
func TestMain(m *testing.M) { pgtest.Main(m) }

// TestArchiveFlagTakesAPostgreSQLURL: the commands that read the archive
// read a PostgreSQL one named by its URL, postgres:// or postgresql://.
func TestArchiveFlagTakesAPostgreSQLURL(t *testing.T) {
	dsn := pgtest.DSN(t)
	store, err := archive.OpenPostgres(t.Context(), dsn, archive.Options{Log: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	now := time.Now()
	run := &archive.Run{ID: archive.NewID(now), Operator: "printer", Handler: "announce", Namespace: "default", Name: "hello",
		StartedAt: now, Attempt: 1, Outcome: archive.Succeeded, FinishedAt: now}
	if err := store.Insert(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendLog(t.Context(), run.ID, []byte("printed hello\n")); err != nil {
		t.Fatal(err)
	}
	delivery := &archive.Delivery{Operator: "printer", Source: "github", DeliveryID: "d-1", Event: "push", Payload: []byte(`{}`)}
	if err := store.RecordDelivery(t.Context(), delivery); err != nil {
		t.Fatal(err)
	}

	for _, location := range []string{dsn, "postgresql://" + strings.TrimPrefix(dsn, "postgres://")} {
		var page archive.Page
		if err := json.Unmarshal([]byte(opkit(t, "runs", "--archive", location, "-o", "json")), &page); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != run.ID {
			t.Errorf("opkit runs --archive %s: %+v, %v; want run %s", location, page, err, run.ID)
		}
		if out := opkit(t, "logs", run.ID, "--archive", location); out != "printed hello\n" {
			t.Errorf("opkit logs --archive %s: %q", location, out)
		}
		if out := opkit(t, "events", "--archive", location); !strings.Contains(out, "d-1") {
			t.Errorf("opkit events --archive %s:\n%s\nwant delivery d-1", location, out)
		}
	}
}

// TestArchivePasswordIsNeverShown: the password of a PostgreSQL archive's
// URL is neither in a command's error nor in the help's default.
func TestArchivePasswordIsNeverShown(t *testing.T) {
	const password = "Cli-pw-5e1d07"
	dsn := "postgres://opkit:" + password + "@127.0.0.1:1/archive?sslmode=disable"
	for _, args := range [][]string{
		{"runs", "--archive", dsn},
		{"logs", archive.NewID(time.Now()), "--archive", dsn},
		{"events", "--archive", dsn},
		{"console", "--archive", dsn, "--kubeconfig", "/nonexistent"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(args, &stdout, &stderr)
		if code == 0 {
			t.Errorf("opkit %s: exit 0 with no server", args[0])
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, password) {
			t.Errorf("opkit %s shows the archive's password:\n%s", args[0], out)
		}
	}
	if _, err := openExistingArchive(t.Context(), dsn); err == nil || !strings.Contains(err.Error(), "cannot be reached") ||
		strings.Contains(err.Error(), password) {
		t.Errorf("opening the archive of a server out of reach: %v; want an error that says so, without the password", err)
	}
	t.Setenv("OPKIT_ARCHIVE", dsn)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("opkit runs --help: exit %d: %s", code, stderr.String())
	}
	if help := stdout.String(); strings.Contains(help, password) || !strings.Contains(help, "postgres://opkit:xxxxx@127.0.0.1:1/archive") {
		t.Errorf("opkit runs --help with OPKIT_ARCHIVE=%s:\n%s\nwant the default with its password redacted", archive.RedactDSN(dsn), help)
	}
}
