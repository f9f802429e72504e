package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

func TestLogsFollowPrintsARunUntilItEnds(t *testing.T) {
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	run := &archive.Run{ID: archive.NewID(time.Now()), Operator: "op", Handler: "h", Name: "n", StartedAt: time.Now(), Attempt: 2}
	if err := store.Insert(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendLog(ctx, run.ID, []byte("first line\n")); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- printLogs(ctx, store, run.ID, logsOptions{follow: true}, &stdout, &stderr) }()
	time.Sleep(700 * time.Millisecond)
	if err := store.AppendLog(ctx, run.ID, []byte("second line\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("logs -f returned before the run ended: %v", err)
	default:
	}
	if err := store.AppendLog(ctx, run.ID, []byte("last words\n")); err != nil {
		t.Fatal(err)
	}
	run.Outcome, run.FinishedAt, run.Error = archive.Failed, time.Now(), "exit status 1"
	if err := store.Finish(ctx, run); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("logs -f did not return after the run ended")
	}
	if got := stdout.String(); got != "first line\nsecond line\nlast words\n" {
		t.Errorf("stdout %q", got)
	}
	if got := stderr.String(); !strings.Contains(got, "run "+run.ID+" Failed (attempt 2): exit status 1") {
		t.Errorf("stderr %q", got)
	}
}

func TestLogsOfARunInProgressEndWithANewline(t *testing.T) {
	ctx := t.Context()
	path, store, run := archiveWithRun(t)
	defer func() { _ = store.Close() }()
	if err := store.AppendLog(ctx, run.ID, []byte("first line\nhalf a li")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"logs", run.ID, "--archive", path},
		{"logs", run.ID, "--archive", path, "--raw"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if got, want := stdout.String(), "first line\nhalf a li\n"; got != want {
			t.Errorf("%v printed %q, want %q", args, got, want)
		}
	}
	// A log that ends with its newline gets no second one.
	if err := store.AppendLog(ctx, run.ID, []byte("ne\n")); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"logs", run.ID, "--archive", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got, want := stdout.String(), "first line\nhalf a line\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}

func TestLogsFollowStreamsAHalfLineAndEndsTheLastLineBeforeTheError(t *testing.T) {
	ctx := t.Context()
	_, store, run := archiveWithRun(t)
	defer func() { _ = store.Close() }()
	if err := store.AppendLog(ctx, run.ID, []byte("first line\nhalf")); err != nil {
		t.Fatal(err)
	}
	// stdout and stderr share one stream, as on a terminal.
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- printLogs(ctx, store, run.ID, logsOptions{follow: true}, out, out) }()
	waitFor(t, 10*time.Second, "the half line printed as it is", func() bool { return out.String() == "first line\nhalf" })
	if err := store.AppendLog(ctx, run.ID, []byte(" a line\nno newline at the end")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the rest of the line printed after it", func() bool {
		return out.String() == "first line\nhalf a line\nno newline at the end"
	})
	run.Outcome, run.FinishedAt, run.Error = archive.Failed, time.Now(), "exit status 1"
	if err := store.Finish(ctx, run); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not return after the run ended")
	}
	want := "first line\nhalf a line\nno newline at the end\nrun " + run.ID + " Failed (attempt 1): exit status 1\n"
	if got := out.String(); got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}

// lockedBuffer is a bytes.Buffer that one goroutine writes while another
// reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond until it holds, or fails the test after limit
// naming what it waited for.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunsLinkTheConsoleWhenItsURLIsKnown(t *testing.T) {
	now := time.Now()
	runs := []archive.Run{{ID: archive.NewID(now), Operator: "op", Handler: "h", Namespace: "ns", Name: "n", Outcome: archive.Failed, StartedAt: now}}
	var plain, linked bytes.Buffer
	printRuns(&plain, runs, "", now)
	printRuns(&linked, runs, "https://opkit.example.com", now)
	if strings.Contains(plain.String(), "CONSOLE") {
		t.Errorf("a console column without a console URL:\n%s", plain.String())
	}
	if want := "https://opkit.example.com/runs/" + runs[0].ID; !strings.Contains(linked.String(), want) || !strings.Contains(linked.String(), "CONSOLE") {
		t.Errorf("the table lacks %s:\n%s", want, linked.String())
	}
}

