// Package archivetest is the conformance suite every archive.Store must
// pass. A store's own tests call Run with a function that opens an empty
// store.
package archivetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// Open returns a new, empty store with the given options. The suite closes
// it.
type Open func(t *testing.T, opts archive.Options) archive.Store

// Run runs the conformance suite.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Open)
	}{
		{"RunsRoundTrip", runsRoundTrip},
		{"RunsKeepNoDiffValueTooDeep", runsKeepNoDiffValueTooDeep},
		{"RerunsLinkedBothWaysWithInputAndResult", rerunsLinkedBothWaysWithInputAndResult},
		{"FinishUnknownRun", finishUnknownRun},
		{"LogsAppendReadAndCap", logsAppendReadAndCap},
		{"FinishAppendsTheLogTail", finishAppendsTheLogTail},
		{"FinishKeepsTheLatestEndOnce", finishKeepsTheLatestEndOnce},
		{"ListFiltersAndPages", listFiltersAndPages},
		{"ListTimeBounds", listTimeBounds},
		{"ListRejectsForeignCursor", listRejectsForeignCursor},
		{"CountsByOperatorSince", countsByOperatorSince},
		{"SucceededByKey", succeededByKey},
		{"CancelRunning", cancelRunning},
		{"SkippedRunsFold", skippedRunsFold},
		{"PruneByAgeAndCount", pruneByAgeAndCount},
		{"ConcurrentWriters", concurrentWriters},
		{"StatesRoundTrip", statesRoundTrip},
		{"StatesReplace", statesReplace},
		{"StatesByOperatorOrderedByKey", statesByOperatorOrderedByKey},
		{"StatesDelete", statesDelete},
		{"StatesOutliveRuns", statesOutliveRuns},
		{"StatesKeepDataExactly", statesKeepDataExactly},
		{"StatesConcurrentWriters", statesConcurrentWriters},
		{"StatesWrittenWithARunsStartAndEnd", statesWrittenWithARunsStartAndEnd},
		{"DeliveriesRoundTrip", deliveriesRoundTrip},
		{"DeliveriesRefuseBadRecords", deliveriesRefuseBadRecords},
		{"DeliveriesCapPayload", deliveriesCapPayload},
		{"DeliveriesRefuseReplays", deliveriesRefuseReplays},
		{"DeliveriesRedeliveriesLinkedBothWaysAndNoReplays", deliveriesRedeliveries},
		{"DeliveriesConcurrentFloodExactlyOnce", deliveriesConcurrentFloodExactlyOnce},
		{"DeliveriesPendingOldestFirst", deliveriesPendingOldestFirst},
		{"DeliveriesListFiltersAndPages", deliveriesListFiltersAndPages},
		{"DeliveriesPruneKeepsPending", deliveriesPruneKeepsPending},
		{"DeliveriesSurviveCancelRunning", deliveriesSurviveCancelRunning},
		{"DeliveriesPendingListTheirRunsSoFar", deliveriesPendingListTheirRunsSoFar},
		{"CursorsRoundTripPerOperatorAndSource", cursorsRoundTripPerOperatorAndSource},
		{"CursorsRefuseBadKeys", cursorsRefuseBadKeys},
		{"CursorsOutlivePruneAndCancelRunning", cursorsOutlivePruneAndCancelRunning},
		{"CursorsConcurrentWriters", cursorsConcurrentWriters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

func openStore(t *testing.T, open Open, opts archive.Options) archive.Store {
	s := open(t, opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// concurrently runs work(0) to work(n-1), each in a goroutine of its own,
// all at once, and returns when all are done, failing t with every error
// they report through fail: from the test's goroutine, once they are
// done.
func concurrently(t *testing.T, n int, work func(i int, fail func(error))) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for i := range n {
		wg.Go(func() { work(i, fail) })
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
}

// newRun returns a Running run started at t.
func newRun(t time.Time, op, ns, name, handler string) *archive.Run {
	uid := "uid-" + ns + "-" + name
	return &archive.Run{
		ID: archive.NewID(t), Operator: op, Handler: handler, Action: "exec", Trigger: "update", APIVersion: "demo.example.com/v1", Kind: "Printer",
		Namespace: ns, Name: name, UID: uid, Generation: 2, Key: uid + "/2/" + handler, Attempt: 1,
		StartedAt: t.UTC(),
	}
}

func insert(t *testing.T, s archive.Store, r *archive.Run) {
	t.Helper()
	if err := s.Insert(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func finish(t *testing.T, s archive.Store, r *archive.Run, o archive.Outcome) {
	t.Helper()
	r.Outcome, r.FinishedAt = o, r.StartedAt.Add(time.Second)
	if o.Failure() {
		r.Error = "exit status 1"
	}
	if err := s.Finish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func runsRoundTrip(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Microsecond)
	r := newRun(start, "printer", "default", "hello", "announce")
	r.Diff = []archive.Change{{Op: "change", Path: "spec.text", Old: "a", New: "b"}, {Op: "add", Path: "spec.color", New: "red"}}
	// A state transition a person decided names them.
	r.Actor = "jane@example.com"
	insert(t, s, r)
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != archive.Running || !got.FinishedAt.IsZero() {
		t.Errorf("new run: outcome %q finished %v, want Running and not finished", got.Outcome, got.FinishedAt)
	}
	r.Outcome = archive.Running
	if !reflect.DeepEqual(got, r) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, r)
	}
	r.Outcome, r.FinishedAt, r.Error = archive.Failed, start.Add(2*time.Second), "exit status 75: temporary"
	r.NextRetryAt = start.Add(10 * time.Second)
	r.Writes = []string{"status patch", "event Normal Announced"}
	if err := s.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Get(ctx, r.ID); !reflect.DeepEqual(got, r) {
		t.Errorf("after Finish\n%+v\nwant\n%+v", got, r)
	}
	if page, err := s.List(ctx, archive.Query{UID: r.UID}); err != nil || len(page.Runs) != 1 || !reflect.DeepEqual(&page.Runs[0], r) {
		t.Errorf("listed: %+v (%v), want the run as written, its actor included", page, err)
	}

	// A run in a runner names it from the claim on, and after its end
	// (a Finish that does not name it keeps it).
	onRunner := newRun(start.Add(time.Second), "printer", "default", "hello", "announce")
	insert(t, s, onRunner)
	if err := s.SetRunner(ctx, onRunner.ID, "printer-runner-0a1b2c3d-x7k2p"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, onRunner.ID); err != nil || got.Runner != "printer-runner-0a1b2c3d-x7k2p" || got.Outcome != archive.Running {
		t.Errorf("a running run after SetRunner: %+v (%v), want it Running on runner printer-runner-0a1b2c3d-x7k2p", got, err)
	}
	finish(t, s, onRunner, archive.Succeeded)
	onRunner.Runner = "printer-runner-0a1b2c3d-x7k2p"
	if page, err := s.List(ctx, archive.Query{UID: r.UID, Outcome: archive.Succeeded}); err != nil || len(page.Runs) != 1 || !reflect.DeepEqual(&page.Runs[0], onRunner) {
		t.Errorf("listed: %+v (%v), want\n%+v: its runner kept by Finish", page, err, onRunner)
	}
	if err := s.SetRunner(ctx, archive.NewID(start), "x"); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("SetRunner of an unknown run: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, archive.NewID(start)); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
	}
	if err := s.Insert(ctx, &archive.Run{ID: "not-an-id"}); err == nil {
		t.Error("Insert accepted a malformed id")
	}
}

// runsKeepNoDiffValueTooDeep: a diff's value nested deeper than
// jsondepth.Max (a field of an object 10,000 deep, as the API server
// takes) is kept as a note, the others as they are, so that every reader
// can print the run.
func runsKeepNoDiffValueTooDeep(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	deep := any(map[string]any{})
	for range 9_990 {
		deep = []any{deep}
	}
	r := newRun(time.Now().UTC().Truncate(time.Microsecond), "printer", "default", "deep", "announce")
	r.Diff = []archive.Change{{Op: "change", Path: "spec.deep", Old: "a", New: deep}, {Op: "add", Path: "spec.text", New: map[string]any{"a": []any{"b"}}}}
	insert(t, s, r)
	got, err := s.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []archive.Change{{Op: "change", Path: "spec.deep", Old: "a", New: "(a value nested deeper than 100 objects and arrays, not kept)"}, r.Diff[1]}
	if !reflect.DeepEqual(got.Diff, want) {
		t.Errorf("diff read back: %v\nwant %v", got.Diff, want)
	}
	if _, err := json.MarshalIndent(got, "", "  "); err != nil {
		t.Errorf("the run read back does not print as JSON: %v", err)
	}
}

func finishUnknownRun(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	r := newRun(time.Now(), "op", "ns", "n", "h")
	r.Outcome = archive.Succeeded
	if err := s.Finish(context.Background(), r); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Finish of an unknown run: %v, want ErrNotFound", err)
	}
	if err := s.AppendLog(context.Background(), r.ID, []byte("x")); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("AppendLog of an unknown run: %v, want ErrNotFound", err)
	}
	if _, err := s.Logs(context.Background(), r.ID, 0); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Logs of an unknown run: %v, want ErrNotFound", err)
	}
}

func logsAppendReadAndCap(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{LogLimit: 100, LogHead: 25})
	ctx := context.Background()
	r := newRun(time.Now(), "op", "ns", "n", "h")
	insert(t, s, r)
	chunks := [][]byte{[]byte("line one\n"), []byte("line two\n"), bytes.Repeat([]byte("x"), 50)}
	var want []byte
	for _, c := range chunks {
		if err := s.AppendLog(ctx, r.ID, c); err != nil {
			t.Fatal(err)
		}
		want = append(want, c...)
	}
	l, err := s.Logs(ctx, r.ID, 0)
	if err != nil || l.Truncated || !bytes.Equal(l.Data, want) || l.Next != int64(len(want)) {
		t.Fatalf("Logs = %+v, %v; want %q up to %d, not truncated", l, err, want, len(want))
	}
	// From an offset inside a chunk.
	if l, _ := s.Logs(ctx, r.ID, 13); !bytes.Equal(l.Data, want[13:]) {
		t.Errorf("Logs from 13 = %q, want %q", l.Data, want[13:])
	}
	// A reader following the log sees the head whole, then where the
	// tail now starts, after a marked cut.
	follower := int64(30)
	// Past the cap: the first 25 bytes and the last 75 are kept, the
	// middle is cut.
	var stream []byte
	stream = append(stream, want...)
	for _, c := range [][]byte{bytes.Repeat([]byte("y"), 80), []byte("after the cap\n"), bytes.Repeat([]byte("z"), 500), []byte("the error\n")} {
		if err := s.AppendLog(ctx, r.ID, c); err != nil {
			t.Fatal(err)
		}
		stream = append(stream, c...)
	}
	l, _ = s.Logs(ctx, r.ID, 0)
	wantLog := string(stream[:25]) + archive.CutMarker(int64(len(stream)-100)) + string(stream[len(stream)-75:])
	if string(l.Data) != wantLog || !l.Truncated || l.Next != int64(len(stream)) {
		t.Errorf("capped log: %q, truncated %v, next %d; want %q, truncated, next %d", l.Data, l.Truncated, l.Next, wantLog, len(stream))
	}
	run, _ := s.Get(ctx, r.ID)
	if run.LogBytes != int64(len(stream)) || !run.LogTruncated {
		t.Errorf("run says %d log bytes, truncated %v; want %d (all the handler wrote), true", run.LogBytes, run.LogTruncated, len(stream))
	}
	l, _ = s.Logs(ctx, r.ID, follower)
	if want := archive.CutMarker(int64(len(stream)-75)-follower) + string(stream[len(stream)-75:]); string(l.Data) != want {
		t.Errorf("Logs from %d = %q, want %q", follower, l.Data, want)
	}
	if l, _ := s.Logs(ctx, r.ID, int64(len(stream))); len(l.Data) != 0 || l.Next != int64(len(stream)) {
		t.Errorf("Logs from the end = %+v, want nothing, next %d", l, len(stream))
	}

	// One write far larger than the limit keeps its start and end.
	r2 := newRun(time.Now(), "op", "ns", "n2", "h")
	insert(t, s, r2)
	huge := append(append([]byte("first line\n"), bytes.Repeat([]byte("-"), 10000)...), "last line\n"...)
	if err := s.AppendLog(ctx, r2.ID, huge); err != nil {
		t.Fatal(err)
	}
	l, _ = s.Logs(ctx, r2.ID, 0)
	if want := string(huge[:25]) + archive.CutMarker(int64(len(huge)-100)) + string(huge[len(huge)-75:]); string(l.Data) != want {
		t.Errorf("a huge write kept %q, want %q", l.Data, want)
	}
}

