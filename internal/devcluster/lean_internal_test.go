package devcluster

import (
	"slices"
	"strings"
	"testing"
)

func TestControllersFlagIsEveryControllerUnlessLean(t *testing.T) {
	if got := controllersFlag(false); got != "--controllers=*" {
		t.Errorf("a full plane's controllers: %s, want --controllers=*", got)
	}
	got := controllersFlag(true)
	if !strings.HasPrefix(got, "--controllers=*,-") {
		t.Errorf("a lean plane's controllers: %s, want every controller less some", got)
	}
	for _, name := range LeanOffControllers {
		if !strings.Contains(got+",", ",-"+name+",") {
			t.Errorf("a lean plane's controllers: %s, want %s left out", got, name)
		}
	}
	off := strings.Split(strings.TrimPrefix(got, "--controllers=*,"), ",")
	for _, needed := range []string{"garbage-collector-controller", "job-controller", "namespace-controller", "serviceaccount-controller", "serviceaccount-token-controller", "deployment-controller", "replicaset-controller"} {
		if slices.Contains(off, "-"+needed) {
			t.Errorf("a lean plane leaves out %s, which opkit's tests need", needed)
		}
	}
}
