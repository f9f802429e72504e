package devcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWrapperModuleReplacesStagingWithMatchingRelease(t *testing.T) {
	got := string(wrapperModule("kubernetes", "k8s.io/kubernetes", "v1.36.4", []string{"k8s.io/api", "k8s.io/client-go"}))
	for _, want := range []string{
		"module opkit.local/build/kubernetes\n",
		"require k8s.io/kubernetes v1.36.4\n",
		"\tk8s.io/api => k8s.io/api v0.36.4\n",
		"\tk8s.io/client-go => k8s.io/client-go v0.36.4\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
	if etcd := string(wrapperModule("etcd", "go.etcd.io/etcd/server/v3", "v3.6.8", nil)); strings.Contains(etcd, "replace") {
		t.Errorf("etcd's wrapper needs no replace:\n%s", etcd)
	}
}

func TestSumsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), sumsFile)
	want := map[Binary]string{Etcd: "aa", Kubectl: "bb"}
	if err := writeSums(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := readSums(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[Etcd] != "aa" || got[Kubectl] != "bb" {
		t.Errorf("readSums = %v, want %v", got, want)
	}
	empty, err := readSums(filepath.Join(t.TempDir(), "missing"))
	if err != nil || len(empty) != 0 {
		t.Errorf("readSums of a missing file = %v, %v; want empty, nil", empty, err)
	}
}

// fakeFetch writes a program that fails with stderr's text until it has
// run failures times, then succeeds, and returns how to make its command
// and how many times it ran.
func fakeFetch(t *testing.T, failures int, stderr string) (func() *exec.Cmd, func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	script := filepath.Join(dir, "fetch")
	body := fmt.Sprintf("#!/bin/sh\necho x >> %q\nif [ $(wc -l < %q) -le %d ]; then echo %q >&2; exit 1; fi\n", count, count, failures, stderr)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "\n")
	}
	return func() *exec.Cmd { return exec.Command(script) }, runs
}

func TestAFetchThatMeetsANetworkFaultIsTriedAgain(t *testing.T) {
	defer func(p time.Duration) { fetchPause = p }(fetchPause)
	fetchPause = time.Millisecond
	var log strings.Builder
	c := &Cache{Log: &log}

	newCmd, runs := fakeFetch(t, 2, `go: k8s.io/kubernetes@v1.36.4: Get "https://proxy.golang.org/...": read tcp 192.0.2.2:48216->203.0.113.80:443: read: connection reset by peer`)
	if err := c.runFetching(t.Context(), newCmd, "resolving"); err != nil {
		t.Fatalf("two resets, then success: %v", err)
	}
	if runs() != 3 {
		t.Errorf("ran %d times, want 3", runs())
	}
	if !strings.Contains(log.String(), "resolving: a network fault, trying again") {
		t.Errorf("the log does not say it tried again: %q", log.String())
	}

	newCmd, runs = fakeFetch(t, 5, "read: connection reset by peer")
	err := c.runFetching(t.Context(), newCmd, "resolving")
	if err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Errorf("a fault that lasts: got %v, want the last failure", err)
	}
	if runs() != fetchAttempts {
		t.Errorf("a fault that lasts ran %d times, want %d", runs(), fetchAttempts)
	}

	newCmd, runs = fakeFetch(t, 1, "go: k8s.io/kubernetes@v9.9.9: invalid version: unknown revision v9.9.9")
	if err := c.runFetching(t.Context(), newCmd, "resolving"); err == nil || !strings.Contains(err.Error(), "unknown revision") {
		t.Errorf("an unknown version: got %v", err)
	}
	if runs() != 1 {
		t.Errorf("an unknown version ran %d times, want 1 (it is no network fault)", runs())
	}
}