// finishAppendsTheLogTail: the end of a run's log, held by the engine
// until the run ends, is appended by Finish as AppendLog would append it,
// within the log's limits; a Finish that fails appends nothing.
func finishAppendsTheLogTail(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{LogLimit: 100, LogHead: 25})
	ctx := context.Background()
	r := newRun(time.Now(), "op", "ns", "n", "h")
	insert(t, s, r)
	if err := s.AppendLog(ctx, r.ID, []byte("first, while it ran\n")); err != nil {
		t.Fatal(err)
	}
	r.LogTail = []byte("last, at its end\n")
	finish(t, s, r, archive.Failed)
	want := "first, while it ran\nlast, at its end\n"
	l, err := s.Logs(ctx, r.ID, 0)
	if err != nil || string(l.Data) != want || l.Truncated || l.Next != int64(len(want)) {
		t.Fatalf("Logs = %+v, %v; want %q whole", l, err, want)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil || got.Outcome != archive.Failed || got.LogBytes != int64(len(want)) || got.LogTruncated {
		t.Fatalf("Get = %+v, %v; want Failed with %d log bytes", got, err, len(want))
	}

	// Past the limit, the tail is cut as an append is.
	r2 := newRun(time.Now(), "op", "ns", "n2", "h")
	insert(t, s, r2)
	r2.LogTail = append(append([]byte("first line\n"), bytes.Repeat([]byte("-"), 1000)...), "last line\n"...)
	finish(t, s, r2, archive.Succeeded)
	l, _ = s.Logs(ctx, r2.ID, 0)
	tail := r2.LogTail
	if want := string(tail[:25]) + archive.CutMarker(int64(len(tail)-100)) + string(tail[len(tail)-75:]); string(l.Data) != want || !l.Truncated {
		t.Errorf("a long tail kept %q (truncated %v), want %q, truncated", l.Data, l.Truncated, want)
	}

	// A run with no tail keeps the log it had.
	r3 := newRun(time.Now(), "op", "ns", "n3", "h")
	insert(t, s, r3)
	finish(t, s, r3, archive.Succeeded)
	if l, err := s.Logs(ctx, r3.ID, 0); err != nil || len(l.Data) != 0 || l.Next != 0 {
		t.Errorf("the log of a run finished without a tail: %+v, %v; want none", l, err)
	}

	// An unknown run's end is refused, its tail with it.
	r4 := newRun(time.Now(), "op", "ns", "n4", "h")
	r4.Outcome, r4.LogTail = archive.Succeeded, []byte("lost\n")
	if err := s.Finish(ctx, r4); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("Finish with a tail of an unknown run: %v, want ErrNotFound", err)
	}
}

