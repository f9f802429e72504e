package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
// SIGKILL while it drains 1,000 objects, and checks that the standby takes
// over within the Lease's duration and handles every object: no succeeded
// run repeated, no run left Running.
func TestALeaderKilledMidDrainIsReplacedByItsStandby(t *testing.T) {
	t.Parallel()
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
			"--kubeconfig", cl.KubeconfigPath(), "--archive", dsn, "--metrics-addr", "127.0.0.1:0", "--hooks-addr", "0")
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
	// The second is a standby: it says who leads, and starts nothing
	// while the first leads (checked when the first is killed: the
	// whole first third of the drain).
	waitOutput(t, second, "metrics: http://", 60*time.Second)
	leader := func(out *lockedBuffer) map[string]any {
		_, url, _ := strings.Cut(out.String(), "metrics: ")
		url, _, _ = strings.Cut(url, "/metrics")
		var info map[string]any
		if err := json.Unmarshal([]byte(httpGet(t, url+"/leader")), &info); err != nil {
			t.Fatal(err)
		}
		return info
	}
	// A standby is ready: healthy, ready to take over, once its first look
	// at the API server answered (on a loaded machine, a while after it
	// says where its metrics are).
	_, standbyMetrics, _ := strings.Cut(second.String(), "metrics: ")
	standbyMetrics, _, _ = strings.Cut(standbyMetrics, "/metrics")
	clustertest.Eventually(t, 30*time.Second, "the standby ready", func(context.Context) (bool, error) {
		status, _ := clustertest.Get(t, standbyMetrics+"/readyz")
		return status == http.StatusOK, nil
	})
	if a, b := leader(first), leader(second); a["leading"] != true || b["leading"] != false || b["holder"] == "" || a["holder"] != b["holder"] || b["lease"] != "default/opkit-engine" {
		t.Errorf("/leader of the leader %v, of the standby %v; want the standby to name the leader's Lease and holder", a, b)
	}

	const n = 1000
	// Sixteen creates at a time: a thousand at once starve a loaded
	// machine's API server of new connections (TLS handshake timeouts).
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
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
	clustertest.Eventually(t, 300*time.Second, "a third of the drain", func(context.Context) (bool, error) { return len(keysIn(keys)) >= n/3, nil })
	if strings.Contains(second.String(), "operator keys: running") {
		t.Fatalf("the second replica runs the operator while the first leads:\n%s", second.String())
	}
	killFirst()
	killed := time.Now()
	waitOutput(t, second, "operator keys: running", 60*time.Second)
	takeover := time.Since(killed)
	t.Logf("the standby took over %s after the leader was killed", takeover.Round(100*time.Millisecond))
	if b := leader(second); b["leading"] != true {
		t.Errorf("/leader of the new leader: %v", b)
	}
	if bound := clustertest.Scaled(15 * time.Second); takeover > bound {
		t.Errorf("the standby took over %s after the leader's end; want within the Lease's 8s and the retry period (%s, scaled for a loaded machine)", takeover, bound)
	}

	// Every object handled once: one Succeeded run per key, none left
	// Running; a key runs twice only when the killed leader's run of it
	// was interrupted.
	store, err := archive.Open(t.Context(), dsn, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var runs []archive.Run
	clustertest.Eventually(t, 300*time.Second, "every object handled", func(ctx context.Context) (bool, error) {
		runs = nil
		q := archive.Query{Operator: "keys", Limit: 1000}
		for {
			page, err := store.List(ctx, q)
			if err != nil {
				return false, err
			}
			runs = append(runs, page.Runs...)
			if q.Cursor = page.Next; q.Cursor == "" {
				break
			}
		}
		succeeded := map[string]int{}
		for _, r := range runs {
			if r.Outcome == archive.Succeeded {
				succeeded[r.Key]++
			}
		}
		return len(succeeded) == n, nil
	})
	// The new leader's first run: the killed one starts none after its
	// death, so the first run started after it is the new leader's.
	var firstRun time.Time
	for _, r := range runs {
		if r.StartedAt.After(killed) && (firstRun.IsZero() || r.StartedAt.Before(firstRun)) {
			firstRun = r.StartedAt
		}
	}
	t.Logf("the new leader's first run started %s after the leader was killed", firstRun.Sub(killed).Round(100*time.Millisecond))
	if bound := clustertest.Scaled(15 * time.Second); firstRun.IsZero() || firstRun.Sub(killed) > bound {
		t.Errorf("the new leader's first run started %s after the leader was killed; want within 15s (%s, scaled for a loaded machine)", firstRun.Sub(killed), bound)
	}
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

// TestAPostgreSQLArchiveStoppedMidDrainIsToldAndCaughtUp stops the
// PostgreSQL server of opkit run's archive while a handler runs and
// objects are created: the engine says the archive cannot record runs,
// starts no handler meanwhile (a run it could not record would be lost),
// and once the server is back records the run that ended during the
// outage and runs the others, each once.
func TestAPostgreSQLArchiveStoppedMidDrainIsToldAndCaughtUp(t *testing.T) {
	t.Parallel()
	pg := pgtest.Own(t)
	dsn := pg.NewDatabase(t)
	cl, c := startPlane(t)
	dir := t.TempDir()
	def, keys := keyRecorder(t, dir, "3", "  - name: work\n    on: [create]\n")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", dsn, "--metrics-addr", "0")
	waitOutput(t, out, "operator notes: running", 60*time.Second)
	started := func() int { return len(keysIn(keys)) }
	createNote(t, c, "before", "x")
	clustertest.Eventually(t, time.Minute, "the first run started", func(context.Context) (bool, error) { return started() == 1, nil })

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	createNote(t, c, "down-1", "x")
	createNote(t, c, "down-2", "x")
	waitOutput(t, out, "the archive cannot record runs", 30*time.Second)
	time.Sleep(6 * time.Second) // the first run has ended; the others were tried again
	if n := started(); n != 1 {
		t.Fatalf("%d handlers started; want only the one started before the server stopped", n)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "the archive records runs again after", 60*time.Second)
	var runs []archive.Run
	clustertest.Eventually(t, time.Minute, "three runs ended", func(context.Context) (bool, error) {
		runs = opkitRuns(t, dsn, "--operator", "notes")
		ended := 0
		for _, r := range runs {
			if r.Outcome != archive.Running {
				ended++
			}
		}
		return ended >= 3, nil
	})
	for _, r := range runs {
		if r.Outcome != archive.Succeeded {
			t.Errorf("run %s of %s: %s %q; want Succeeded", r.ID, r.Name, r.Outcome, r.Error)
		}
	}
	if n := started(); n != 3 || len(runs) != 3 {
		t.Errorf("%d handler starts and %d runs for 3 Notes; want one each", n, len(runs))
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("the log said:\n%s", grepLines(out.String(), "archive"))
	if strings.Contains(out.String(), "password") {
		t.Errorf("the log names a password:\n%s", out.String())
	}
}
