//go:build !linux

package agent

import (
	"syscall"
	"time"
)

// userTimeout is Linux's TCP_USER_TIMEOUT; elsewhere keepalives alone
// find a vanished engine.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