func succeededByKey(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	r1 := newRun(time.Now(), "op", "ns", "n", "h")
	insert(t, s, r1)
	finish(t, s, r1, archive.Failed)
	if ok, err := s.Succeeded(ctx, r1.Key); err != nil || ok {
		t.Errorf("after a failed run: Succeeded = %v, %v; want false", ok, err)
	}
	r2 := newRun(time.Now(), "op", "ns", "n", "h")
	r2.Attempt = 2
	insert(t, s, r2)
	finish(t, s, r2, archive.Succeeded)
	if ok, err := s.Succeeded(ctx, r1.Key); err != nil || !ok {
		t.Errorf("after a succeeded run: Succeeded = %v, %v; want true", ok, err)
	}
	if ok, _ := s.Succeeded(ctx, "other/1/h"); ok {
		t.Error("Succeeded is true for a key never run")
	}
	// The run itself, with its result: what an engine applies when a
	// crash kept the one before from applying it.
	if run, err := s.SucceededRun(ctx, "other/1/h"); err != nil || run != nil {
		t.Errorf("SucceededRun of a key never run: %v, %v; want nil", run, err)
	}
	r3 := newRun(time.Now().Add(time.Millisecond), "op", "ns", "n", "h")
	r3.Attempt = 3
	insert(t, s, r3)
	r3.Result = json.RawMessage(`{"status":{"handled":true}}`)
	finish(t, s, r3, archive.Succeeded)
	run, err := s.SucceededRun(ctx, r1.Key)
	if err != nil || run == nil || run.ID != r3.ID || string(run.Result) != string(r3.Result) {
		t.Errorf("SucceededRun = %+v, %v; want the latest, %s, with its result %s", run, err, r3.ID, r3.Result)
	}
}

