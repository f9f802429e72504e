package devcluster_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

// linkOrCopy hard-links src to dst, copying where a link is impossible.
func linkOrCopy(t *testing.T, src, dst string) {
	t.Helper()
	if os.Link(src, dst) == nil {
		return
	}
	copyFile(t, src, dst)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func sha(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func TestEnsureRebuildsACorruptBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	// A cache of its own, seeded from the shared one so that only the
	// corrupted binary needs building.
	shared, err := (&devcluster.Cache{}).Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	cache := &devcluster.Cache{Root: root, Log: &bytes.Buffer{}}
	bins, err := cache.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bins.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range devcluster.AllBinaries {
		if b != devcluster.KubeScheduler {
			linkOrCopy(t, shared.Path(b), bins.Path(b))
		}
	}
	copyFile(t, filepath.Join(shared.Dir, "SHA256SUMS"), filepath.Join(bins.Dir, "SHA256SUMS"))
	corrupt := bins.Path(devcluster.KubeScheduler)
	if err := os.WriteFile(corrupt, []byte("#!/bin/sh\necho corrupt\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	if _, err := cache.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	log := cache.Log.(*bytes.Buffer).String()
	if !strings.Contains(log, "kube-scheduler") || !strings.Contains(log, "does not match its checksum") {
		t.Errorf("the log should name the corrupt binary; got:\n%s", log)
	}
	if strings.Contains(log, "building etcd") || strings.Contains(log, "kube-apiserver,") {
		t.Errorf("only kube-scheduler should be rebuilt; log:\n%s", log)
	}
	sums, err := os.ReadFile(filepath.Join(bins.Dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if want := sha(t, corrupt) + "  kube-scheduler"; !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS lacks %q:\n%s", want, sums)
	}
	out, err := exec.Command(corrupt, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), devcluster.KubernetesVersion) {
		t.Errorf("rebuilt kube-scheduler --version: %q, %v", out, err)
	}
}

func TestEnsureReportsAnUnwritableCacheDir(t *testing.T) {
	// A path below a regular file cannot be created, even by root.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	roots := []string{filepath.Join(file, "cache")}
	if os.Geteuid() != 0 { // permission bits do not stop root
		ro := filepath.Join(t.TempDir(), "read-only")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, ro)
	}
	for _, root := range roots {
		_, err := (&devcluster.Cache{Root: root}).Ensure(t.Context())
		if !errors.Is(err, devcluster.ErrCacheNotWritable) {
			t.Fatalf("Ensure(%s) = %v, want ErrCacheNotWritable", root, err)
		}
		if msg := err.Error(); !strings.Contains(msg, root) || !strings.Contains(msg, "OPKIT_CACHE_DIR") {
			t.Errorf("error %q should name the directory and how to choose another", msg)
		}
	}
}
