package run

import (
	"sync"

	"github.com/opkit-dev/opkit/internal/executor"
)

// Stubs replaces the actions of handlers, by operator and handler name:
// while a stub is set, each run of that handler, whatever its trigger
// (create, update, delete, resume, schedule, requeue, when, event) and its
// action (exec, http, job), calls the stub's Executor instead of the
// action. Everything else happens as for a real run: the run is recorded
// in the archive with its attempt, the result's status patch and Events
// are written, a failure is retried with the handler's policy and gives
// up (Stalled) after its attempts, a delete handler's success lets the
// finalizer go. A stub is read when a run starts: setting or deleting one
// changes the runs that start after, not the one in flight.
//
// The zero value has no stubs; Set and Delete may be called from any
// goroutine while the engine runs (opkit test changes them between the
// steps of a scenario). executor.Canned answers with made-up results.
type Stubs struct {
	mu    sync.RWMutex
	stubs map[stubKey]executor.Executor
}

type stubKey struct{ operator, handler string }

// Set makes the runs of the operator's handler call ex; a nil ex is
// Delete.
func (s *Stubs) Set(operator, handler string, ex executor.Executor) {
	if ex == nil {
		s.Delete(operator, handler)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stubs == nil {
		s.stubs = map[stubKey]executor.Executor{}
	}
	s.stubs[stubKey{operator, handler}] = ex
}

// Delete gives the operator's handler its own action back.
func (s *Stubs) Delete(operator, handler string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.stubs, stubKey{operator, handler})
}

// Get returns the stub of the operator's handler, or nil. A nil Stubs
// has none.
func (s *Stubs) Get(operator, handler string) executor.Executor {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stubs[stubKey{operator, handler}]
}