// skippedRunsFold: a Skipped run replaces the earlier Skipped runs of its
// object and handler, and no other run.
func skippedRunsFold(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	start := time.Now().Add(-time.Hour)
	var skipped []*archive.Run
	for i := range 3 {
		r := newRun(start.Add(time.Duration(i)*time.Minute), "op", "ns", "a", "check")
		insert(t, s, r)
		if err := s.AppendLog(ctx, r.ID, []byte("not due\n")); err != nil {
			t.Fatal(err)
		}
		finish(t, s, r, archive.Skipped)
		skipped = append(skipped, r)
	}
	// Kept: another handler's, another object's, and runs of other outcomes.
	kept := []*archive.Run{
		newRun(start.Add(10*time.Second), "op", "ns", "a", "other"),
		newRun(start.Add(20*time.Second), "op", "ns", "b", "check"),
		newRun(start.Add(30*time.Second), "op", "ns", "a", "check"),
	}
	outcomes := []archive.Outcome{archive.Skipped, archive.Skipped, archive.Succeeded}
	for i, r := range kept {
		insert(t, s, r)
		finish(t, s, r, outcomes[i])
	}
	last := newRun(start.Add(5*time.Minute), "op", "ns", "a", "check")
	insert(t, s, last)
	finish(t, s, last, archive.Skipped)

	for _, r := range skipped {
		if _, err := s.Get(ctx, r.ID); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("skipped run %s is still there (%v); a newer skipped run replaces it", r.ID, err)
		}
		if _, err := s.Logs(ctx, r.ID, 0); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("the log of the replaced run %s: %v, want ErrNotFound", r.ID, err)
		}
	}
	for _, r := range append(kept, last) {
		if got, err := s.Get(ctx, r.ID); err != nil || got.Outcome != r.Outcome {
			t.Errorf("run %s (%s %s %s): %+v, %v; want it kept", r.ID, r.Name, r.Handler, r.Outcome, got, err)
		}
	}
}

