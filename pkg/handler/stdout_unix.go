//go:build aix || darwin || dragonfly || freebsd || linux || netbsd || openbsd

package handler

import (
	"os"
	"syscall"
)

// keepStdout keeps the process's standard output for the answers, as a
// new file descriptor closed on exec (a child process does not inherit
// it), and points file descriptor 1 at standard error: whatever else
// writes to stdout, by any means, writes to the run's log.
func keepStdout() (*os.File, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Dup(1)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
	if err := dup2(2, 1); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/stdout"), nil
}
