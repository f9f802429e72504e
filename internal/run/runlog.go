package run

import (
	"context"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// archiveLog appends a run's log to the archive as it comes, in pieces of
// up to logFlushBytes or every logFlushEvery: a handler writing many short
// lines costs a few archive writes a second, not one per line. At the
// run's end (End) it holds what is left, its tail, for the end's record to
// take (Runner.recordEnd: archive.Run.LogTail, one transaction with the
// end); what is written after End is written at once, after the tail. A
// failing archive does not fail the handler; the log is then incomplete.
type archiveLog struct {
	ctx   context.Context
	store archive.Recorder
	id    string
	// held, when set, is where the log waits from End to take: a runner
	// that stops writes what its ended runs still hold.
	held *heldLogs

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer
	ended bool // End was called: each write is written at once
}

// NewLog returns the archive log of run id, for a run executed outside a
// Runner (an admission call). When the run ends, Tail is what it still
// holds, for the end's record (archive.Run.LogTail), as a Runner's run's.
func NewLog(ctx context.Context, store archive.Recorder, id string) interface {
	Write([]byte) (int, error)
	Tail() []byte
} {
	return &archiveLog{ctx: ctx, store: store, id: id}
}

// Tail ends the log's buffering and takes what it holds (End, then take).
func (l *archiveLog) Tail() []byte {
	l.End()
	return l.take()
}

const (
	logFlushBytes = 64 << 10
	logFlushEvery = 200 * time.Millisecond
)

func (l *archiveLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	switch {
	case l.ended || len(l.buf) >= logFlushBytes:
		l.flushLocked() // after End, the tail goes first
	case l.timer == nil:
		l.timer = time.AfterFunc(logFlushEvery, l.Flush)
	}
	return len(p), nil
}

// End ends the log's buffering at its run's end: what is buffered is held
// for take, and what comes later is written at once.
func (l *archiveLog) End() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.ended = true
	l.mu.Unlock()
	l.held.add(l)
}

// take returns the tail the log holds, which no other write then makes.
func (l *archiveLog) take() []byte {
	l.mu.Lock()
	tail := l.buf
	l.buf = nil
	l.mu.Unlock()
	l.held.remove(l)
	return tail
}

// release writes the tail the log holds, for a run whose end no step will
// record.
func (l *archiveLog) release() {
	l.Flush()
	l.held.remove(l)
}

// Flush writes the buffered log to the archive.
func (l *archiveLog) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *archiveLog) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if len(l.buf) == 0 {
		return
	}
	_ = l.store.AppendLog(context.WithoutCancel(l.ctx), l.id, l.buf)
	l.buf = nil
}

// heldLogs are a runner's logs of runs that ended and whose end is not
// recorded yet: each holds its tail for the end's record. The record may
// never come (the operator stops before a worker steps the object): the
// runner's Wait writes what is left. Its zero value is ready; a nil one
// holds nothing.
type heldLogs struct {
	mu   sync.Mutex
	logs map[*archiveLog]struct{}
}

func (h *heldLogs) add(l *archiveLog) {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.logs == nil {
		h.logs = map[*archiveLog]struct{}{}
	}
	h.logs[l] = struct{}{}
	h.mu.Unlock()
}

func (h *heldLogs) remove(l *archiveLog) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.logs, l)
	h.mu.Unlock()
}

// release writes every tail still held.
func (h *heldLogs) release() {
	h.mu.Lock()
	logs := h.logs
	h.logs = nil
	h.mu.Unlock()
	for l := range logs {
		l.Flush()
	}
}

// recordEnd records run's end (archive Finish) with the tail its log l
// holds (nil: none), in one transaction, which takes the tail from l. An
// end the archive refuses, the engine stopping included, keeps its tail:
// the engine's archive writer (health.ArchiveWriter) keeps the end and
// writes it again, once the archive can or as the engine stops.
func (rn *Runner) recordEnd(ctx context.Context, run *archive.Run, l *archiveLog) error {
	if l != nil {
		run.LogTail = l.take()
	}
	err := rn.archive.Finish(ctx, run)
	run.LogTail = nil
	return err
}
