package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opkit-dev/opkit/internal/archive"
)

// ArchiveWriter is the archive as the engine writes to it. It says in one
// line when the archive stops recording runs (a full disk, a read-only or
// damaged file) and when it records them again, and sets its writable
// gauge (opkit_archive_writable). A run's end that could not be recorded
// is kept and recorded again every pendingRetry until it is, so that a run that
// succeeded while the disk was full is not left Running in the archive
// (and marked Cancelled by the next engine).
type ArchiveWriter struct {
	archive.Recorder
	notice   func(string)
	writable prometheus.Gauge

	mu      sync.Mutex
	failing time.Time // when writes began to fail; zero while they work
	pending map[string]archive.Run
}

// pendingRetry is how often run ends the archive refused are written again.
const pendingRetry = 5 * time.Second

// NewArchiveWriter writes to s, says a change in one line to notice, and
// sets writable to 1 while s records runs, 0 while it refuses them.
func NewArchiveWriter(s archive.Recorder, notice func(string), writable prometheus.Gauge) *ArchiveWriter {
	return &ArchiveWriter{Recorder: s, notice: notice, writable: writable, pending: map[string]archive.Run{}}
}

// Insert records a run's start, and reports whether the archive works.
func (w *ArchiveWriter) Insert(ctx context.Context, r *archive.Run) error {
	err := w.Recorder.Insert(ctx, r)
	w.report(ctx, err)
	return err
}

// Finish records a run's end, or keeps it to record later: refused by
// the archive, or by ctx's end (the engine stops: RetryPending's last
// round writes it). An end kept before of the same run is written first,
// with the tail of its log (Run.LogTail), which no later end holds: the
// archive records an end once (its refused write may have been recorded
// all the same) and this later one's outcome over it. Refused again, the
// kept end's tail goes with this one. A kept end is kept without its
// handler record (Run.Record), which its driver writes on its own.
func (w *ArchiveWriter) Finish(ctx context.Context, r *archive.Run) error {
	end := *r // r's tail is the caller's
	w.mu.Lock()
	kept, ok := w.pending[r.ID]
	if ok {
		delete(w.pending, r.ID) // this write is the run's now
	}
	w.mu.Unlock()
	if ok && w.Recorder.Finish(ctx, &kept) != nil && len(end.LogTail) == 0 {
		end.LogTail = kept.LogTail
	}
	err := w.Recorder.Finish(ctx, &end)
	w.report(ctx, err)
	if err != nil {
		// Kept without its handler record (Run.Record): the driver
		// writes the object's state itself, the runner not having
		// recorded it written; written later, it could bring back the
		// record of an object dropped meanwhile.
		end.Record = nil
		w.keep(end)
	}
	return err
}

// keep keeps a run's end to write later, unless a newer end of the run
// is kept already.
func (w *ArchiveWriter) keep(r archive.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, newer := w.pending[r.ID]; !newer {
		w.pending[r.ID] = r
	}
}

// SetRunner records the runner of a run, and reports whether the archive
// works.
func (w *ArchiveWriter) SetRunner(ctx context.Context, id, runner string) error {
	err := w.Recorder.SetRunner(ctx, id, runner)
	w.report(ctx, err)
	return err
}

// PutHandlerRecord records handler records, and reports whether the archive
// works.
func (w *ArchiveWriter) PutHandlerRecord(ctx context.Context, s *archive.HandlerRecord) error {
	err := w.Recorder.PutHandlerRecord(ctx, s)
	w.report(ctx, err)
	return err
}

// DeleteHandlerRecord deletes handler records, and reports whether the archive
// works.
func (w *ArchiveWriter) DeleteHandlerRecord(ctx context.Context, operator, key string) error {
	err := w.Recorder.DeleteHandlerRecord(ctx, operator, key)
	w.report(ctx, err)
	return err
}

// RecordDelivery records a delivery, and reports whether the archive
// works (a replay it refuses says it does).
func (w *ArchiveWriter) RecordDelivery(ctx context.Context, d *archive.Delivery) error {
	err := w.Recorder.RecordDelivery(ctx, d)
	if errors.Is(err, archive.ErrDuplicateDelivery) {
		w.report(ctx, nil) // a replay refused: the archive works
		return err
	}
	w.report(ctx, err)
	return err
}

// FinishDelivery records a delivery's end, and reports whether the
// archive works.
func (w *ArchiveWriter) FinishDelivery(ctx context.Context, d *archive.Delivery) error {
	err := w.Recorder.FinishDelivery(ctx, d)
	w.report(ctx, err)
	return err
}

// SetCursor records a source's cursor, and reports whether the archive
// works. A cursor refused for what it is (archive.ErrInvalidCursor: a
// source's hostile or broken value) says nothing of the archive, which
// is not counted as failing for it: the source says what is wrong.
func (w *ArchiveWriter) SetCursor(ctx context.Context, operator, source, cursor string) error {
	err := w.Recorder.SetCursor(ctx, operator, source, cursor)
	if errors.Is(err, archive.ErrInvalidCursor) {
		return err
	}
	w.report(ctx, err)
	return err
}

// report notices a change between writing and failing; a cancelled
// context says nothing of the archive.
func (w *ArchiveWriter) report(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && w.failing.IsZero():
		w.failing = time.Now()
		w.writable.Set(0)
		w.notice(fmt.Sprintf("the archive cannot record runs (%v): no handler starts until it can; runs that end meanwhile are recorded then", err))
	case err == nil && !w.failing.IsZero():
		w.writable.Set(1)
		w.notice(fmt.Sprintf("the archive records runs again after %s", time.Since(w.failing).Round(time.Second)))
		w.failing = time.Time{}
	}
}

// RetryPending writes the kept run ends every pendingRetry until ctx
// ends, then once more.
func (w *ArchiveWriter) RetryPending(ctx context.Context) {
	t := time.NewTicker(pendingRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			w.flush(ctx)
		}
	}
}

// flush writes the kept run ends; those the archive still refuses stay.
// Each is taken out while it is written, so that a Finish of the same run
// meanwhile does not carry its log's tail too.
func (w *ArchiveWriter) flush(ctx context.Context) {
	w.mu.Lock()
	runs := make([]archive.Run, 0, len(w.pending))
	for _, r := range w.pending {
		runs = append(runs, r)
	}
	clear(w.pending)
	w.mu.Unlock()
	for i, r := range runs {
		err := w.Recorder.Finish(ctx, &r)
		w.report(ctx, err)
		if err != nil {
			for _, r := range runs[i:] {
				w.keep(r) // the archive still refuses: try again later
			}
			return
		}
	}
}

// Failure says since when the archive refuses to record runs; nil while it
// records them.
func (w *ArchiveWriter) Failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing.IsZero() {
		return nil
	}
	return fmt.Errorf("the archive has refused to record runs since %s", w.failing.UTC().Format(time.RFC3339))
}
