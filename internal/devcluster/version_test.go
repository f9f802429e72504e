package devcluster_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

// minor returns "MINOR" of vX.MINOR.PATCH.
func minor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// The k8s.io client libraries are at the control plane's minor or one
// above it (client-go against a server one minor older uses only what both
// serve; the CEL environments of k8s.io/apiserver default to the minor below
// their own, the plane's), all at one minor, and controller-runtime is the
// release built on them.
func TestClientLibrariesMatchTheControlPlaneMinor(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	plane := atoi(minor(devcluster.KubernetesVersion))
	seen := map[string]string{}
	client := -1
	for _, req := range mf.Require {
		dep := req.Mod
		switch dep.Path {
		case "k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/apiextensions-apiserver", "k8s.io/apiserver":
			seen[dep.Path] = dep.Version
			got := atoi(minor(dep.Version))
			if got != plane && got != plane+1 {
				t.Errorf("%s %s: minor %d, want %d or %d for the control plane %s (pin it in go.mod)", dep.Path, dep.Version, got, plane, plane+1, devcluster.KubernetesVersion)
			}
			if client >= 0 && got != client {
				t.Errorf("%s %s: minor %d, but another k8s.io library is at minor %d (pin them alike in go.mod)", dep.Path, dep.Version, got, client)
			}
			client = got
		}
	}
	for _, req := range mf.Require {
		if dep := req.Mod; dep.Path == "sigs.k8s.io/controller-runtime" {
			// controller-runtime v0.(MINOR-12) is built on k8s.io/* v0.MINOR.
			seen[dep.Path] = dep.Version
			if got := minor(dep.Version); got == "" || atoi(got)+12 != client {
				t.Errorf("controller-runtime %s is not the release for the k8s.io libraries at minor %d (pin it in go.mod)", dep.Version, client)
			}
		}
	}
	if len(seen) != 6 {
		t.Errorf("found only %v among the dependencies", seen)
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}
