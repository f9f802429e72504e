package devcluster

import (
	"path/filepath"
	"strings"
	"testing"
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
