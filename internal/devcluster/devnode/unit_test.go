package devnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

func TestPodArgvRunsOpkitsImageAsTheNodesOpkitAndMapsPathsUnderMounts(t *testing.T) {
	node := &Node{opts: Options{Opkit: "/usr/local/bin/opkit"}}
	dir := t.TempDir()
	w := &podWorker{node: node, dir: dir}
	// The agent an init container copied into the pod's emptyDir.
	if err := os.MkdirAll(filepath.Join(dir, "root", "opkit-bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "root", "opkit-bin", "opkit"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	mounts := []corev1.VolumeMount{{Name: "bin", MountPath: "/opkit-bin"}, {Name: "files", MountPath: "/opkit/files/"}}
	for _, c := range []struct {
		name, image string
		command     []string
		argv        []string
		want        []string
		mapped      bool
	}{
		{"opkit's image, its binary", "ghcr.io/opkit-dev/opkit:v1.4.0", []string{"/opkit"}, []string{"/opkit", "agent", "install", "/opkit-bin"},
			[]string{"/usr/local/bin/opkit", "agent", "install", "/pods/uid/root/opkit-bin"}, true},
		{"opkit's image, by digest, opkit in PATH", "ghcr.io/opkit-dev/opkit@sha256:abcd", []string{"opkit"}, []string{"opkit", "version"},
			[]string{"/usr/local/bin/opkit", "version"}, true},
		{"opkit's image, its entrypoint", "ghcr.io/opkit-dev/opkit", nil, []string{"run", "--files=/opkit/files/a.py", "--x=/etc/passwd"},
			[]string{"/usr/local/bin/opkit", "run", "--files=/pods/uid/root/opkit/files/a.py", "--x=/etc/passwd"}, true},
		{"a command under a mount", "python:3.12-slim", []string{"/opkit-bin/opkit"}, []string{"/opkit-bin/opkit", "agent", "run", "/opkit/files", "/opkit/filesystem"},
			[]string{"/pods/uid/root/opkit-bin/opkit", "agent", "run", "/pods/uid/root/opkit/files", "/opkit/filesystem"}, true},
		{"opkit's image, another program", "ghcr.io/opkit-dev/opkit:v1", []string{"/host/test.binary"}, []string{"/host/test.binary", "/opkit-bin"},
			[]string{"/host/test.binary", "/opkit-bin"}, false},
		{"a program of the host under a mount's path", "python:3.12-slim", []string{"/opkit-bin/host-program"}, []string{"/opkit-bin/host-program", "/opkit-bin"},
			[]string{"/opkit-bin/host-program", "/opkit-bin"}, false},
		{"another image", "python:3.12-slim", []string{"python3"}, []string{"python3", "/opkit-bin/x.py"},
			[]string{"python3", "/opkit-bin/x.py"}, false},
		{"an image named like opkit's", "ghcr.io/opkit-dev/opkit-extra:v1", []string{"/opkit"}, []string{"/opkit"}, []string{"/opkit"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctr := &container{pod: w, spec: corev1.Container{Image: c.image, Command: c.command, VolumeMounts: mounts}}
			got, mapped := ctr.podArgv(append([]string{}, c.argv...))
			for i := range c.want {
				c.want[i] = strings.ReplaceAll(c.want[i], "/pods/uid", dir)
			}
			if !slices.Equal(got, c.want) || mapped != c.mapped {
				t.Errorf("podArgv(%q) = %q, %v; want %q, %v", c.argv, got, mapped, c.want, c.mapped)
			}
		})
	}
	// Without an opkit binary, opkit's image runs its command on the host
	// as any other.
	w.node = &Node{}
	ctr := &container{pod: w, spec: corev1.Container{Image: "ghcr.io/opkit-dev/opkit:v1", Command: []string{"/opkit"}}}
	if got, mapped := ctr.podArgv([]string{"/opkit", "run"}); mapped || !slices.Equal(got, []string{"/opkit", "run"}) {
		t.Errorf("without an opkit binary: %q, %v", got, mapped)
	}
}

func TestPodEnvMapsTheSpecsLiteralPathsUnderMountsOnly(t *testing.T) {
	dir := t.TempDir()
	w := &podWorker{node: &Node{}, dir: dir}
	ctr := &container{pod: w, spec: corev1.Container{
		VolumeMounts: []corev1.VolumeMount{{Name: "archive", MountPath: "/var/lib/opkit"}, {Name: "tmp", MountPath: "/tmp"}},
		Env: []corev1.EnvVar{
			{Name: "OPKIT_ARCHIVE", Value: "/var/lib/opkit/runs.db"},
			{Name: "OTHER", Value: "/etc/passwd"},
			{Name: "FROM_API", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
	}}
	// The node's own variables name the host's paths, under /tmp too.
	env := []string{"OPKIT_POD_ROOT=/tmp/plane/pods/uid/root", "OPKIT_ARCHIVE=/var/lib/opkit/runs.db", "OTHER=/etc/passwd", "FROM_API=/tmp/x"}
	want := []string{"OPKIT_POD_ROOT=/tmp/plane/pods/uid/root", "OPKIT_ARCHIVE=" + filepath.Join(dir, "root/var/lib/opkit/runs.db"), "OTHER=/etc/passwd", "FROM_API=/tmp/x"}
	if got := ctr.podEnv(env); !slices.Equal(got, want) {
		t.Errorf("podEnv = %q; want %q", got, want)
	}
}

func TestServiceNameParsesTheNamesAClustersDNSGives(t *testing.T) {
	for host, want := range map[string][2]string{
		"opkit.opkit.svc":                      {"opkit", "opkit"},
		"opkit-hooks.team-a.svc.cluster.local": {"team-a", "opkit-hooks"},
		"opkit.opkit.svc.":                     {"opkit", "opkit"},
		"api.github.com":                       {},
		"a.b.c.svc":                            {},
		"opkit.svc":                            {},
		"127.0.0.1":                            {},
	} {
		ns, name, ok := serviceName(host)
		if got := [2]string{ns, name}; got != want || ok != (want != [2]string{}) {
			t.Errorf("serviceName(%q) = %q, %q, %v; want %q", host, ns, name, ok, want)
		}
	}
}

// A tunnel whose server goes away closes the client's side too: a client
// waiting on its answer (a runner's long poll of a replaced engine) sees
// the connection end, not a tunnel open forever.
func TestATunnelWhoseServerClosesClosesTheClientsSide(t *testing.T) {
	server, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := server.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	p, err := startServiceProxy(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	client, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	addr := server.Addr().String()
	if _, err := fmt.Fprintf(client, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(client)
	// Its body is the tunnel itself, read below through r: not closed.
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect}) //nolint:bodyclose // the tunnel, closed with client
	if err != nil {
		t.Fatalf("CONNECT: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answered %s; want 200", resp.Status)
	}
	// A request goes through; the server reads it and goes away without
	// answering, as a killed process's sockets do.
	if _, err := client.Write([]byte("a long poll\n")); err != nil {
		t.Fatal(err)
	}
	up := <-accepted
	if line, err := bufio.NewReader(up).ReadString('\n'); err != nil || line != "a long poll\n" {
		t.Fatalf("the server read %q, %v", line, err)
	}
	_ = up.Close()

	// The client's read ends (the minute bounds a hang, not a speed).
	done := make(chan error, 1)
	go func() { _, err := r.ReadByte(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the client read %v; want io.EOF, the tunnel closed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the client's side of the tunnel was still open a minute after its server closed")
	}
}