func cancelRunning(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	running := newRun(time.Now(), "op", "ns", "a", "h")
	done := newRun(time.Now(), "op", "ns", "b", "h")
	insert(t, s, running)
	insert(t, s, done)
	finish(t, s, done, archive.Succeeded)
	n, err := s.CancelRunning(ctx, "the engine stopped during the run")
	if err != nil || n != 1 {
		t.Fatalf("CancelRunning = %d, %v; want 1", n, err)
	}
	got, _ := s.Get(ctx, running.ID)
	if got.Outcome != archive.Cancelled || got.Error != "the engine stopped during the run" || got.FinishedAt.IsZero() {
		t.Errorf("interrupted run: %+v", got)
	}
	if got, _ := s.Get(ctx, done.ID); got.Outcome != archive.Succeeded {
		t.Errorf("finished run became %s", got.Outcome)
	}
}

func pruneByAgeAndCount(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	now := time.Now()
	var runs []*archive.Run
	for i := range 10 {
		// Runs 0-4 are two days old, 5-9 recent; run 0 is still running.
		r := newRun(now.Add(-pruneAge(i)), "op", "ns", "n", "h")
		insert(t, s, r)
		if err := s.AppendLog(ctx, r.ID, []byte("log")); err != nil {
			t.Fatal(err)
		}
		if i != 0 {
			finish(t, s, r, archive.Succeeded)
		}
		runs = append(runs, r)
	}
	n, err := s.Prune(ctx, archive.Retention{MaxAge: 24 * time.Hour})
	if err != nil || n != 4 {
		t.Fatalf("Prune by age = %d, %v; want 4 (the old finished runs)", n, err)
	}
	if _, err := s.Get(ctx, runs[0].ID); err != nil {
		t.Errorf("the running run was pruned: %v", err)
	}
	if _, err := s.Logs(ctx, runs[1].ID, 0); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("a pruned run's log is still there: %v", err)
	}
	n, err = s.Prune(ctx, archive.Retention{MaxRuns: 3})
	if err != nil || n != 2 {
		t.Fatalf("Prune to 3 runs = %d, %v; want 2", n, err)
	}
	if got, want := allRuns(t, s, archive.Query{}), []string{runs[9].ID, runs[8].ID, runs[7].ID, runs[0].ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want the 3 newest and the running one %v", got, want)
	}
}

