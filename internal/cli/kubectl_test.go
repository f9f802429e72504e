package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubectlExitsWithKubectlsStatusAndAddsNothingToItsError(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the plane's cached kubectl")
	}
	// kubectl parses its flags before it reads the kubeconfig: no cluster
	// is asked.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "kubeconfig"))
	var stdout, stderr bytes.Buffer
	code := Main([]string{"kubectl", "get", "pods", "--nosuchflag"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "unknown flag: --nosuchflag") {
		t.Errorf("exit %d, stderr %q; want kubectl's 1 and its error", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "opkit:") {
		t.Errorf("opkit added to kubectl's error:\n%s", stderr.String())
	}
}
