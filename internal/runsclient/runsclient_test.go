package runsclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsapi"
	"github.com/opkit-dev/opkit/internal/runsclient"
)

// serve serves a real SQLite archive with the runs API's handler, as an
// engine does behind the API server, and returns it with a client's
// configuration.
func serve(t *testing.T) (*archive.SQLite, *rest.Config) {
	t.Helper()
	store, err := archive.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h, err := runsapi.New(runsapi.Options{
		Archive: store, Namespace: "opkit",
		Authenticator: runsapi.AuthenticatorFunc(func(*http.Request) (*runsapi.User, bool, error) {
			return &runsapi.User{Name: "alice"}, true, nil
		}),
		Authorizer: runsapi.AuthorizerFunc(func(_ context.Context, a runsapi.Attributes) (bool, string, error) {
			return a.Namespace != "secret", "alice may not read namespace secret", nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return store, &rest.Config{Host: srv.URL}
}

func record(t *testing.T, store *archive.SQLite, i int, ns, name string, outcome archive.Outcome, log string) *archive.Run {
	t.Helper()
	start := time.Now().Add(-time.Minute + time.Duration(i)*time.Second)
	r := &archive.Run{
		ID: archive.NewID(start), Operator: "napper", Handler: "nap", Action: "exec", Trigger: "create",
		APIVersion: "nap.example.com/v1", Kind: "Nap", Namespace: ns, Name: name, UID: "uid-" + name, Generation: 1,
		Key: "uid-" + name + "/1/nap", Attempt: 1, StartedAt: start,
	}
	if err := store.Insert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if log != "" {
		if err := store.AppendLog(t.Context(), r.ID, []byte(log)); err != nil {
			t.Fatal(err)
		}
	}
	r.Outcome, r.FinishedAt = outcome, start.Add(time.Second)
	if outcome.Failure() {
		r.Error = "exit status 1"
	}
	if err := store.Finish(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAReaderReadsTheArchiveAsTheRunsAPIServesIt(t *testing.T) {
	store, cfg := serve(t)
	ctx := t.Context()
	ok := record(t, store, 1, "a", "ok", archive.Succeeded, "napping\n\x1b[31mwoke up\x1b[0m\n")
	bad := record(t, store, 2, "b", "bad", archive.Failed, "")
	record(t, store, 3, "secret", "hidden", archive.Failed, "")

	r, err := runsclient.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.String(), cfg.Host) {
		t.Errorf("String() = %q; want it to name %s", r, cfg.Host)
	}

	page, err := r.List(ctx, archive.Query{Namespace: "b", Failed: true, Kind: "Nap"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 || page.Runs[0].ID != bad.ID || page.Runs[0].Error != "exit status 1" || page.Runs[0].Namespace != "b" {
		t.Errorf("failed Naps of b: %+v; want %s, with its error", page.Runs, bad.ID)
	}
	page, err = r.List(ctx, archive.Query{Namespace: "a", Name: "ok"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != ok.ID || page.Runs[0].Key != ok.Key || page.Runs[0].FinishedAt.IsZero() {
		t.Errorf("runs of a/ok: %+v, %v; want %s, whole", page, err, ok.ID)
	}

	got, err := r.Get(ctx, ok.ID)
	if err != nil || got.Outcome != archive.Succeeded || got.UID != ok.UID {
		t.Errorf("Get(%s) = %+v, %v", ok.ID, got, err)
	}
	if _, err := r.Get(ctx, archive.NewID(time.Now())); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Get of an unknown run: %v; want archive.ErrNotFound", err)
	}
	log, err := r.Logs(ctx, ok.ID, 0)
	if err != nil || string(log.Data) != "napping\nwoke up\n" {
		t.Errorf("Logs(%s) = %q, %v; want the log cleaned of its colours", ok.ID, log.Data, err)
	}
	if rest, err := r.Logs(ctx, ok.ID, log.Next); err != nil || len(rest.Data) != 0 {
		t.Errorf("Logs from the end = %q, %v; want nothing more", rest.Data, err)
	}

	// RBAC's refusal is said, as the API server said it.
	if _, err := r.List(ctx, archive.Query{Namespace: "secret"}); err == nil || !strings.Contains(err.Error(), "alice may not read namespace secret") {
		t.Errorf("List of namespace secret: %v; want the refusal", err)
	}
	// What the API does not select or serve is said, naming --archive.
	for what, err := range map[string]error{
		"by UID":     func() error { _, err := r.List(ctx, archive.Query{UID: "uid-ok"}); return err }(),
		"states":     func() error { _, err := r.HandlerRecords(ctx, "napper"); return err }(),
		"a delivery": func() error { _, err := r.GetDelivery(ctx, ok.ID); return err }(),
	} {
		if !runsclient.IsNotServed(err) || !strings.Contains(err.Error(), "--archive") {
			t.Errorf("%s: %v; want ErrNotServed, naming --archive", what, err)
		}
	}
}

func TestOpenSaysWhetherTheClusterServesTheRunsAPI(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		want   error
	}{
		{"no runs API", http.StatusNotFound, runsclient.ErrNotServed},
		{"registered, its engine down", http.StatusServiceUnavailable, runsclient.ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, `{"kind":"Status","message":"the server could not find the requested resource"}`, c.status)
			}))
			defer srv.Close()
			_, err := runsclient.Open(t.Context(), &rest.Config{Host: srv.URL})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("Open: %v; want %v, naming %s", err, c.want, srv.URL)
			}
		})
	}
}
