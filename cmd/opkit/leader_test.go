package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// slowKeyHandler appends its idempotency key to $DIR/keys and takes a
// fifth of a second: a drain keeps runs in flight.
const slowKeyHandler = `#!/bin/bash
set -u
cat > /dev/null
echo "$OPKIT_IDEMPOTENCY_KEY" >> "$DIR/keys"
sleep 0.2
echo "done" >&2
`

// TestALeaderKilledMidDrainIsReplacedByItsStandby runs two opkit run
// --leader-elect against one PostgreSQL archive, kills the leader with
// SIGKILL while it drains 300 objects, and checks that the standby takes
// over within the Lease's duration and handles every object: no succeeded
// run repeated, no run left Running.
func TestALeaderKilledMidDrainIsReplacedByItsStandby(t *testing.T) {
	cl, c := startPlane(t)
	dsn := pgtest.Own(t).NewDatabase(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(slowKeyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(def, fmt.Appendf(nil, keysOperator, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(name string) (*lockedBuffer, func()) {
		cmd, out := startOpkit(t, "run", "--leader-elect", "--leader-elect-namespace", "default", "-f", def,
			"--kubeconfig", cl.KubeconfigPath(), "--archive", dsn, "--metrics-addr", "0", "--hooks-addr", "0")
		return out, func() {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Errorf("killing %s: %v", name, err)
			}
			_ = cmd.Wait()
		}
	}
	first, killFirst := start("the first")
	waitOutput(t, first, "operator keys: running", 60*time.Second)
	second, _ := start("the second")
	// The second is a standby: it starts nothing while the first leads.
	time.Sleep(5 * time.Second)
	if strings.Contains(second.String(), "operator keys: running") {
		t.Fatalf("the second replica runs the operator while the first leads:\n%s", second.String())
	}

	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "keys.example.com/v1", "kind": "Key",
				"metadata": map[string]any{"name": fmt.Sprintf("k-%03d", i), "namespace": "default"},
				"spec":     map[string]any{"a": "x"},
			}}
			if err := c.Create(t.Context(), k); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	keys := filepath.Join(dir, "keys")
	clustertest.Eventually(t, 120*time.Second, "a third of the drain", func(context.Context) (bool, error) { return len(keysIn(keys)) >= n/3, nil })
	killFirst()
	killed := time.Now()
	waitOutput(t, second, "operator keys: running", 60*time.Second)
	takeover := time.Since(killed)
	t.Logf("the standby took over %s after the leader was killed", takeover.Round(100*time.Millisecond))
	if takeover > 30*time.Second {
		t.Errorf("the standby took over %s after the leader's end; want within the Lease's 15s and the retry period, with room for a loaded machine", takeover)
	}

	// Every object handled once: one Succeeded run per key, none left
	// Running; a key runs twice only when the killed leader's run of it
	// was interrupted.
	var runs []archive.Run
	clustertest.Eventually(t, 180*time.Second, "every object handled", func(context.Context) (bool, error) {
		runs = opkitRuns(t, dsn, "--operator", "keys", "--limit", "1000")
		succeeded := map[string]int{}
		for _, r := range runs {
			if r.Outcome == archive.Succeeded {
				succeeded[r.Key]++
			}
		}
		return len(succeeded) == n, nil
	})
	byKey := map[string][]archive.Outcome{}
	for _, r := range runs {
		byKey[r.Key] = append(byKey[r.Key], r.Outcome)
	}
	for key, outcomes := range byKey {
		var ok, cancelled int
		for _, o := range outcomes {
			switch o {
			case archive.Succeeded:
				ok++
			case archive.Cancelled:
				cancelled++
			default:
				t.Errorf("key %s has a run %s", key, o)
			}
		}
		if ok != 1 {
			t.Errorf("key %s succeeded %d times", key, ok)
		}
		// A cancelled run may have been killed before its handler
		// started: it ran at most once per run recorded.
		if ran := strings.Count("\n"+strings.Join(keysIn(keys), "\n")+"\n", "\n"+key+"\n"); ran < ok || ran > ok+cancelled {
			t.Errorf("key %s: the handler ran %d times, for the runs %v", key, ran, outcomes)
		}
	}
}