// pruneAge is the age of the i-th of the ten records the pruning checks
// make, oldest first, a minute apart: 0-4 are two days old, past a day's
// retention, and 5-9 recent.
func pruneAge(i int) time.Duration {
	age := time.Duration(10-i) * time.Minute
	if i < 5 {
		age += 48 * time.Hour
	}
	return age
}

func concurrentWriters(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	concurrently(t, 8, func(w int, fail func(error)) {
		for i := range 25 {
			r := newRun(time.Now(), "op", "ns", fmt.Sprintf("w%d", w), "h")
			if err := s.Insert(ctx, r); err != nil {
				fail(err)
				continue
			}
			if err := s.AppendLog(ctx, r.ID, []byte(fmt.Sprintf("run %d\n", i))); err != nil {
				fail(err)
			}
			r.Outcome, r.FinishedAt = archive.Succeeded, time.Now()
			if err := s.Finish(ctx, r); err != nil {
				fail(err)
			}
		}
	})
	page, err := s.List(ctx, archive.Query{Outcome: archive.Succeeded, Limit: 1000})
	if err != nil || len(page.Runs) != 200 {
		t.Errorf("%d succeeded runs (%v), want 200", len(page.Runs), err)
	}
}

// rerunsLinkedBothWaysWithInputAndResult: a run keeps its binding context
// and its result, which Get gives and List does not; a re-run names the
// run it repeats, its actor and reason, and Get of the original lists its
// re-runs, oldest first.
func rerunsLinkedBothWaysWithInputAndResult(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Microsecond)
	orig := newRun(start, "printer", "default", "hello", "announce")
	orig.Input = json.RawMessage(`{"operator":"printer","handler":"announce","trigger":"update","object":{"spec":{"text":"é \"quoted\""}}}`)
	insert(t, s, orig)
	orig.Result = json.RawMessage(`{"status":{"announced":true}}`)
	finish(t, s, orig, archive.Succeeded)

	got, err := s.Get(ctx, orig.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Input) != string(orig.Input) || string(got.Result) != string(orig.Result) {
		t.Errorf("Get: input %s result %s, want %s and %s", got.Input, got.Result, orig.Input, orig.Result)
	}
	if len(got.Reruns) != 0 || got.RerunOf != "" {
		t.Errorf("Get of a run never re-run: reruns %v rerunOf %q, want none", got.Reruns, got.RerunOf)
	}

	var reruns []string
	for i := 1; i <= 2; i++ {
		r := newRun(start.Add(time.Duration(i)*time.Second), "printer", "default", "hello", "announce")
		r.Trigger, r.Key = "rerun", fmt.Sprintf("%s/rerun/%d", orig.Key, i)
		r.RerunOf, r.Actor, r.Reason = orig.ID, "jane@example.com", "the handler's bug is fixed"
		insert(t, s, r)
		reruns = append(reruns, r.ID)
		got, err := s.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.RerunOf != orig.ID || got.Actor != "jane@example.com" || got.Reason != "the handler's bug is fixed" || got.Key != r.Key {
			t.Errorf("re-run read back: rerunOf %q actor %q reason %q key %q, want %s, jane@example.com, the reason and %s", got.RerunOf, got.Actor, got.Reason, got.Key, orig.ID, r.Key)
		}
	}
	if got, err = s.Get(ctx, orig.ID); err != nil || !reflect.DeepEqual(got.Reruns, reruns) {
		t.Errorf("the original's re-runs: %v (%v), want %v, oldest first", got.Reruns, err, reruns)
	}

	page, err := s.List(ctx, archive.Query{UID: orig.UID})
	if err != nil || len(page.Runs) != 3 {
		t.Fatalf("listed %+v (%v), want 3 runs", page, err)
	}
	for _, r := range page.Runs {
		if r.Input != nil || r.Result != nil || r.Reruns != nil {
			t.Errorf("List gave run %s its input, result or re-runs: List gives none", r.ID)
		}
		if r.ID == reruns[0] && (r.RerunOf != orig.ID || r.Reason == "") {
			t.Errorf("List: re-run %s without its rerunOf or reason: %+v", r.ID, r)
		}
	}
}

