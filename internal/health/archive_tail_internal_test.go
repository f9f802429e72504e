package health

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opkit-dev/opkit/internal/archive"
)

// refusing is a real archive whose Finish fails while refuse is set: an
// archive that refuses a run's end for a while; with recorded, it records
// the end and answers an error all the same (a commit whose answer was
// lost).
type refusing struct {
	archive.Store
	refuse, recorded bool
}

func (r *refusing) Finish(ctx context.Context, run *archive.Run) error {
	if r.refuse {
		if r.recorded {
			if err := r.Store.Finish(ctx, run); err != nil {
				return err
			}
		}
		return errors.New("disk I/O error")
	}
	return r.Store.Finish(ctx, run)
}

// refusingWriter is an archive writer on a real archive that refuses
// ends while faulty.refuse is set.
func refusingWriter(t *testing.T) (store archive.Store, faulty *refusing, w *ArchiveWriter) {
	t.Helper()
	s, err := archive.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	faulty = &refusing{Store: s}
	return s, faulty, NewArchiveWriter(faulty, func(string) {}, prometheus.NewGauge(prometheus.GaugeOpts{Name: "writable"}))
}

// A run's end the archive refused keeps the tail of its log; the end
// recorded again later (the engine finishes a run once more when its
// status patch was refused) carries that tail, once, whether it is
// written then or kept again (the engine stops: its context ends) and
// written by the last round of kept ends.
func TestARefusedEndKeepsItsLogsTailForTheNextEnd(t *testing.T) {
	ctx := context.Background()
	store, faulty, w := refusingWriter(t)
	const tail = "the handler's last line\n"
	logOnce := func(r *archive.Run, when string) {
		t.Helper()
		l, err := store.Logs(ctx, r.ID, 0)
		if err != nil || string(l.Data) != tail {
			t.Errorf("the run's log %s: %q, %v; want its tail once", when, l.Data, err)
		}
		got, err := store.Get(ctx, r.ID)
		if err != nil || got.Outcome != archive.Succeeded {
			t.Errorf("the run %s: %+v, %v; want Succeeded", when, got, err)
		}
	}
	// refused starts a run whose end the archive refuses once, its log's
	// tail with it; the engine's record of the end took the tail.
	refused := func(name string) *archive.Run {
		now := time.Now()
		r := &archive.Run{ID: archive.NewID(now), Operator: "op", Handler: "h", Action: "exec", Trigger: "create", APIVersion: "v1", Kind: "ConfigMap",
			Namespace: "ns", Name: name, UID: "u-" + name, Generation: 1, Key: "u-" + name + "/1/h", Attempt: 1, StartedAt: now.UTC()}
		if err := w.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Outcome, r.FinishedAt, r.LogTail = archive.Succeeded, now.Add(time.Second).UTC(), []byte(tail)
		faulty.refuse = true
		if err := w.Finish(ctx, r); err == nil {
			t.Fatal("Finish succeeded on an archive that refuses it")
		}
		faulty.refuse = false
		r.LogTail = nil
		return r
	}

	// Finished again while the archive records: the kept tail goes with it.
	r := refused("again")
	if err := w.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	logOnce(r, "once its end is recorded again")
	w.flush(ctx) // nothing is left to write again
	logOnce(r, "after the kept ends are written")

	// Finished again as the engine stops: kept again, written by the
	// last round.
	r = refused("stopping")
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Finish(stopped, r); err == nil {
		t.Fatal("Finish succeeded with its context ended")
	}
	w.flush(context.WithoutCancel(stopped))
	logOnce(r, "after the last round of kept ends")
	if err := w.Finish(ctx, r); err != nil { // a late step's
		t.Fatal(err)
	}
	logOnce(r, "once a step recorded it again")
	if w.Failure() != nil {
		t.Errorf("the archive still counted as failing: %v", w.Failure())
	}

	// Recorded, though the archive answered an error; the run finished
	// again, later: its tail once.
	faulty.recorded = true
	r = refused("recorded")
	faulty.recorded = false
	r.FinishedAt = r.FinishedAt.Add(time.Second)
	if err := w.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	logOnce(r, "after an end recorded though refused, then a later end")
}

// A refused end that carried a watched object's handler record
// (Run.Record) is kept without it: written later, it would bring back
// the record of an object its driver dropped meanwhile (it writes the
// state itself, the end not being recorded).
func TestARefusedEndIsKeptWithoutItsHandlerRecord(t *testing.T) {
	ctx := context.Background()
	store, faulty, w := refusingWriter(t)
	now := time.Now()
	r := &archive.Run{ID: archive.NewID(now), Operator: "op", Handler: "h", Action: "exec", Trigger: "update", APIVersion: "apps/v1", Kind: "Deployment",
		Namespace: "ns", Name: "web", UID: "u-web", Generation: 2, Key: "u-web/2/h", Attempt: 1, StartedAt: now.UTC()}
	if err := w.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Outcome, r.FinishedAt = archive.Succeeded, now.Add(time.Second).UTC()
	r.Record = &archive.HandlerRecord{Operator: "op", Key: "u-web", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web", Data: []byte(`{"state":{}}`), UpdatedAt: now.UTC()}
	faulty.refuse = true
	if err := w.Finish(ctx, r); err == nil {
		t.Fatal("Finish succeeded on an archive that refuses it")
	}
	faulty.refuse = false
	w.flush(ctx) // the kept end written; the object was dropped meanwhile
	if got, err := store.Get(ctx, r.ID); err != nil || got.Outcome != archive.Succeeded {
		t.Errorf("the kept end: %+v, %v; want it written Succeeded", got, err)
	}
	if recs, err := store.HandlerRecords(ctx, "op"); err != nil || len(recs) != 0 {
		t.Errorf("after the kept end was written: records %+v, %v; want none", recs, err)
	}
}
