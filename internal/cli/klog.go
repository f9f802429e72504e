package cli

import (
	"slices"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// klogTo is the logger client-go's klog lines go to: the engine's, once a
// command runs one (sampled, without stack traces); none before.
var klogTo atomic.Pointer[logr.Logger]

// RouteKlog sends client-go's klog lines to the logger the running command
// sets (see startEngineLogging). Call it once, first thing in main, before
// any goroutine uses klog: klog's logger cannot be changed safely later.
func RouteKlog() {
	klog.SetLogger(logr.New(klogSink{}))
}

// klogSink forwards to klogTo's logger, when there is one.
type klogSink struct {
	names  []string
	values []any
}

func (klogSink) Init(logr.RuntimeInfo) {}

func (s klogSink) target() (logr.Logger, bool) {
	l := klogTo.Load()
	if l == nil {
		return logr.Logger{}, false
	}
	out := *l
	for _, n := range s.names {
		out = out.WithName(n)
	}
	return out.WithValues(s.values...), true
}

func (klogSink) Enabled(level int) bool {
	l := klogTo.Load()
	return l != nil && l.V(level).Enabled()
}

func (s klogSink) Info(level int, msg string, kv ...any) {
	if l, ok := s.target(); ok {
		l.V(level).Info(msg, kv...)
	}
}

func (s klogSink) Error(err error, msg string, kv ...any) {
	if l, ok := s.target(); ok {
		l.Error(err, msg, kv...)
	}
}

func (s klogSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(slices.Clip(s.values), kv...)
	return s
}

func (s klogSink) WithName(name string) logr.LogSink {
	s.names = append(slices.Clip(s.names), name)
	return s
}
