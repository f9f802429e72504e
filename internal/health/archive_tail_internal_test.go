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
// archive that refuses a run's end for a while.
type refusing struct {
	archive.Store
	refuse bool
}

func (r *refusing) Finish(ctx context.Context, run *archive.Run) error {
	if r.refuse {
		return errors.New("disk I/O error")
	}
	return r.Store.Finish(ctx, run)
}

// A run's end the archive refused keeps the tail of its log; the end
// recorded again later (the engine finishes a run once more when its
// status patch was refused) carries that tail, once, and nothing is left
// to write again.
func TestARefusedEndKeepsItsLogsTailForTheNextEnd(t *testing.T) {
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	faulty := &refusing{Store: store, refuse: true}
	w := NewArchiveWriter(faulty, func(string) {}, prometheus.NewGauge(prometheus.GaugeOpts{Name: "writable"}))

	now := time.Now()
	r := &archive.Run{ID: archive.NewID(now), Operator: "op", Handler: "h", Action: "exec", Trigger: "create", APIVersion: "v1", Kind: "ConfigMap",
		Namespace: "ns", Name: "n", UID: "u", Generation: 1, Key: "u/1/h", Attempt: 1, StartedAt: now.UTC()}
	if err := w.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Outcome, r.FinishedAt, r.LogTail = archive.Succeeded, now.Add(time.Second).UTC(), []byte("the handler's last line\n")
	if err := w.Finish(ctx, r); err == nil {
		t.Fatal("Finish succeeded on an archive that refuses it")
	}
	r.LogTail = nil // the engine's record of the end took it

	faulty.refuse = false
	if err := w.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	l, err := store.Logs(ctx, r.ID, 0)
	if err != nil || string(l.Data) != "the handler's last line\n" {
		t.Errorf("the run's log once its end is recorded: %q, %v; want its tail", l.Data, err)
	}
	w.flush(ctx) // nothing is left to write again
	if l, err := store.Logs(ctx, r.ID, 0); err != nil || string(l.Data) != "the handler's last line\n" {
		t.Errorf("the run's log after the kept ends are written: %q, %v; want its tail once", l.Data, err)
	}
	got, err := store.Get(ctx, r.ID)
	if err != nil || got.Outcome != archive.Succeeded {
		t.Errorf("the run %+v, %v; want Succeeded", got, err)
	}
	if w.Failure() != nil {
		t.Errorf("the archive still counted as failing: %v", w.Failure())
	}
}
