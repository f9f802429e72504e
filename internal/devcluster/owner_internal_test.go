package devcluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deadProcess returns the owner record of a process that has exited and
// been reaped.
func deadProcess(t *testing.T) owner {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := owner{Pid: cmd.Process.Pid}
	o.Started, _ = processStart(o.Pid)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return o
}

// dataDir makes a directory named name in dir, with o as its owner
// (none when o is nil).
func dataDir(t *testing.T, dir, name string, o *owner) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(path, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "pki", "ca.key"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o != nil {
		data, _ := json.Marshal(o)
		if err := os.WriteFile(filepath.Join(path, ownerFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestStaleTemporaryDataDirsAreRemovedAndLiveOrKeptOnesAreNot(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := deadProcess(t)
	dead.Temporary = true
	live := self(true)
	// The pid of a live process, recorded with another start time: the
	// pid was reused, and the plane's process is gone.
	reused := owner{Pid: live.Pid, Started: live.Started + 1, Temporary: true}
	keptDead := deadProcess(t)

	stale := dataDir(t, tmp, tempPrefix+"1", &dead)
	staleReused := dataDir(t, tmp, tempPrefix+"2", &reused)
	running := dataDir(t, tmp, tempPrefix+"3", &live)
	unowned := dataDir(t, tmp, tempPrefix+"4", nil)
	kept := dataDir(t, tmp, tempPrefix+"5", &keptDead) // a --data-dir of that name
	other := dataDir(t, tmp, "something-else", &dead)

	var log bytes.Buffer
	removeStale(&log)
	for _, gone := range []string{stale, staleReused} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, left by a process that is gone, is still there (%v)", gone, err)
		}
		if !strings.Contains(log.String(), "removed "+gone) {
			t.Errorf("the removal of %s was not reported: %q", gone, log.String())
		}
	}
	for _, there := range []string{running, unowned, kept, other} {
		if _, err := os.Stat(filepath.Join(there, "pki", "ca.key")); err != nil {
			t.Errorf("%s was touched: %v", there, err)
		}
	}
}

func TestAProcessIsAliveUntilItExits(t *testing.T) {
	if me := self(false); !me.alive() {
		t.Errorf("this process (%+v) is not alive", me)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := owner{Pid: cmd.Process.Pid}
	o.Started, _ = processStart(o.Pid)
	if !o.alive() {
		t.Errorf("a running child (%+v) is not alive", o)
	}
	_ = cmd.Process.Kill()
	// Killed and not reaped yet, a zombie: not alive.
	waitFor(t, func() bool { return !o.alive() })
	_ = cmd.Wait()
	if o.alive() {
		t.Errorf("a reaped child (%+v) is alive", o)
	}
}

func TestASecondStartOnADataDirInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	live := self(false)
	live.Pid = os.Getppid() // the go command, or whatever runs this test: alive
	live.Started, _ = processStart(live.Pid)
	data, _ := json.Marshal(live)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	err := claim(dir, false)
	if err == nil || !strings.Contains(err.Error(), "in use by the plane of process") {
		t.Fatalf("claim of a directory a live process owns: %v", err)
	}
	// Once that owner is gone, the directory is this process's.
	dead := deadProcess(t)
	data, _ = json.Marshal(dead)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := claim(dir, false); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := readOwner(dir); err != nil || !ok || o.Pid != os.Getpid() {
		t.Errorf("owner after the claim: %+v %v %v", o, ok, err)
	}
	release(dir)
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the owner file is still there after release: %v", err)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the condition did not hold within 10s")
}
