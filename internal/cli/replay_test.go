package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
)

// replayOperator is an Operator whose notify handler is handler.py in its
// directory, with a GREETING from a Secret.
const replayOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes}
spec:
  resource:
    group: notes.example.com
    kind: Note
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  handlers:
  - name: notify
    on: [create]
    exec:
      command: [./handler.py]
      env:
      - {name: GREETING, valueFrom: {secretKeyRef: {name: greeting, key: word}}}
      - {name: STYLE, value: plain}
`

// replayHandlerScript answers with an Event that names the object's text,
// $GREETING and $STYLE; fixed, it says "fixed" too.
const replayHandlerScript = `#!/usr/bin/env python3
import json, os, sys
ctx = json.load(sys.stdin)
msg = "%s %s (%s, %s)" % (os.environ.get("GREETING", "?"), ctx["object"]["spec"]["text"], os.environ.get("STYLE", "?"), ctx["trigger"])
if len(sys.argv) > 1:
    msg += " " + sys.argv[1]
print("notifying", file=sys.stderr)
print(json.dumps({"events": [{"type": "Normal", "reason": "Notified", "message": msg}]}))
`

// replayArchive records a succeeded notify run, with the binding context
// and the result the deployed handler gave, in store.
func replayRun(t *testing.T, store archive.Store) *archive.Run {
	t.Helper()
	now := time.Now().UTC()
	r := &archive.Run{ID: archive.NewID(now), Operator: "notes", Handler: "notify", Action: "exec", Trigger: "create",
		APIVersion: "notes.example.com/v1", Kind: "Note", Namespace: "default", Name: "n1", UID: "u1", Generation: 1, Key: "u1/1/notify", Attempt: 1,
		StartedAt: now, Outcome: archive.Running,
		Input: json.RawMessage(`{"operator":"notes","handler":"notify","trigger":"create","runId":"x","idempotencyKey":"u1/1/notify","attempt":1,` +
			`"object":{"apiVersion":"notes.example.com/v1","kind":"Note","metadata":{"name":"n1"},"spec":{"text":"one"}},"old":null,"diff":null,` +
			`"children":{"token":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"n1-token"}}}}`)}
	if err := store.Insert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Outcome, r.FinishedAt = archive.Succeeded, now.Add(time.Second)
	r.Result = json.RawMessage(`{"events":[{"type":"Normal","reason":"Notified","message":"hello one (plain, create)"}]}`)
	if err := store.Finish(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReplayRunsTheHandlerWithTheRecordedInputAndDiffsTheResult: opkit
// replay, from a SQLite archive and a PostgreSQL one, runs the handler of
// the definition with the run's recorded binding context and gives the
// same result as recorded, the Secret's value from --env-file; it names
// what the archive lacks (the Secret's value, a Secret child's data), and
// with a fixed command after --, shows the result's change and exits 1.
func TestReplayRunsTheHandlerWithTheRecordedInputAndDiffsTheResult(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "operator.yaml")
	envFile := filepath.Join(dir, "secrets.env")
	for name, data := range map[string]string{def: replayOperator, filepath.Join(dir, "handler.py"): replayHandlerScript, envFile: "# the Secret's value\nGREETING=hello\n"} {
		if err := os.WriteFile(name, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sqlite, err := archive.OpenSQLite(t.Context(), filepath.Join(dir, "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sqlite.Close() }()
	dsn := pgtest.DSN(t)
	pg, err := archive.OpenPostgres(t.Context(), dsn, archive.Options{Log: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pg.Close() }()

	for location, store := range map[string]archive.Store{filepath.Join(dir, "runs.db"): sqlite, dsn: pg} {
		r := replayRun(t, store)
		run := func(args ...string) (code int, stdout, stderr string) {
			var out, errOut bytes.Buffer
			code = Main(append([]string{"replay", r.ID, "--archive", location, "-f", def}, args...), &out, &errOut)
			return code, out.String(), errOut.String()
		}

		code, stdout, stderr := run("--env-file", envFile)
		if code != 0 || !strings.Contains(stdout, "the same as run "+r.ID) || !strings.Contains(stdout, "hello one (plain, create)") {
			t.Errorf("%s: opkit replay: exit %d\nstdout: %s\nstderr: %s\nwant the recorded result, the same", archive.RedactDSN(location), code, stdout, stderr)
		}
		if !strings.Contains(stderr, "notifying") || !strings.Contains(stderr, "children.token is Secret n1-token") {
			t.Errorf("opkit replay's stderr lacks the handler's log or the note on the Secret child:\n%s", stderr)
		}

		code, _, stderr = run()
		if code == 0 || !strings.Contains(stderr, "GREETING (Secret greeting, key word)") || !strings.Contains(stderr, "--env-file") {
			t.Errorf("opkit replay without the Secret's value: exit %d, stderr %s; want a refusal naming GREETING and --env-file", code, stderr)
		}

		code, stdout, _ = run("--env-file", envFile, "--", filepath.Join(dir, "handler.py"), "now-fixed")
		if code != 1 || !strings.Contains(stdout, `-       "message": "hello one (plain, create)"`) || !strings.Contains(stdout, `+       "message": "hello one (plain, create) now-fixed"`) {
			t.Errorf("opkit replay -- fixed command: exit %d\n%s\nwant a diff of the message, and exit 1", code, stdout)
		}
	}
}

// TestReplayRefusesWhatItCannotReplay: a run without a recorded input, a
// malformed env file, and a handler the definition lacks are refused with
// what is wrong.
func TestReplayRefusesWhatItCannotReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := replayRun(t, store)
	old := &archive.Run{ID: archive.NewID(time.Now()), Operator: "notes", Handler: "notify", Name: "n1", StartedAt: time.Now(), Outcome: archive.Succeeded}
	if err := store.Insert(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "operator.yaml")
	bad := filepath.Join(dir, "bad.env")
	other := strings.ReplaceAll(replayOperator, "name: notify", "name: announce")
	for name, data := range map[string]string{def: other, bad: "GREETING hello\n", filepath.Join(dir, "handler.py"): replayHandlerScript} {
		if err := os.WriteFile(name, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{old.ID, "--", "true"}, "no recorded binding context"},
		{[]string{r.ID, "--env-file", bad, "--", "true"}, `line 1: "GREETING hello" is not NAME=value`},
		{[]string{r.ID, "-f", def}, "handler notify is not in " + def},
		{[]string{"nope"}, `"nope" is not a run id`},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(append([]string{"replay", "--archive", path}, tc.args...), &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("opkit replay %s: exit %d, stderr %s; want an error with %q", strings.Join(tc.args, " "), code, stderr.String(), tc.want)
		}
	}
}

// TestReplayRunsAServeHandlerWithItsLine: a handler in exec.mode Serve,
// which reads a binding context per line (here bash's read, which returns
// no line that is not ended), is replayed as a process of its own given
// its one line, and gives the result recorded.
func TestReplayRunsAServeHandlerWithItsLine(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "operator.yaml")
	envFile := filepath.Join(dir, "secrets.env")
	handler := `#!/bin/bash
while IFS= read -r ctx; do
  text=$(sed -E 's/.*"text":"([^"]*)".*/\1/' <<<"$ctx")
  echo "{\"events\": [{\"type\": \"Normal\", \"reason\": \"Notified\", \"message\": \"$GREETING $text ($STYLE, create)\"}]}"
done
`
	serve := strings.Replace(replayOperator, "      command: [./handler.py]\n", "      command: [./handler.sh]\n      mode: Serve\n", 1)
	for name, data := range map[string]string{def: serve, filepath.Join(dir, "handler.sh"): handler, envFile: "GREETING=hello\n"} {
		if err := os.WriteFile(name, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := replayRun(t, store)
	var out, errOut bytes.Buffer
	code := Main([]string{"replay", r.ID, "--archive", path, "-f", def, "--env-file", envFile}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "the same as run "+r.ID) {
		t.Errorf("replay of a Serve handler: exit %d\n%s\n%s; want the recorded result", code, out.String(), errOut.String())
	}
}
