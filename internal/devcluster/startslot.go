package devcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Starting a plane is its costliest moment: kube-apiserver builds its
// storage and OpenAPI, the controllers fill their caches, some three
// seconds of CPU in all, in bursts. Planes that start together on a small machine
// each take several times as long as one alone (31–81 s against 11 s,
// seen on 2 cores), and everything else on the machine waits with them.
// So a machine starts at most startSlots planes at once, whatever
// process starts them (opkit test, opkit dev, cluster start, the tests of
// several packages): each start holds one of startSlots lock files in the
// temporary directory, taken with flock, which the kernel lets go when
// the process ends, however it ends. A plane that is up holds none.

// startSlotsEnv overrides the number of slots, e.g. for a machine whose
// planes start quickly enough together.
const startSlotsEnv = "OPKIT_PLANE_STARTS"

// startSlots is how many planes may start at once on this machine: one a
// two cores, at least one.
func startSlots() int {
	if n, err := strconv.Atoi(os.Getenv(startSlotsEnv)); err == nil && n > 0 {
		return n
	}
	return max(1, runtime.NumCPU()/2)
}

// startSlot is a held slot; release lets it go.
type startSlot struct{ f *os.File }

func (s startSlot) release() {
	if s.f != nil {
		_ = syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
		_ = s.f.Close()
	}
}

// takeStartSlot waits until one of the machine's start slots is free and
// takes it, telling log once when it has to wait. Only ctx ends the wait:
// a slot is held for one start at most, which StartTimeout bounds. When
// the lock files cannot be made (a read-only temporary directory), it
// takes none and says so.
func takeStartSlot(ctx context.Context, log io.Writer) (startSlot, error) {
	n := startSlots()
	files := make([]*os.File, 0, n)
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for i := range n {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("opkit-plane-start-%d.lock", i))
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(log, "not waiting for other planes' starts: %v\n", err)
			return startSlot{}, nil
		}
		files = append(files, f)
	}
	told := false
	for {
		for i, f := range files {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				files = append(files[:i], files[i+1:]...)
				return startSlot{f: f}, nil
			}
		}
		if !told {
			fmt.Fprintf(log, "waiting for another plane of this machine to start first (%d at a time; %s sets how many)\n", n, startSlotsEnv)
			told = true
		}
		select {
		case <-ctx.Done():
			return startSlot{}, fmt.Errorf("waiting for another plane of this machine to start first: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
