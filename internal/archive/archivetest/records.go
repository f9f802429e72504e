package archivetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The subtests of handler records (archive.HandlerRecordStore).

// newState returns the handler record of a watched Deployment.
func newRecord(op, key string, data string, at time.Time) *archive.HandlerRecord {
	return &archive.HandlerRecord{
		Operator: op, Key: key, APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web-" + key,
		Data: []byte(data), UpdatedAt: at.UTC(),
	}
}

func putRecord(t *testing.T, s archive.Store, st *archive.HandlerRecord) {
	t.Helper()
	if err := s.PutHandlerRecord(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// states returns an operator's handler records, failing the test on an
// error.
func states(t *testing.T, s archive.Store, op string) []archive.HandlerRecord {
	t.Helper()
	got, err := s.HandlerRecords(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sameState reports whether two records are equal, their times as
// instants.
func sameRecord(a, b archive.HandlerRecord) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return false
	}
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	if !bytes.Equal(a.Data, b.Data) {
		return false
	}
	a.Data, b.Data = nil, nil
	return reflect.DeepEqual(a, b)
}

func statesRoundTrip(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	if got := states(t, s, "printer"); len(got) != 0 {
		t.Errorf("a new store has handler records %+v", got)
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	watched := newRecord("printer", "3f0c2a8e-uid", `{"handled":{"announce":7},"when":{"ready":true}}`, at)
	schedule := &archive.HandlerRecord{Operator: "printer", Key: "schedule/nightly", Data: []byte(`{"slot":"2026-11-22T00:00:00Z"}`), UpdatedAt: at.Add(time.Minute)}
	putRecord(t, s, watched)
	putRecord(t, s, schedule)
	got := states(t, s, "printer")
	if len(got) != 2 || !sameRecord(got[0], *watched) || !sameRecord(got[1], *schedule) {
		t.Errorf("read back\n%+v\nwant\n%+v\n%+v", got, *watched, *schedule)
	}

	// A zero UpdatedAt is stored as the time of the call.
	before := time.Now()
	putRecord(t, s, &archive.HandlerRecord{Operator: "printer", Key: "schedule/hourly", Data: []byte(`{}`)})
	after := time.Now()
	for _, st := range states(t, s, "printer") {
		if st.Key == "schedule/hourly" && (st.UpdatedAt.Before(before.Truncate(time.Microsecond)) || st.UpdatedAt.After(after)) {
			t.Errorf("a record put without UpdatedAt has %v, want the time of the call, in [%v, %v]", st.UpdatedAt, before, after)
		}
	}

	for _, bad := range []*archive.HandlerRecord{{Operator: "printer", Data: []byte(`{}`)}, {Key: "uid", Data: []byte(`{}`)}} {
		if err := s.PutHandlerRecord(ctx, bad); err == nil {
			t.Errorf("PutState accepted a record without an operator or a key: %+v", bad)
		}
	}
}

func statesReplace(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	at := time.Now().Add(-time.Hour)
	putRecord(t, s, newRecord("printer", "uid-1", `{"handled":{"announce":1},"extra":"dropped on replace"}`, at))
	// The object was renamed and moved meanwhile; the record is replaced
	// whole, not merged.
	second := &archive.HandlerRecord{Operator: "printer", Key: "uid-1", APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", Data: []byte(`{"handled":{"announce":2}}`), UpdatedAt: at.Add(time.Minute)}
	putRecord(t, s, second)
	got := states(t, s, "printer")
	if len(got) != 1 || !sameRecord(got[0], *second) {
		t.Errorf("after a replace: %+v, want only %+v", got, *second)
	}
}

func statesByOperatorOrderedByKey(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	at := time.Now()
	keys := []string{"uid-b", "schedule/nightly", "uid-a", "Uid-C", "schedule/hourly", "uid-a0", "uid-"}
	for _, op := range []string{"printer", "website"} {
		for _, k := range keys {
			putRecord(t, s, newRecord(op, k, `{"of":"`+op+`"}`, at))
		}
	}
	// An operator whose name starts with another's.
	putRecord(t, s, newRecord("printer-2", "uid-a", `{}`, at))
	// Keys in byte order.
	want := []string{"Uid-C", "schedule/hourly", "schedule/nightly", "uid-", "uid-a", "uid-a0", "uid-b"}
	for _, op := range []string{"printer", "website"} {
		var got []string
		for _, st := range states(t, s, op) {
			if st.Operator != op || string(st.Data) != `{"of":"`+op+`"}` {
				t.Errorf("HandlerRecords(%s) holds a record of another operator: %+v", op, st)
			}
			got = append(got, st.Key)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("HandlerRecords(%s) keys %q, want %q", op, got, want)
		}
	}
	if got := states(t, s, "none"); len(got) != 0 {
		t.Errorf("an operator without records has %+v", got)
	}
}

func statesDelete(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	at := time.Now()
	putRecord(t, s, newRecord("printer", "uid-1", `{}`, at))
	putRecord(t, s, newRecord("printer", "uid-2", `{}`, at))
	putRecord(t, s, newRecord("website", "uid-1", `{}`, at))
	if err := s.DeleteHandlerRecord(ctx, "printer", "uid-1"); err != nil {
		t.Fatal(err)
	}
	if got := states(t, s, "printer"); len(got) != 1 || got[0].Key != "uid-2" {
		t.Errorf("after deleting printer's uid-1: %+v, want only uid-2", got)
	}
	if got := states(t, s, "website"); len(got) != 1 || got[0].Key != "uid-1" {
		t.Errorf("deleting printer's uid-1 touched website's: %+v", got)
	}
	for _, absent := range [][2]string{{"printer", "uid-1"}, {"printer", "never"}, {"nobody", "uid-2"}} {
		if err := s.DeleteHandlerRecord(ctx, absent[0], absent[1]); err != nil {
			t.Errorf("DeleteState(%s, %s) of an absent record: %v, want no error", absent[0], absent[1], err)
		}
	}
	// A deleted record can be put again.
	putRecord(t, s, newRecord("printer", "uid-1", `{"again":true}`, at))
	if got := states(t, s, "printer"); len(got) != 2 || string(got[0].Data) != `{"again":true}` {
		t.Errorf("a record put after its delete: %+v", got)
	}
}

// statesOutliveRuns: retention and CancelRunning are for runs; the state
// records of the objects those runs were for stay.
func statesOutliveRuns(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	old := time.Now().Add(-72 * time.Hour)
	want := []*archive.HandlerRecord{newRecord("printer", "uid-1", `{"handled":{"announce":3}}`, old), {Operator: "printer", Key: "schedule/nightly", Data: []byte(`{"slot":1}`), UpdatedAt: old.UTC()}}
	for _, st := range want {
		putRecord(t, s, st)
	}
	for i := range 5 {
		r := newRun(old.Add(time.Duration(i)*time.Minute), "printer", "team-a", "web-uid-1", "announce")
		insert(t, s, r)
		finish(t, s, r, archive.Succeeded)
	}
	insert(t, s, newRun(time.Now(), "printer", "team-a", "web-uid-1", "announce")) // still running
	if _, err := s.Prune(ctx, archive.Retention{MaxAge: time.Hour, MaxRuns: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CancelRunning(ctx, "the engine stopped"); err != nil || n != 1 {
		t.Fatalf("CancelRunning = %d, %v; want 1", n, err)
	}
	if _, err := s.Prune(ctx, archive.Retention{MaxRuns: 1}); err != nil {
		t.Fatal(err)
	}
	got := states(t, s, "printer")
	if len(got) != 2 || !sameRecord(got[0], *want[1]) || !sameRecord(got[1], *want[0]) {
		t.Errorf("after Prune and CancelRunning: %+v, want both records as they were", got)
	}
}

func statesKeepDataExactly(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{LogLimit: 100})
	at := time.Now()
	// ~100 KiB, every byte value, NULs and invalid UTF-8 included: the
	// archive keeps Data as given, and is not bound by the log limit.
	large := make([]byte, 100<<10+7)
	for i := range large {
		large[i] = byte(i*7 + i/256)
	}
	cases := map[string][]byte{
		"large":   large,
		"json":    []byte(`{"handled": {"announce": 7}, "text": "caf\u00e9 \"quoted\"\n"}` + "\n"),
		"binary":  {0, 0xff, 0xfe, '{', 0, '}', 0x80},
		"spaces":  []byte("  {}  "),
		"empty":   {},
		"nil":     nil,
		"unicode": []byte(`{"name":"日本語 é"}`),
	}
	for key, data := range cases {
		putRecord(t, s, &archive.HandlerRecord{Operator: "op", Key: key, Data: data, UpdatedAt: at})
	}
	got := states(t, s, "op")
	if len(got) != len(cases) {
		t.Fatalf("%d records, want %d", len(got), len(cases))
	}
	for _, st := range got {
		if want := cases[st.Key]; !bytes.Equal(st.Data, want) {
			t.Errorf("record %s: %d bytes back, want %d exactly as put (first difference at %d)", st.Key, len(st.Data), len(want), firstDifference(st.Data, want))
		}
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func statesConcurrentWriters(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	concurrently(t, 8, func(w int, fail func(error)) {
		for i := range 25 {
			key := fmt.Sprintf("uid-%d-%02d", w, i)
			for gen := range 2 {
				st := newRecord("op", key, fmt.Sprintf(`{"generation":%d}`, gen), time.Now())
				if err := s.PutHandlerRecord(ctx, st); err != nil {
					fail(err)
				}
			}
			if i%5 == 0 {
				if err := s.DeleteHandlerRecord(ctx, "op", key); err != nil {
					fail(err)
				}
			}
		}
	})
	got := states(t, s, "op")
	if len(got) != 8*20 {
		t.Errorf("%d records, want %d", len(got), 8*20)
	}
	for _, st := range got {
		if string(st.Data) != `{"generation":1}` {
			t.Errorf("record %s holds %s, want the last put", st.Key, st.Data)
		}
	}
}

// A run's Record is written with its start (Insert) and its end
// (Finish), in the same transaction: a start refused writes no record, a
// record refused writes no start; an end written again, or superseded,
// still writes its record; a record older than the stored one leaves it;
// an unknown run's end writes none.
func statesWrittenWithARunsStartAndEnd(t *testing.T, open Open) {
	s := openStore(t, open, archive.Options{})
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	r := newRun(at, "printer", "team-a", "web", "announce")
	r.Record = newRecord("printer", r.UID, `{"observed":1}`, at)
	insert(t, s, r)
	if got := states(t, s, "printer"); len(got) != 1 || !sameRecord(got[0], *r.Record) {
		t.Errorf("after the start: %+v, want the start's record %+v", got, *r.Record)
	}
	if got, err := s.Get(ctx, r.ID); err != nil || got.Outcome != archive.Running {
		t.Errorf("after the start: run %s %+v, %v; want it Running", r.ID, got, err)
	}

	r.Record = newRecord("printer", r.UID, `{"observed":1,"handled":{"announce":1}}`, at.Add(time.Second))
	finish(t, s, r, archive.Succeeded)
	if got := states(t, s, "printer"); len(got) != 1 || !sameRecord(got[0], *r.Record) {
		t.Errorf("after the end: %+v, want the end's record %+v", got, *r.Record)
	}
	// The same end again (a retry whose commit went through) writes its
	// record all the same.
	r.Record = newRecord("printer", r.UID, `{"observed":2}`, at.Add(2*time.Second))
	if err := s.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got := states(t, s, "printer"); len(got) != 1 || !sameRecord(got[0], *r.Record) {
		t.Errorf("after the same end again: %+v, want its record %+v", got, *r.Record)
	}

	// A run's record older than the stored one (its start waited for a
	// slot while its object's record was written again) leaves it.
	later := newRecord("printer", r.UID, `{"observed":3}`, at.Add(3*time.Second))
	if err := s.PutHandlerRecord(ctx, later); err != nil {
		t.Fatal(err)
	}
	next := newRun(at.Add(time.Minute), "printer", "team-a", "web", "announce")
	next.UID = r.UID
	next.Record = newRecord("printer", r.UID, `{"observed":2,"late":true}`, at.Add(2*time.Second))
	insert(t, s, next)
	if got := states(t, s, "printer"); len(got) != 1 || !sameRecord(got[0], *later) {
		t.Errorf("after a start carrying an older record: %+v, want the later record %+v kept", got, *later)
	}
	if got, err := s.Get(ctx, next.ID); err != nil || got.Outcome != archive.Running {
		t.Errorf("the start carrying an older record: %+v, %v; want it recorded Running", got, err)
	}

	// An unknown run's end: ErrNotFound, no record.
	ghost := newRun(at, "printer", "team-a", "ghost", "announce")
	ghost.Outcome, ghost.FinishedAt = archive.Succeeded, at.Add(time.Second)
	ghost.Record = newRecord("printer", ghost.UID, `{"observed":1}`, at)
	if err := s.Finish(ctx, ghost); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("the end of an unknown run with a record: %v, want ErrNotFound", err)
	}
	// A record the store refuses (no key): no start either.
	bad := newRun(at.Add(time.Minute), "printer", "team-a", "bad", "announce")
	bad.Record = &archive.HandlerRecord{Operator: "printer", Data: []byte(`{}`)}
	if err := s.Insert(ctx, bad); err == nil {
		t.Error("a start whose record has no key was recorded")
	}
	if got := states(t, s, "printer"); len(got) != 1 || got[0].Key != r.UID {
		t.Errorf("after the unknown run's end and the refused start: %+v, want only %s's record", got, r.UID)
	}
	if _, err := s.Get(ctx, bad.ID); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("the start whose record was refused: %v, want ErrNotFound", err)
	}
}
