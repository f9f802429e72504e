package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// pagesOperator has a staged rollout; a Page's ConfigMap says which
// definition wrote it (%s), and %s is appended to the children.
const pagesOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: pages}
spec:
  resource:
    group: pages.example.com
    kind: Page
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
  rollout:
    steps: [{count: 2}, {percent: 50}]
    settle: 3s
  children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-content"}
      data: {text: "${self.spec.text}", definition: %q}
%s`

// TestARolloutThroughTheBinaryPausesIsUndoneAndSurvivesItsLeader runs
// two replicas of opkit run with leader election on one PostgreSQL
// archive. A definition whose new child the API server refuses, written
// to the file and the replicas restarted, reaches the canary's 2 of 20
// Pages and pauses (opkit rollout status says so, the 18 others
// untouched);
// opkit rollout undo returns the 2; a good definition then rolls out,
// and when the leader is killed with SIGKILL mid-rollout the standby
// goes on from its step to the end.
func TestARolloutThroughTheBinaryPausesIsUndoneAndSurvivesItsLeader(t *testing.T) {
	t.Parallel()
	const pages = 20
	cl, c := startPlane(t)
	dsn := pgtest.Own(t).NewDatabase(t)
	dir := t.TempDir()
	def := filepath.Join(dir, "pages.yaml")
	write := func(definition, extra string) {
		if err := os.WriteFile(def, fmt.Appendf(nil, pagesOperator, definition, extra), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type replica struct {
		cmd *exec.Cmd
		out *lockedBuffer
	}
	start := func() *replica {
		cmd, out := startOpkit(t, "run", "--leader-elect", "--leader-elect-namespace", "default", "-f", def,
			"--kubeconfig", cl.KubeconfigPath(), "--archive", dsn, "--metrics-addr", "0", "--hooks-addr", "0")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return &replica{cmd, out}
	}
	stop := func(rs ...*replica) {
		for _, r := range rs {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			_ = r.cmd.Wait()
		}
	}
	// leader waits until one of the replicas runs the operator.
	leader := func(rs ...*replica) (lead, standby *replica) {
		t.Helper()
		clustertest.Eventually(t, 2*time.Minute, "a replica runs the operator", func(context.Context) (bool, error) {
			for i, r := range rs {
				if strings.Contains(r.out.String(), "operator pages: running") {
					lead, standby = r, rs[1-i]
					return true, nil
				}
			}
			return false, nil
		})
		return lead, standby
	}
	rollout := func(args ...string) result {
		return opkit(t, "", append([]string{"rollout"}, append(args, "--kubeconfig", cl.KubeconfigPath())...)...)
	}
	content := func() map[string]string {
		out := map[string]string{}
		for i := range pages {
			cm := &corev1.ConfigMap{}
			name := fmt.Sprintf("page%d", i)
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name + "-content"}, cm); err == nil {
				out[name] = cm.Data["definition"]
			}
		}
		return out
	}
	waitContent := func(what string, want func(name string) string) {
		t.Helper()
		clustertest.Eventually(t, 2*time.Minute, what, func(context.Context) (bool, error) {
			got := content()
			for i := range pages {
				name := fmt.Sprintf("page%d", i)
				if got[name] != want(name) {
					return false, nil
				}
			}
			return true, nil
		})
	}

	write("one", "")
	a, b := start(), start()
	leader(a, b)
	for i := range pages {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "pages.example.com/v1", "kind": "Page",
			"metadata": map[string]any{"name": fmt.Sprintf("page%d", i), "namespace": "default"},
			"spec":     map[string]any{"text": "hello"},
		}}
		if err := c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	waitContent("every Page on the first definition", func(string) string { return "one" })
	if res := rollout("status", "pages"); res.code != 0 || !strings.Contains(res.stdout, "operator pages: Complete") {
		t.Errorf("opkit rollout status of the first definition: %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// A broken definition, as a person would ship it: the file edited,
	// the replicas restarted.
	stop(a, b)
	write("two", `  - id: broken
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-broken"}
      data: {"not a key": "x"}
`)
	a, b = start(), start()
	leader(a, b)
	var status result
	clustertest.Eventually(t, 2*time.Minute, "the rollout paused", func(context.Context) (bool, error) {
		status = rollout("status", "pages")
		return strings.Contains(status.stdout, "Paused at step 1 of 3"), nil
	})
	for _, want := range []string{"objects: 2 of 20 on", "the other 18 on", "default/page0", "Degraded", "not a key", "1. 2 objects  (taken)"} {
		if !strings.Contains(status.stdout, want) {
			t.Errorf("opkit rollout status does not say %q:\n%s", want, status.stdout)
		}
	}
	// Paused waits for a person: said by the exit code too.
	if status.code != 1 || !strings.Contains(status.stderr, "the rollout is Paused: it waits for opkit rollout continue or undo") {
		t.Errorf("opkit rollout status of a paused rollout: exit %d, stderr %q; want 1, saying it waits for a person", status.code, status.stderr)
	}
	t.Logf("opkit rollout status pages, paused:\n%s", status.stdout)
	time.Sleep(4 * time.Second) // more than settle: nothing moves while paused
	waitContent("the canary on the broken definition, the others untouched", func(name string) string {
		if name == "page0" || name == "page1" {
			return "two"
		}
		return "one"
	})

	res := rollout("undo", "pages")
	if res.code != 0 || !strings.Contains(res.stdout, "RolledBack") {
		t.Fatalf("opkit rollout undo: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	waitContent("the canary back on the first definition", func(string) string { return "one" })
	if res := rollout("undo", "pages"); res.code == 0 || !strings.Contains(res.stderr, "nothing to undo") {
		t.Errorf("opkit rollout undo of an undone rollout: %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// A good definition; the leader killed once half the Pages are on it.
	stop(a, b)
	write("three", "")
	a, b = start(), start()
	lead, standby := leader(a, b)
	clustertest.Eventually(t, 2*time.Minute, "the good definition at its second step", func(context.Context) (bool, error) {
		return strings.Contains(rollout("status", "pages").stdout, "at step 2 of 3"), nil
	})
	if err := lead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = lead.cmd.Wait()
	waitOutput(t, standby.out, "goes on with the rollout", 2*time.Minute)
	clustertest.Eventually(t, 2*time.Minute, "the good definition rolled out", func(context.Context) (bool, error) {
		return strings.Contains(rollout("status", "pages").stdout, "operator pages: Complete"), nil
	})
	waitContent("every Page on the good definition", func(string) string { return "three" })
	t.Logf("the standby's log:\n%s", grepLines(standby.out.String(), "rollout"))
	if !strings.Contains(standby.out.String(), "step 3 of 3") {
		t.Errorf("the standby that took over did not take the last step:\n%s", standby.out.String())
	}
}