// finishKeepsTheLatestEndOnce: the same end written again (a retry of a
// write whose commit went through) appends its tail once; an older end
// does not undo a newer one, and its tail is kept; a Cancelled end gives
// way to any other.
func finishKeepsTheLatestEndOnce(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Microsecond)
	end := func(r *archive.Run, o archive.Outcome, after time.Duration, tail string) {
		t.Helper()
		e := *r
		e.Outcome, e.FinishedAt, e.LogTail = o, start.Add(after), []byte(tail)
		if err := s.Finish(ctx, &e); err != nil {
			t.Fatalf("Finish %s at +%s: %v", o, after, err)
		}
	}
	check := func(r *archive.Run, o archive.Outcome, after time.Duration, log string) {
		t.Helper()
		got, err := s.Get(ctx, r.ID)
		if err != nil || got.Outcome != o || !got.FinishedAt.Equal(start.Add(after)) {
			t.Fatalf("Get = %+v, %v; want %s at +%s", got, err, o, after)
		}
		if l, err := s.Logs(ctx, r.ID, 0); err != nil || string(l.Data) != log {
			t.Fatalf("Logs = %q, %v; want %q", l.Data, err, log)
		}
	}
	r := newRun(start, "op", "ns", "n", "h")
	insert(t, s, r)
	end(r, archive.Failed, time.Second, "failed\n")
	end(r, archive.Failed, time.Second, "failed\n") // the same end again
	check(r, archive.Failed, time.Second, "failed\n")
	// An older end, kept and retried late: its outcome gives way, its
	// log lines are kept.
	end(r, archive.Succeeded, time.Second/2, "older\n")
	check(r, archive.Failed, time.Second, "failed\nolder\n")
	end(r, archive.Succeeded, 2*time.Second, "again\n") // the run finished again, later
	check(r, archive.Succeeded, 2*time.Second, "failed\nolder\nagain\n")

	c := newRun(start, "op", "ns", "c", "h")
	insert(t, s, c)
	end(c, archive.Cancelled, 5*time.Second, "cancelled\n")
	end(c, archive.Cancelled, 5*time.Second, "cancelled\n")
	check(c, archive.Cancelled, 5*time.Second, "cancelled\n")
	end(c, archive.Succeeded, time.Second, "its real end\n")
	check(c, archive.Succeeded, time.Second, "cancelled\nits real end\n")
}
