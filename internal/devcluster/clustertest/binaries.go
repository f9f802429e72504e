package clustertest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

// HandlerBinary returns the path of this package's test binary built
// again without the race detector, for tests that start their own binary
// as a handler, many times over: each process of a race-built binary
// spends about 0.2 s of CPU before its first line (the race runtime and
// every package's init, instrumented), against a twentieth of that
// without, and internal/engine's tests start some 400 of them. What the
// handler does is the test's scaffolding, not the code under test, which
// stays race-checked in the test binary itself.
//
// It is built once a test process, at the first call, as Command builds.
// A failed build fails the test, with the go command's output.
func HandlerBinary(t testing.TB) string {
	t.Helper()
	path, err := handlerBinary()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

var handlerBinary = sync.OnceValues(func() (string, error) {
	return cachedBuild("test", "-c", ".")
})

// Command builds the command of the package pkg (a path relative to the
// test's package directory, "." for its own) without the race detector,
// for tests that run it as a user would, and returns its path.
//
// Like HandlerBinary's, the binary is built with the go command that
// runs the tests ($PATH under go test), from the test's package
// directory, into opkit's cache (devcluster.DefaultCacheDir), under a
// directory named after the test's directory and pkg: the next run on unchanged code finds it
// up to date and links nothing (a link of opkit's command is some seconds
// of CPU). Binaries there that no test process used for a week are
// removed.
func Command(pkg string) (string, error) {
	return cachedBuild("build", pkg)
}

// cachedBuild runs go with verb and args (the package last), writing its
// binary into opkit's cache, and returns the binary's path.
func cachedBuild(verb string, args ...string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	cache, err := devcluster.DefaultCacheDir()
	if err != nil {
		return "", err
	}
	pkg := args[len(args)-1]
	// One name a directory and package: two checkouts tested at once, or
	// a worktree beside the main one, never start each other's binaries.
	sum := sha256.Sum256([]byte(dir + "\x00" + verb + "\x00" + pkg))
	base := filepath.Base(filepath.Join(dir, pkg))
	// A directory of its own, so that the binary has its package's name.
	root := filepath.Join(cache, "testbin")
	out := filepath.Join(root, hex.EncodeToString(sum[:6]), base)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	pruneBinaries(root)
	cmd := exec.Command("go", append([]string{verb, "-ldflags=-s -w", "-o", out}, args...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s without the race detector (go %s in %s): %w\n%s", base, strings.Join(cmd.Args[1:], " "), dir, err, b)
	}
	// Its time is its last use, for pruneBinaries: an up-to-date binary
	// is not written again.
	now := time.Now()
	_ = os.Chtimes(out, now, now)
	return out, nil
}

// pruneBinaries removes the binaries under root that no test process
// used for a week, each with its directory: those of checkouts gone since
// (a fresh clone's directory is new, and so is its binaries' directory).
func pruneBinaries(root string) {
	bins, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	for _, bin := range bins {
		if info, err := os.Stat(bin); err == nil && time.Since(info.ModTime()) > 7*24*time.Hour {
			_ = os.RemoveAll(filepath.Dir(bin))
		}
	}
}
