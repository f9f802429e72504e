package health

import (
	"errors"
	"sync"
)

// API is the outcome of the last check of the API server, which the
// readiness check "api-server" reports. A new API has not been checked:
// its Err is ErrNotChecked until the first Set.
type API struct {
	mu      sync.Mutex
	checked bool
	err     error
}

// ErrNotChecked is the API server's state until the first check.
var ErrNotChecked = errors.New("not checked yet")

// Set records the outcome of a check: nil when it passed, else why it
// failed.
func (a *API) Set(err error) {
	a.mu.Lock()
	a.checked, a.err = true, err
	a.mu.Unlock()
}

// Err is why the last check failed, nil when it passed.
func (a *API) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.checked {
		return ErrNotChecked
	}
	return a.err
}
