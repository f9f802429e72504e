package devnode

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExpandFollowsKubernetesRules(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"$(A)":            "x",
		"pre-$(A)-post":   "pre-x-post",
		"$(EMPTY)|":       "|",
		"$(UNDEFINED)":    "$(UNDEFINED)",
		"$$(A)":           "$(A)",
		"$$":              "$",
		"$(rm -rf /)":     "$(rm -rf /)",
		"$(A":             "$(A",
		"$":               "$",
		"a$b":             "a$b",
		"plain; echo hi":  "plain; echo hi",
		"$(A)$(A)$$$(A)$": "xx$x$",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSeekTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	for _, tc := range []struct {
		content string
		n       int
		want    string
	}{
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc\n", 0, ""},
		{"", 3, ""},
	} {
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := seekTail(f, tc.n); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != tc.want {
			t.Errorf("tail %d of %q = %q, want %q", tc.n, tc.content, got, tc.want)
		}
	}
}

func TestPhase(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	ok := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
	failed := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}
	creating := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	backoff := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: failed.State}
	for _, tc := range []struct {
		name       string
		init, main []corev1.ContainerStatus
		policy     corev1.RestartPolicy
		want       corev1.PodPhase
	}{
		{"init running", []corev1.ContainerStatus{running}, []corev1.ContainerStatus{creating}, corev1.RestartPolicyNever, corev1.PodPending},
		{"init failed, never", []corev1.ContainerStatus{failed}, []corev1.ContainerStatus{creating}, corev1.RestartPolicyNever, corev1.PodFailed},
		{"init failed, on failure", []corev1.ContainerStatus{failed}, []corev1.ContainerStatus{creating}, corev1.RestartPolicyOnFailure, corev1.PodPending},
		{"creating", nil, []corev1.ContainerStatus{creating}, corev1.RestartPolicyAlways, corev1.PodPending},
		{"running", []corev1.ContainerStatus{ok}, []corev1.ContainerStatus{running, ok}, corev1.RestartPolicyNever, corev1.PodRunning},
		{"all succeeded", nil, []corev1.ContainerStatus{ok, ok}, corev1.RestartPolicyNever, corev1.PodSucceeded},
		{"one failed, never", nil, []corev1.ContainerStatus{ok, failed}, corev1.RestartPolicyNever, corev1.PodFailed},
		{"one failed, on failure", nil, []corev1.ContainerStatus{ok, failed}, corev1.RestartPolicyOnFailure, corev1.PodRunning},
		{"succeeded, always", nil, []corev1.ContainerStatus{ok}, corev1.RestartPolicyAlways, corev1.PodRunning},
		{"back-off", nil, []corev1.ContainerStatus{backoff}, corev1.RestartPolicyAlways, corev1.PodRunning},
	} {
		if got := podPhase(tc.main, tc.init, tc.policy); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}
