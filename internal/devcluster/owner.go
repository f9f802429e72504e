package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A data directory names the process that runs a plane on it in its file
// "owner": its pid and, against the pid's reuse, its start time. The file
// is written before any component starts and removed by Stop. It tells
//
//   - a second Start on a kept data directory that a plane already runs
//     there, before a second etcd is pointed at the same data;
//   - a Start that the temporary data directory of an earlier plane is
//     stale: the process that made it was killed (SIGKILL leaves Stop no
//     chance to remove it), so its etcd data, CA key and admin kubeconfig
//     are removed. A directory whose owner lives, or that names none (one
//     being made, or made by an older opkit), is left alone.

// ownerFile is the file, in a data directory, that names its owner.
const ownerFile = "owner"

// tempPrefix begins the name of each temporary data directory.
const tempPrefix = "opkit-cluster-"

// owner is a process, as recorded in a data directory.
type owner struct {
	Pid int `json:"pid"`
	// Started is the process's start time in clock ticks since boot
	// (field 22 of /proc/PID/stat); 0 when it could not be read.
	Started uint64 `json:"started"`
	// Temporary says that the directory is the plane's alone, made by
	// Start and removed by Stop: only such a directory is removed when
	// its owner is gone, never a kept one, whatever its name.
	Temporary bool `json:"temporary,omitempty"`
}

// self is the calling process as the owner of a data directory.
func self(temporary bool) owner {
	o := owner{Pid: os.Getpid(), Temporary: temporary}
	o.Started, _ = processStart(o.Pid)
	return o
}

// alive reports whether the recorded process still runs: a process with
// its pid exists, has not exited (a zombie has), and started when it did.
func (o owner) alive() bool {
	if o.Pid <= 0 {
		return false
	}
	started, err := processStart(o.Pid)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, errExited):
		return false
	case err != nil:
		// No /proc: a signal 0 says whether the pid exists, EPERM that it
		// does, as another user's.
		err := syscall.Kill(o.Pid, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	return o.Started == 0 || started == o.Started
}

// errExited is processStart's error for a zombie.
var errExited = errors.New("the process has exited")

// processStart reads a process's start time from /proc/PID/stat.
func processStart(pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command, field 2, is in parentheses and may hold spaces or
	// parentheses of its own: the fields that count follow the last ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (the state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, errExited
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// readOwner reads the owner a data directory names; ok is false when it
// names none.
func readOwner(dir string) (o owner, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if errors.Is(err, os.ErrNotExist) {
		return o, false, nil
	}
	if err != nil {
		return o, false, err
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return o, false, fmt.Errorf("reading %s: %w", filepath.Join(dir, ownerFile), err)
	}
	return o, true, nil
}

// claim makes this process dir's owner, unless a live process other than
// this one owns it.
func claim(dir string, temporary bool) error {
	o, ok, err := readOwner(dir)
	if err != nil {
		return err
	}
	if ok && o.Pid != os.Getpid() && o.alive() {
		return fmt.Errorf("data directory %s is in use by the plane of process %d: stop that process, or choose another data directory", dir, o.Pid)
	}
	data, err := json.Marshal(self(temporary))
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ownerFile), data, 0o600)
}

// release removes the owner file when this process owns dir.
func release(dir string) {
	if o, ok, _ := readOwner(dir); ok && o.Pid == os.Getpid() {
		_ = os.Remove(filepath.Join(dir, ownerFile))
	}
}

// removeStale removes, in the temporary directory, the temporary data
// directories of planes whose process is gone, and reports each to log. A
// directory is removed only when its owner file says it is temporary and
// names a process that no longer runs.
func removeStale(log io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		o, ok, err := readOwner(dir)
		if err != nil || !ok || !o.Temporary || o.alive() {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(log, "could not remove %s, left by the plane of process %d, which is gone: %v\n", dir, o.Pid, err)
			continue
		}
		fmt.Fprintf(log, "removed %s, left by the plane of process %d, which is gone\n", dir, o.Pid)
	}
}
