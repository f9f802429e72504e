package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	go func() { done <- printLogs(ctx, store, run.ID, true, &stdout, &stderr) }()
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

func TestCleanWriterCleansALogSplitAnywhereAsAWhole(t *testing.T) {
	log := hostileLog + "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ é ü 日本\r\nend"
	want := archive.CleanLog([]byte(log))
	for cut := range len(log) + 1 {
		for second := cut; second <= len(log); second += 7 {
			var out bytes.Buffer
			w := &cleanWriter{w: &out}
			for _, part := range []string{log[:cut], log[cut:second], log[second:]} {
				if _, err := w.Write([]byte(part)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("split at %d and %d: %q, want %q", cut, second, out.String(), want)
			}
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
