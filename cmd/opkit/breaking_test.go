package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// cratesV1 is an Operator whose v2 (cratesV1 less its field size)
// breaks its CRD: the field's values would be pruned.
const cratesV1 = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: crates}
spec:
  resource:
    group: crates.example.com
    kind: Crate
    versions:
    - name: v1
      schema:
        type: object
        properties:
          a: {type: string}
          size: {type: integer}
  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-crate"}
      data: {a: "${self.spec.a}"}
`

// waitExit waits for cmd, started by startOpkit, to exit, and returns its
// exit code; one still running after within fails the test.
func waitExit(t *testing.T, cmd *exec.Cmd, out *lockedBuffer, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatalf("waiting for opkit: %v", err)
		}
		return 0
	case <-time.After(clustertest.Scaled(within)):
		t.Fatalf("opkit still runs after %s:\n%s", clustertest.Scaled(within), out.String())
	}
	return 0
}

// stop interrupts an opkit started by startOpkit and waits for it.
func stop(t *testing.T, cmd *exec.Cmd, out *lockedBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, out, 30*time.Second); code != 0 {
		t.Errorf("opkit run after Ctrl-C: exit %d\n%s", code, out.String())
	}
}

// hasField reports whether the Crate CRD's v1 declares spec.<field>.
func hasField(t *testing.T, c client.Client, field string) bool {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "crates.crates.example.com"}, crd); err != nil {
		t.Fatal(err)
	}
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[field]
	return ok
}

func TestRunRefusesABreakingChangeToAnInstalledCRDUnlessAllowed(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	kc := cl.KubeconfigPath()
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1.yaml"), filepath.Join(dir, "v2.yaml")
	for file, data := range map[string]string{v1: cratesV1, v2: strings.Replace(cratesV1, "          size: {type: integer}\n", "", 1)} {
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (*exec.Cmd, *lockedBuffer) {
		return startOpkit(t, append([]string{"run", "--kubeconfig", kc, "--metrics-addr", "0"}, args...)...)
	}

	// Not installed yet: nothing to compare.
	if r := opkitWithEnv(t, nil, "lint", v2, "--against-cluster", "--kubeconfig", kc); r.code != 0 || !strings.Contains(r.stdout, "operator crates: CRD crates.crates.example.com is not installed yet: nothing to compare") {
		t.Errorf("opkit lint --against-cluster before v1 is installed: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// v1 installs the CRD.
	cmd, out := run("-f", v1)
	waitOutput(t, out, "operator crates: running", 60*time.Second)
	stop(t, cmd, out)

	// Installed: v2 removes a field.
	removed := v2 + ":12: versions[v1].spec.size: breaking: removed: the API server drops it (pruning)"
	r := opkitWithEnv(t, nil, "lint", v2, "--against-cluster", "--kubeconfig", kc)
	if r.code != 1 || !strings.Contains(r.stdout, removed) || !strings.Contains(r.stderr, "1 breaking change, 0 warnings in 1 definition against the cluster") {
		t.Errorf("opkit lint --against-cluster: exit %d, want 1 and %q\nstdout: %s\nstderr: %s", r.code, removed, r.stdout, r.stderr)
	}

	// Refused: the finding, and the flag that applies it anyway.
	cmd, out = run("-f", v2)
	if code := waitExit(t, cmd, out, 60*time.Second); code != 1 {
		t.Fatalf("opkit run of a breaking change: exit %d, want 1:\n%s", code, out.String())
	}
	for _, want := range []string{"operator crates: refused: 1 breaking change to the installed CRD crates.crates.example.com", removed, "--allow-breaking"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("opkit run's refusal lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), `"level"`) {
		t.Errorf("the refusal comes with controller-runtime's log lines:\n%s", out.String())
	}
	if !hasField(t, c, "size") {
		t.Error("the refused definition changed the CRD: spec.size is gone")
	}

	// Allowed: applied.
	cmd, out = run("-f", v2, "--allow-breaking")
	waitOutput(t, out, "operator crates: running", 60*time.Second)
	if hasField(t, c, "size") {
		t.Error("with --allow-breaking the CRD still declares spec.size")
	}
	stop(t, cmd, out)
}