func TestRunsNameTheRunnerOfARunOnOneAndNothingForOthers(t *testing.T) {
	path, ids := archiveOfKinds(t)
	runs := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"runs", "--archive", path}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		return stdout.String()
	}
	if out := runs(); strings.Contains(out, "RUNNER") {
		t.Errorf("a RUNNER column though no run ran on a runner:\n%s", out)
	}
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetRunner(t.Context(), ids["backup schedule nightly"], "nightly-runner-3f2a9c1e-7d9kq"); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	out := runs()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	column := slices.Index(strings.Fields(lines[0]), "RUNNER")
	if column < 0 {
		t.Fatalf("no RUNNER column though a run ran on a runner:\n%s", out)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		want := "-"
		if f[0] == ids["backup schedule nightly"] {
			want = "nightly-runner-3f2a9c1e-7d9kq"
		}
		if f[column] != want {
			t.Errorf("run %s reads %q as its runner, want %q:\n%s", f[0], f[column], want, out)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--archive", path, "--operator", "nightly", "-o", "json"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), `"runner": "nightly-runner-3f2a9c1e-7d9kq"`) {
		t.Errorf("-o json (exit %d) lacks the runner:\n%s%s", code, stdout.String(), stderr.String())
	}
}

func TestRunsShowATransitionAsItsStatesAndWhoDecided(t *testing.T) {
	now := time.Now()
	runs := []archive.Run{
		{ID: archive.NewID(now), Operator: "database", Handler: v1alpha1.TransitionHandler, Trigger: v1alpha1.TransitionDecision, Namespace: "ns", Name: "orders",
			Diff: []archive.Change{{Op: "change", Path: "status.state.name", Old: "NeedsAttention", New: "RollingBack"}}, Actor: "alice", Outcome: archive.Succeeded, StartedAt: now},
		{ID: archive.NewID(now), Operator: "database", Handler: v1alpha1.TransitionHandler, Trigger: v1alpha1.TransitionInitial, Namespace: "ns", Name: "orders",
			Diff: []archive.Change{{Op: "add", Path: "status.state.name", New: "Provisioning"}}, Outcome: archive.Succeeded, StartedAt: now},
	}
	var out bytes.Buffer
	printRuns(&out, runs, "", now)
	for _, want := range []string{"state NeedsAttention -> RollingBack", "decision", "decided by alice", "state - -> Provisioning"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), v1alpha1.TransitionHandler) {
		t.Errorf("the table names transitions by their archive handler %s:\n%s", v1alpha1.TransitionHandler, out.String())
	}
}

// hostileLog is a handler's log with what a terminal would act on: colours,
// a window title (OSC), a cursor move and a bell, around plain text.
const hostileLog = "\x1b[31mred\x1b[0m \x1b]0;pwned title\x07plain\x1b[2Jcleared\a done\n"

func TestLogsStripTerminalControlUnlessRaw(t *testing.T) {
	ctx := t.Context()
	path, store, run := archiveWithRun(t)
	if err := store.AppendLog(ctx, run.ID, []byte(hostileLog)); err != nil {
		t.Fatal(err)
	}
	run.Outcome, run.FinishedAt = archive.Succeeded, time.Now()
	if err := store.Finish(ctx, run); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", run.ID, "--archive", path}, "red plaincleared done\n"},
		{[]string{"logs", run.ID, "--archive", path, "--raw"}, hostileLog},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr.String())
		}
		if stdout.String() != tc.want {
			t.Errorf("%v printed %q, want %q", tc.args, stdout.String(), tc.want)
		}
	}
}

