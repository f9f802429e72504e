package handler

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// runLog is the run's log a context carries: lines from any goroutine,
// each written whole.
type runLog struct {
	mu sync.Mutex
	w  io.Writer
}

type logKey struct{}

// WithLog returns ctx with w as the log Logf writes to. Serve, Once and
// Main give each run its own (stderr in a process); a test of a handler
// gives Call one to read what the handler logged (t.Output(), a
// bytes.Buffer).
func WithLog(ctx context.Context, w io.Writer) context.Context {
	return context.WithValue(ctx, logKey{}, &runLog{w: w})
}

// Logf writes a line to the run's log, the one WithLog set in ctx, or
// else standard error: what `opkit logs RUN` shows. A newline is added
// when format has none. Whatever a run logs is written before its answer.
func Logf(ctx context.Context, format string, args ...any) {
	logOf(ctx).printf(format, args...)
}

func (l *runLog) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s)
}

func logOf(ctx context.Context) *runLog {
	if l, ok := ctx.Value(logKey{}).(*runLog); ok {
		return l
	}
	return &runLog{w: os.Stderr}
}
