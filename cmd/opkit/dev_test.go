package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// keeperOperator has a handler that waits, on create, until the file
// $GATE exists, then logs the size of a Secret's token.
const keeperOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: keeper}
spec:
  resource:
    group: keeper.example.com
    kind: Keep
    versions:
    - name: v1
      schema: {type: object, properties: {a: {type: string}}}
  handlers:
  - name: slow
    on: [create]
    exec:
      command: [sh, -c, 'while [ ! -e "$GATE" ]; do sleep 0.2; done; echo "a token of ${#TOKEN} bytes" >&2']
      env:
      - {name: GATE, value: "GATE_PATH"}
      - name: TOKEN
        valueFrom: {secretKeyRef: {name: keeper-token, key: token}}
`

// startDev starts opkit dev on dir with args, and returns it once it
// runs, with its output and the kubeconfig it names.
func startDev(t *testing.T, dir string, args ...string) (*exec.Cmd, *lockedBuffer, string) {
	t.Helper()
	cmd := exec.Command(cliBinary, append([]string{"dev", dir, "--console", ""}, args...)...)
	cmd.Env = append(os.Environ(), "OPKIT_STATE_DIR="+t.TempDir(), archiveEnv(t))
	stderr := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitOutput(t, stderr, "opkit dev is running", 3*time.Minute)
	waitOutput(t, stderr, "Stop it with Ctrl-C", 5*time.Second)
	for line := range strings.Lines(stderr.String()) {
		if kc, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			return cmd, stderr, strings.Trim(kc, "'")
		}
	}
	t.Fatalf("opkit dev names no kubeconfig:\n%s", stderr.String())
	return nil, nil, ""
}

func kubeClient(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// keeperRuns are the runs of the keeper operator in t's archive.
func keeperRuns(t *testing.T) ([]archive.Run, error) {
	ctx := t.Context()
	store, err := archive.Open(ctx, testArchive(t), archive.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }()
	return archive.ListAll(ctx, store, archive.Query{Operator: "keeper"})
}

// waitKeeperRuns waits up to a minute until the keeper's runs are as
// cond wants, or fails with the runs and what opkit dev said.
func waitKeeperRuns(t *testing.T, out *lockedBuffer, what string, cond func([]archive.Run) bool) {
	t.Helper()
	deadline := time.Now().Add(clustertest.Scaled(time.Minute))
	for {
		runs, err := keeperRuns(t)
		if err == nil && cond(runs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute; the runs: %+v (%v); opkit dev said:\n%s", what, runs, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestDevWithADataDirKeepsItsPlaneAndFinishesTheRunAKillInterrupted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir, dataDir := t.TempDir(), filepath.Join(t.TempDir(), "plane")
	gate := filepath.Join(t.TempDir(), "gate")
	if err := os.WriteFile(filepath.Join(dir, "operator.yaml"), []byte(strings.Replace(keeperOperator, "GATE_PATH", gate, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dev, out, kubeconfig := startDev(t, dir, "--data-dir", dataDir)
	if !strings.HasPrefix(kubeconfig, dataDir) {
		t.Errorf("the kubeconfig %s is not in the data directory %s", kubeconfig, dataDir)
	}
	c := kubeClient(t, kubeconfig)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keeper-token", Namespace: "default"}, StringData: map[string]string{"token": "s3cret"}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	keep := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keeper.example.com/v1", "kind": "Keep",
		"metadata": map[string]any{"name": "k1", "namespace": "default"}, "spec": map[string]any{"a": "x"},
	}}
	if err := c.Create(t.Context(), keep); err != nil {
		t.Fatal(err)
	}
	waitKeeperRuns(t, out, "the handler runs", func(runs []archive.Run) bool {
		return len(runs) == 1 && runs[0].Outcome == archive.Running
	})

	// Killed mid-run: nothing is stopped in order, nothing recorded.
	if err := dev.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dev.Wait()
	waitGone(t, dataDir, 15*time.Second)
	if _, err := os.Stat(filepath.Join(dataDir, "etcd")); err != nil {
		t.Fatalf("the kept plane's etcd data is gone after the kill: %v\n%s", err, out.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	dev, out, kubeconfig = startDev(t, dir, "--data-dir", dataDir)
	c = kubeClient(t, kubeconfig)
	var gotSecret corev1.Secret
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(secret), &gotSecret); err != nil || string(gotSecret.Data["token"]) != "s3cret" {
		t.Errorf("the Secret after the restart: %v %v", gotSecret.Data, err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(keep), keep); err != nil {
		t.Errorf("the Keep after the restart: %v", err)
	}
	// The interrupted run runs again, with the Secret it reads, and
	// succeeds.
	var done archive.Run
	waitKeeperRuns(t, out, "the interrupted run is run again and succeeds", func(runs []archive.Run) bool {
		for _, r := range runs {
			if r.Handler == "slow" && r.Outcome == archive.Succeeded {
				done = r
				return true
			}
		}
		return false
	})
	if done.Trigger != "create" || done.Name != "k1" {
		t.Errorf("the run that succeeded: trigger %s, object %s, want create of k1", done.Trigger, done.Name)
	}
	if r := opkitWithEnv(t, nil, "logs", done.ID); !strings.Contains(r.stdout, "a token of 6 bytes") {
		t.Errorf("the run's log: %q %s", r.stdout, r.stderr)
	}

	if err := dev.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := dev.Wait(); err != nil {
		t.Errorf("opkit dev after Ctrl-C: %v\n%s", err, out.String())
	}
	waitGone(t, dataDir, 15*time.Second)
	if _, err := os.Stat(filepath.Join(dataDir, "etcd")); err != nil {
		t.Errorf("the kept plane's etcd data is gone after Ctrl-C: %v", err)
	}
}
