package archive_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// lines collects what an archive reports.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, line)
}

// wait waits for a line holding want, and returns it.
func (l *lines) wait(t *testing.T, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, line := range l.all {
			if strings.Contains(line, want) {
				l.mu.Unlock()
				return line
			}
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the archive did not report %q within 10s; it reported %q", want, l.all)
	return ""
}

func record(t *testing.T, s archive.Store, name string) string {
	t.Helper()
	ctx := context.Background()
	r := &archive.Run{ID: archive.NewID(time.Now()), Operator: "op", Handler: "h", Namespace: "ns", Name: name, StartedAt: time.Now()}
	if err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLog(ctx, r.ID, []byte("log of "+name+"\n")); err != nil {
		t.Fatal(err)
	}
	r.Outcome, r.FinishedAt = archive.Succeeded, time.Now()
	if err := s.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// reopened opens the archive at path afresh and returns the names of its
// runs, checking each one's log.
func reopened(t *testing.T, path string) []string {
	t.Helper()
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	page, err := s.List(context.Background(), archive.Query{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range page.Runs {
		names = append(names, r.Name)
		if l, err := s.Logs(context.Background(), r.ID, 0); err != nil || string(l.Data) != "log of "+r.Name+"\n" {
			t.Errorf("run %s: log %v, %v", r.Name, l, err)
		}
	}
	slices.Sort(names)
	return names
}

func TestAnArchiveDeletedWhileInUseIsCopiedBackWithEveryRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	record(t, s, "before-1")
	record(t, s, "before-2")
	if err := os.Remove(path); err != nil { // rm runs.db
		t.Fatal(err)
	}
	record(t, s, "while-gone") // into the open file, before the check
	told.wait(t, "was deleted while in use: its runs were copied back")
	record(t, s, "after")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(reopened(t, path), ",")
	if got != "after,before-1,before-2,while-gone" {
		t.Errorf("the archive holds %s; want every run", got)
	}
}

func TestAnArchiveThatCannotBeCopiedBackRecordsNothingUntilItCan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	record(t, s, "before")
	if err := os.RemoveAll(dir); err != nil { // its directory is gone
		t.Fatal(err)
	}
	told.wait(t, "could not be copied back")
	r := &archive.Run{ID: archive.NewID(time.Now()), Operator: "op", Handler: "h", Name: "refused", StartedAt: time.Now()}
	if err := s.Insert(context.Background(), r); err == nil || !strings.Contains(err.Error(), "no run starts until they are") {
		t.Errorf("Insert into a lost archive: %v, want a refusal saying why", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	told.wait(t, "its runs were copied back")
	record(t, s, "after")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reopened(t, path), ","); got != "after,before" {
		t.Errorf("the archive holds %s; want after,before", got)
	}
}

func TestAnArchiveReplacedWhileInUseKeepsTheOldRunsBesideIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	record(t, s, "old")
	// Another archive takes the path.
	other := filepath.Join(dir, "other.db")
	o, err := archive.OpenSQLite(context.Background(), other, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	record(t, o, "other")
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	line := told.wait(t, "was replaced by another file")
	record(t, s, "new")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reopened(t, path), ","); got != "new,other" {
		t.Errorf("the archive at the path holds %s; want new,other", got)
	}
	recovered, _ := filepath.Glob(path + ".recovered-*")
	if len(recovered) != 1 || !strings.Contains(line, recovered[0]) {
		t.Fatalf("recovered files %v; the report %q should name the one", recovered, line)
	}
	if got := strings.Join(reopened(t, recovered[0]), ","); got != "old" {
		t.Errorf("the recovered archive holds %s; want old", got)
	}
}

func putState(t *testing.T, s archive.Store, key, data string) {
	t.Helper()
	if err := s.PutHandlerRecord(context.Background(), &archive.HandlerRecord{Operator: "op", Key: key, Data: []byte(data), UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// reopenedStates opens the archive at path afresh and returns its
// operator op's handler records, as key=data.
func reopenedStates(t *testing.T, path string) string {
	t.Helper()
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	states, err := s.HandlerRecords(context.Background(), "op")
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, st := range states {
		all = append(all, st.Key+"="+string(st.Data))
	}
	return strings.Join(all, ",")
}

func TestAnArchiveDeletedWhileInUseIsCopiedBackWithItsStateRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, s, "uid-a", `{"handled":1}`)
	putState(t, s, "uid-b", `{"handled":1}`)
	putState(t, s, "schedule/nightly", `{"slot":1}`)
	if err := os.Remove(path); err != nil { // rm runs.db
		t.Fatal(err)
	}
	// Into the open file, before the check.
	putState(t, s, "uid-a", `{"handled":2}`)
	if err := s.DeleteHandlerRecord(context.Background(), "op", "uid-b"); err != nil {
		t.Fatal(err)
	}
	told.wait(t, "was deleted while in use: its runs were copied back")
	putState(t, s, "uid-c", `{"handled":1}`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedStates(t, path), `schedule/nightly={"slot":1},uid-a={"handled":2},uid-c={"handled":1}`; got != want {
		t.Errorf("the archive holds the handler records %s; want %s", got, want)
	}
}

func TestAStateRecordedWhileTheArchiveCannotBeCopiedBackIsKeptWhenItIs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	putState(t, s, "uid-a", `{"handled":1}`)
	if err := os.RemoveAll(dir); err != nil { // its directory is gone
		t.Fatal(err)
	}
	told.wait(t, "could not be copied back")
	// A run that ended is recorded meanwhile, and so is what it did.
	putState(t, s, "uid-a", `{"handled":2}`)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	told.wait(t, "its runs were copied back")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedStates(t, path), `uid-a={"handled":2}`; got != want {
		t.Errorf("the archive holds the handler records %s; want %s", got, want)
	}
}

// TestAnArchiveReplacedWhileInUseCarriesItsStateRecordsOver: the runs of
// the old file stay beside the new one, but its handler records are what the
// running engine has done, and go on in the new file, over the new file's
// own records of the same keys.
func TestAnArchiveReplacedWhileInUseCarriesItsStateRecordsOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	record(t, s, "old")
	putState(t, s, "uid-a", `{"handled":2}`)
	putState(t, s, "schedule/nightly", `{"slot":7}`)
	// Another archive, an older copy say, takes the path.
	other := filepath.Join(dir, "other.db")
	o, err := archive.OpenSQLite(context.Background(), other, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, o, "uid-a", `{"handled":1}`)
	putState(t, o, "uid-z", `{"handled":1}`)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	line := told.wait(t, "was replaced by another file")
	if !strings.Contains(line, "its handler records were carried over") {
		t.Errorf("the report %q does not say the handler records were carried over", line)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedStates(t, path), `schedule/nightly={"slot":7},uid-a={"handled":2},uid-z={"handled":1}`; got != want {
		t.Errorf("the archive at the path holds the handler records %s; want %s", got, want)
	}
	recovered, _ := filepath.Glob(path + ".recovered-*")
	if len(recovered) != 1 {
		t.Fatalf("recovered files %v, want one", recovered)
	}
	if got := strings.Join(reopened(t, recovered[0]), ","); got != "old" {
		t.Errorf("the recovered archive holds %s; want old", got)
	}
}

func recordDelivery(t *testing.T, s archive.Store, deliveryID string) *archive.Delivery {
	t.Helper()
	d := &archive.Delivery{Operator: "op", Source: "github", DeliveryID: deliveryID, Payload: []byte(`{"id":"` + deliveryID + `"}`)}
	if err := s.RecordDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return d
}

func handled(t *testing.T, s archive.Store, d *archive.Delivery) {
	t.Helper()
	d.Outcome, d.Runs = archive.DeliveryHandled, []string{archive.NewID(time.Now())}
	if err := s.FinishDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

// reopenedDeliveries opens the archive at path afresh and returns its
// operator op's deliveries, sorted by the sender's id, as
// deliveryID=outcome, checking each one's payload.
func reopenedDeliveries(t *testing.T, path string) string {
	t.Helper()
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	page, err := s.ListDeliveries(context.Background(), archive.DeliveryQuery{Operator: "op", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, d := range page.Deliveries {
		all = append(all, d.DeliveryID+"="+string(d.Outcome))
		full, err := s.GetDelivery(context.Background(), d.ID)
		if err != nil || string(full.Payload) != `{"id":"`+d.DeliveryID+`"}` {
			t.Errorf("delivery %s: %+v, %v", d.DeliveryID, full, err)
		}
	}
	// By the sender's id: two deliveries recorded in one millisecond
	// have archive ids in either order.
	slices.Sort(all)
	return strings.Join(all, ",")
}

func TestAnArchiveDeletedWhileInUseIsCopiedBackWithItsDeliveries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: time.Hour, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	a := recordDelivery(t, s, "a")
	recordDelivery(t, s, "b")
	if err := os.Remove(path); err != nil { // rm runs.db
		t.Fatal(err)
	}
	// Handled in the open file, before any check.
	handled(t, s, a)
	// A delivery is not acknowledged into the deleted file: the file is
	// copied back first.
	recordDelivery(t, s, "c")
	told.wait(t, "was deleted while in use: its runs were copied back")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the archive is not back at its path after RecordDelivery: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedDeliveries(t, path), "a=Handled,b=Pending,c=Pending"; got != want {
		t.Errorf("the archive holds the deliveries %s; want %s", got, want)
	}
}

func TestADeliveryIsRefusedWhileTheArchiveCannotBeCopiedBackAndItsHandlingKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	a := recordDelivery(t, s, "a")
	if err := os.RemoveAll(dir); err != nil { // its directory is gone
		t.Fatal(err)
	}
	told.wait(t, "could not be copied back")
	d := &archive.Delivery{Operator: "op", Source: "github", DeliveryID: "b"}
	if err := s.RecordDelivery(context.Background(), d); err == nil || !strings.Contains(err.Error(), "could not be copied back") {
		t.Errorf("RecordDelivery into a lost archive: %v, want a refusal saying why (the sender is not acknowledged)", err)
	}
	// A delivery accepted before is handled meanwhile: that is recorded.
	handled(t, s, a)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	told.wait(t, "its runs were copied back")
	recordDelivery(t, s, "b") // the sender's retry
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedDeliveries(t, path), "a=Handled,b=Pending"; got != want {
		t.Errorf("the archive holds the deliveries %s; want %s", got, want)
	}
}

// TestAnArchiveReplacedWhileInUseCarriesItsDeliveriesOver: the deliveries
// are what the running engine has received and done: the pending ones are
// still to handle, and the accepted ones' keys still refuse their replays.
// They go on in the new file; one the new file has too takes the open
// file's outcome.
func TestAnArchiveReplacedWhileInUseCarriesItsDeliveriesOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	var told lines
	s, err := archive.OpenSQLite(context.Background(), path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	a := recordDelivery(t, s, "a")
	recordDelivery(t, s, "b")
	handled(t, s, a)
	// An older copy of the archive takes the path: it has a, still
	// pending, and a delivery of its own.
	older := filepath.Join(dir, "older.db")
	o, err := archive.OpenSQLite(context.Background(), older, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	copyOfA := &archive.Delivery{ID: a.ID, Operator: "op", Source: "github", DeliveryID: "a", ReceivedAt: a.ReceivedAt, Payload: a.Payload}
	if err := o.RecordDelivery(context.Background(), copyOfA); err != nil {
		t.Fatal(err)
	}
	recordDelivery(t, o, "z")
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(older, path); err != nil {
		t.Fatal(err)
	}
	line := told.wait(t, "was replaced by another file")
	if !strings.Contains(line, "its webhook deliveries were carried over") {
		t.Errorf("the report %q does not say the deliveries were carried over", line)
	}
	if err := s.RecordDelivery(context.Background(), &archive.Delivery{Operator: "op", Source: "github", DeliveryID: "b"}); !errors.Is(err, archive.ErrDuplicateDelivery) {
		t.Errorf("a replay of b after the replacement: %v, want ErrDuplicateDelivery", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := reopenedDeliveries(t, path), "a=Handled,b=Pending,z=Pending"; got != want {
		t.Errorf("the archive at the path holds the deliveries %s; want %s", got, want)
	}
}

// TestAnArchiveReplacedWhileInUseCarriesItsSourceCursorsOver: a poll's
// cursor is where the running engine stands; the file that takes the path
// (an older copy) would make it deliver again what it delivered, or, with
// a newer cursor of its own, miss nothing but keep a stale one. The open
// file's cursor goes on.
func TestAnArchiveReplacedWhileInUseCarriesItsSourceCursorsOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	var told lines
	ctx := context.Background()
	s, err := archive.OpenSQLite(ctx, path, archive.Options{CheckEvery: 200 * time.Millisecond, Log: told.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetCursor(ctx, "op", "github", "9042"); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	o, err := archive.OpenSQLite(ctx, other, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"github", "8000"}, {"other", "17"}} {
		if err := o.SetCursor(ctx, "op", c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	line := told.wait(t, "was replaced by another file")
	if !strings.Contains(line, "its source cursors were carried over") {
		t.Errorf("the report %q does not say the source cursors were carried over", line)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	for src, want := range map[string]string{"github": "9042", "other": "17"} {
		if got, err := r.Cursor(ctx, "op", src); err != nil || got != want {
			t.Errorf("cursor of op/%s after the replacement: %q (%v), want %q", src, got, err, want)
		}
	}
}
