package devnode_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// agentStandIn stands in for opkit agent, as the test binary run as the
// dev node's opkit: `agent install DIR` copies the running executable to
// DIR/opkit (mode 0755), as the real agent does; `agent run --files=DIR
// --token-file=FILE` prints the files' names and the token, for the test
// to check, and exits.
func agentStandIn(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "agent stand-in: install DIR or run FLAGS")
		return 2
	}
	switch args[0] {
	case "install":
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, "agent stand-in: install DIR")
			return 2
		}
		exe, err := os.Executable()
		if err == nil {
			var data []byte
			if data, err = os.ReadFile(exe); err == nil {
				err = os.WriteFile(filepath.Join(args[1], "opkit"), data, 0o755)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent stand-in:", err)
			return 1
		}
		fmt.Println("installed into", args[1])
		return 0
	case "run":
		flags := map[string]string{}
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			flags[k] = v
		}
		entries, err := os.ReadDir(flags["files"])
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent stand-in:", err)
			return 1
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		token, err := os.ReadFile(flags["token-file"])
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent stand-in:", err)
			return 1
		}
		fmt.Printf("files=%s\ntoken=%s\n", strings.Join(names, ","), token)
		return 0
	}
	fmt.Fprintf(os.Stderr, "agent stand-in: unknown command %q\n", args[0])
	return 2
}

// A runner's Pod, as opkit generate manifests makes it (the agent from an
// init container of opkit's image into an emptyDir, the runner's image
// running it from there, the operator's files, a projected token of the
// runner's audience), runs on the dev node: opkit's image is the node's
// opkit (here the test binary, whose agent is a stand-in, since opkit
// agent is another branch's), the command under the mount runs the copy
// from the pod's root, and the token is the API server's, for the
// runner's ServiceAccount and audience only.
func TestOpkitImageRunsTheNodesOpkitAndACommandUnderAMountRunsFromThePodRoot(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const sa, audience = "opkit-runner-notes", "opkit.dev/runner"
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: env.Namespace}, AutomountServiceAccountToken: ptr.To(false)},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "notes-files", Namespace: env.Namespace}, Data: map[string]string{"notify.py": "print(1)\n", "lib.helpers.py": "x = 1\n"}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: env.Namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			Tolerations:                  tolerate,
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: ptr.To(false),
			InitContainers: []corev1.Container{{
				Name: "agent", Image: "ghcr.io/opkit-dev/opkit:v1.4.0",
				Command:      []string{"/opkit", "agent", "install", "/opkit-bin"},
				VolumeMounts: []corev1.VolumeMount{{Name: "opkit-bin", MountPath: "/opkit-bin"}},
			}},
			Containers: []corev1.Container{{
				Name: "runner", Image: "python:3.12-slim",
				Command: []string{"/opkit/bin/opkit", "agent", "run"},
				Args:    []string{"--files=/opkit/files", "--token-file=/var/run/secrets/opkit.dev/runner/token"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "opkit-bin", MountPath: "/opkit/bin", ReadOnly: true},
					{Name: "files", MountPath: "/opkit/files", ReadOnly: true},
					{Name: "token", MountPath: "/var/run/secrets/opkit.dev/runner", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "opkit-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "notes-files"},
					Items:                []corev1.KeyToPath{{Key: "notify.py", Path: "notify.py"}, {Key: "lib.helpers.py", Path: "lib/helpers.py"}},
				}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: audience, ExpirationSeconds: ptr.To(int64(3600)), Path: "token"},
				}}}}},
			},
		},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 90*time.Second, "the runner Pod ends", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	logs := func(container string) string {
		r, err := cs.CoreV1().Pods(env.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	agentLog, runnerLog := logs("agent"), logs("runner")
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the runner Pod %s: %+v\nagent: %s\nrunner: %s", pod.Status.Phase, pod.Status.ContainerStatuses, agentLog, runnerLog)
	}
	if !strings.Contains(agentLog, "installed into ") || strings.Contains(agentLog, "installed into /opkit-bin\n") {
		t.Errorf("the agent did not install into the pod's emptyDir, under its root: %q", agentLog)
	}
	var token string
	for line := range strings.Lines(runnerLog) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			switch k {
			case "files":
				if got := strings.Split(v, ","); !slices.Equal(got, []string{"lib", "notify.py"}) {
					t.Errorf("the runner's files %v; want lib and notify.py, the ConfigMap's items", got)
				}
			case "token":
				token = v
			}
		}
	}
	if token == "" {
		t.Fatalf("the runner read no token: %q", runnerLog)
	}
	review := func(audiences []string) *authenticationv1.TokenReview {
		tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := review([]string{audience})
	if want := "system:serviceaccount:" + env.Namespace + ":" + sa; !tr.Status.Authenticated || tr.Status.User.Username != want || !slices.Contains(tr.Status.Audiences, audience) {
		t.Errorf("TokenReview with audience %s: %+v; want %s authenticated", audience, tr.Status, want)
	}
	if tr := review(nil); tr.Status.Authenticated {
		t.Errorf("the runner's token is accepted by the API server for itself: %+v", tr.Status)
	}
}
