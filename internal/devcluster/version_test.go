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

func TestClientLibrariesMatchTheControlPlaneMinor(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := minor(devcluster.KubernetesVersion)
	seen := map[string]string{}
	for _, req := range mf.Require {
		dep := req.Mod
		switch dep.Path {
		case "k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/apiextensions-apiserver":
			seen[dep.Path] = dep.Version
			if got := minor(dep.Version); got != want {
				t.Errorf("%s %s: minor %s, want %s like the control plane %s (pin it in go.mod)", dep.Path, dep.Version, got, want, devcluster.KubernetesVersion)
			}
		case "sigs.k8s.io/controller-runtime":
			// controller-runtime v0.(MINOR-12) is built on k8s.io/* v0.MINOR.
			seen[dep.Path] = dep.Version
			if got := minor(dep.Version); got == "" || atoi(got)+12 != atoi(want) {
				t.Errorf("controller-runtime %s is not the release for Kubernetes 1.%s (pin it in go.mod)", dep.Version, want)
			}
		}
	}
	if len(seen) != 5 {
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
