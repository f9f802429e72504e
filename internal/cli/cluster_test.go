package cli

import (
	"os/exec"
	"strings"
	"testing"
)

func TestExportLineSurvivesTheShell(t *testing.T) {
	for _, path := range []string{"/tmp/plain/kubeconfig", "/tmp/with space/kc", "/tmp/it's/$(touch pwned)/`x`"} {
		line := exportLine(path)
		out, err := exec.Command("sh", "-c", line+`; printf %s "$KUBECONFIG"`).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", line, err)
		}
		if string(out) != path {
			t.Errorf("%q set KUBECONFIG=%q, want %q", line, out, path)
		}
	}
}

func TestReadReport(t *testing.T) {
	for _, tc := range []struct {
		in         string
		ready      bool
		errContain string
	}{
		{in: `{"ready":true}` + "\n", ready: true},
		{in: `{"error":"etcd exited"}` + "\n", errContain: "etcd exited"},
		{in: "", ready: false},
		{in: "garbage\n", errContain: "unreadable report"},
	} {
		rep := readReport(strings.NewReader(tc.in))
		if rep.Ready != tc.ready || !strings.Contains(rep.Error, tc.errContain) || (tc.errContain == "" && rep.Error != "") {
			t.Errorf("readReport(%q) = %+v", tc.in, rep)
		}
	}
}