func TestLogsOfALongRunKeepItsStartAndEndWithTheCutMarked(t *testing.T) {
	ctx := t.Context()
	path, store, run := archiveWithRun(t)
	// 10 MB of noise between the first line and the error, in the pieces
	// the engine writes.
	stream := []byte("starting the backup\n")
	stream = append(stream, bytes.Repeat([]byte("copying a block, all is well\n"), 10<<20/29)...)
	stream = append(stream, "error: the disk is full\n"...)
	for rest := stream; len(rest) > 0; {
		n := min(len(rest), 64<<10)
		if err := store.AppendLog(ctx, run.ID, rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	run.Outcome, run.FinishedAt, run.Error = archive.Failed, time.Now(), "exit status 1: error: the disk is full"
	if err := store.Finish(ctx, run); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"logs", run.ID, "--archive", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "starting the backup\n") || !strings.HasSuffix(out, "all is well\nerror: the disk is full\n") {
		t.Errorf("the log printed lacks its first line or its last: %q ... %q", out[:min(len(out), 40)], out[max(len(out)-60, 0):])
	}
	marker := archive.CutMarker(int64(len(stream) - archive.DefaultLogLimit))
	if strings.Count(out, marker) != 1 || strings.Index(out, marker) < 200<<10 {
		t.Errorf("the log printed does not mark its cut, after the first 256 KiB, once with %q", marker)
	}
	if len(out) > archive.DefaultLogLimit+len(marker) {
		t.Errorf("%d bytes printed; the archive keeps %d", len(out), archive.DefaultLogLimit)
	}
}

// archiveWithRun opens an archive in the test's directory and records a
// running run in it; the test closes the archive.
func archiveWithRun(t *testing.T) (string, *archive.SQLite, *archive.Run) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &archive.Run{ID: archive.NewID(time.Now()), Operator: "op", Handler: "h", Name: "n", StartedAt: time.Now(), Attempt: 1}
	if err := store.Insert(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	return path, store, run
}

// archiveOfKinds records, in a new archive, runs of objects of three kinds:
// the operator's custom resource, a watched Deployment, and the Operator
// itself for an operator-wide schedule. It returns the archive's path and
// the runs' ids by name.
func archiveOfKinds(t *testing.T) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	start := time.Now().Add(-time.Minute)
	ids := map[string]string{}
	for i, r := range []archive.Run{
		{Operator: "printer", Handler: "announce", Trigger: "create", APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: "default", Name: "hello"},
		{Operator: "printer", Handler: "announce", Trigger: "update", APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: "default", Name: "hello"},
		{Operator: "team-a", Handler: "notify", Trigger: "update", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web"},
		{Operator: "team-a", Handler: "audit", Trigger: "schedule", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web"},
		{Operator: "nightly", Handler: "backup", Trigger: "schedule", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator", Name: "nightly"},
	} {
		r.ID, r.StartedAt, r.Attempt, r.Outcome = archive.NewID(start.Add(time.Duration(i)*time.Second)), start, 1, archive.Succeeded
		r.FinishedAt = start.Add(time.Second)
		if err := store.Insert(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		ids[r.Handler+" "+r.Trigger+" "+r.Name] = r.ID
	}
	return path, ids
}

func TestRunsFilterByKindAndTrigger(t *testing.T) {
	path, ids := archiveOfKinds(t)
	for _, tc := range []struct {
		flags []string
		want  []string // newest first
	}{
		{[]string{"--kind", "Deployment"}, []string{"audit schedule web", "notify update web"}},
		{[]string{"--trigger", "schedule"}, []string{"backup schedule nightly", "audit schedule web"}},
		{[]string{"--kind", "Operator"}, []string{"backup schedule nightly"}},
		{[]string{"--kind", "Deployment", "--trigger", "update"}, []string{"notify update web"}},
		{[]string{"--kind", "Printer", "--object", "default/hello", "--trigger", "create"}, []string{"announce create hello"}},
		{[]string{"--object", "team-a/web", "--trigger", "schedule"}, []string{"audit schedule web"}},
		// An operator's own runs are found by its name, as a cluster-scoped
		// object's are.
		{[]string{"--object", "nightly", "--operator", "nightly"}, []string{"backup schedule nightly"}},
		// Kinds are matched as written in manifests.
		{[]string{"--kind", "deployment"}, nil},
		{[]string{"--trigger", "delete"}, nil},
	} {
		args := append([]string{"runs", "--archive", path, "-o", "json"}, tc.flags...)
		var stdout, stderr bytes.Buffer
		if code := Main(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.flags, code, stderr.String())
		}
		var page archive.Page
		if err := json.Unmarshal(stdout.Bytes(), &page); err != nil {
			t.Fatalf("%v: %v in %s", tc.flags, err, stdout.String())
		}
		var got, want []string
		for _, r := range page.Runs {
			got = append(got, r.ID)
		}
		for _, name := range tc.want {
			want = append(want, ids[name])
		}
		if !slices.Equal(got, want) {
			t.Errorf("opkit runs %s: runs %v, want %v (%q)", strings.Join(tc.flags, " "), got, want, tc.want)
		}
	}
}

func TestRunsShowEachObjectsKindAndAnOperatorWideScheduleAsTheOperators(t *testing.T) {
	path, ids := archiveOfKinds(t)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--archive", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// Each row by run id: its KIND and OBJECT cells.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	header := strings.Fields(lines[0])
	kind, object := slices.Index(header, "KIND"), slices.Index(header, "OBJECT")
	if kind < 0 || object < 0 {
		t.Fatalf("the table has no KIND or OBJECT column:\n%s", stdout.String())
	}
	cells := map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		cells[f[0]] = f[kind] + " " + f[object]
	}
	for name, want := range map[string]string{
		"backup schedule nightly": "Operator nightly",
		"notify update web":       "Deployment team-a/web",
		"announce create hello":   "Printer default/hello",
	} {
		if got := cells[ids[name]]; got != want {
			t.Errorf("the run %s (%s) reads %q in KIND and OBJECT, want %q:\n%s", ids[name], name, got, want, stdout.String())
		}
	}
}

func TestRunsFindAnAdmissionDenialByItsOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	var deniedID string
	for i, r := range []archive.Run{
		{Handler: "check-content", Trigger: "validate", Name: "good", Outcome: archive.Allowed},
		{Handler: "check-content", Trigger: "validate", Name: "bad", Outcome: archive.Denied, Error: "spec.content must not contain <script>"},
		{Handler: "created-by", Trigger: "mutate", Name: "good", Outcome: archive.Allowed},
	} {
		r.ID, r.Operator, r.APIVersion, r.Kind, r.Namespace, r.Attempt = archive.NewID(start.Add(time.Duration(i)*time.Second)), "website", "demo.example.com/v1", "Website", "default", 1
		r.StartedAt, r.FinishedAt = start, start.Add(30*time.Millisecond)
		if err := store.Insert(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Outcome == archive.Denied {
			deniedID = r.ID
		}
	}
	_ = store.Close()
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--archive", path, "--trigger", "validate", "--outcome", "denied"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, deniedID) || !strings.Contains(out, "Denied") || !strings.Contains(out, "spec.content must not contain <script>") || strings.Count(out, "\n") != 2 {
		t.Errorf("opkit runs --trigger validate --outcome denied:\n%s", out)
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main([]string{"runs", "--archive", path, "--outcome", "Refused"}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "Denied") {
		t.Errorf("an unknown outcome: exit %d: %s", code, stderr.String())
	}
}

func TestRunsOfAnOperatorTheArchiveNeverSawIsAnErrorNamingTheKnownOnes(t *testing.T) {
	path, _ := archiveOfKinds(t)
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// An operator known by a webhook delivery alone, and one by a record
	// of a watched object alone: neither has runs.
	if err := store.RecordDelivery(t.Context(), &archive.Delivery{Operator: "hooked", Source: "github", DeliveryID: "d1"}); err != nil {
		t.Fatal(err)
	}
	if err := store.PutHandlerRecord(t.Context(), &archive.HandlerRecord{Operator: "watcher", Key: "uid-1", Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	for _, tc := range []struct {
		flags  []string
		code   int
		stdout string // the whole of it, for the table
		stderr []string
	}{
		{flags: []string{"--operator", "nosuch"}, code: 1,
			stderr: []string{"operator nosuch: the archive " + path + " has no runs, webhook deliveries or records of it; it has runs of nightly, printer, team-a"}},
		{flags: []string{"--operator", "nosuch", "-o", "json"}, code: 1, stderr: []string{"operator nosuch: the archive"}},
		// Known, without runs: said so, and no error.
		{flags: []string{"--operator", "hooked"}, stdout: "No runs: operator hooked has none in the archive " + path + ".\n"},
		{flags: []string{"--operator", "watcher"}, stdout: "No runs: operator watcher has none in the archive " + path + ".\n"},
		// Runs of the operator, none selected by the other flags: the
		// archive read is named.
		{flags: []string{"--operator", "printer", "--trigger", "delete"}, stdout: "No runs of operator printer in " + path + " select these flags.\n"},
		{flags: []string{"--trigger", "delete"}, stdout: "No runs in " + path + " select these flags.\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"runs", "--archive", path}, tc.flags...), &stdout, &stderr)
		if code != tc.code {
			t.Errorf("opkit runs %s: exit %d, want %d; stderr %s", strings.Join(tc.flags, " "), code, tc.code, stderr.String())
		}
		if tc.stdout != "" && stdout.String() != tc.stdout {
			t.Errorf("opkit runs %s printed %q, want %q", strings.Join(tc.flags, " "), stdout.String(), tc.stdout)
		}
		for _, want := range tc.stderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("opkit runs %s: stderr %q lacks %q", strings.Join(tc.flags, " "), stderr.String(), want)
			}
		}
	}
}

// An archive with no run at all is named, and said to be perhaps not the
// engine's: the likely cause is that the engine records elsewhere.
func TestRunsInAnEmptyArchiveNamesItAndSaysWhereAnEnginesRunsAre(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--archive", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "No runs: the archive " + path + " has none at all. An engine records its runs in its own archive: --archive names it"; !strings.HasPrefix(stdout.String(), want) {
		t.Errorf("opkit runs printed %q; want it to begin %q", stdout.String(), want)
	}
	// A run it does not hold, asked of logs, rerun and replay: the
	// archive read is named.
	unknown := archive.NewID(time.Now())
	for _, cmd := range [][]string{{"logs", unknown}, {"rerun", unknown}, {"replay", unknown}} {
		stdout.Reset()
		stderr.Reset()
		code := Main(append(cmd, "--archive", path), &stdout, &stderr)
		if want := "run " + unknown + " is not in the archive " + path + ": opkit runs lists the runs it keeps"; code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("opkit %s: exit %d, stderr %q; want 1 and %q", strings.Join(cmd, " "), code, stderr.String(), want)
		}
	}
}
