//go:build !(aix || darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package handler

import "os"

// keepStdout keeps the process's standard output for the answers and
// points the variable os.Stdout at standard error: without dup2, a file
// of descriptor 1 taken before still writes to stdout.
func keepStdout() (*os.File, error) {
	out := os.Stdout
	os.Stdout = os.Stderr
	return out, nil
}
