package clustertest

import "syscall"

// Exit ends a process that a test binary was started as (a handler, an
// engine, an agent, opkit's CLI), with code, at once. A test binary built
// with the race detector otherwise sleeps a second before it exits (the
// race runtime's atexit_sleep_ms, 1000 unless $GORACE says otherwise, which
// a handler's environment does not carry): a handler run took 1.4 s on a
// quiet machine instead of 0.35, and longer than its timeout on a loaded
// one. A race in the helper is still reported when it happens; only the
// exit status 66 that the race runtime gives at its exit is not.
func Exit(code int) { syscall.Exit(code) }
