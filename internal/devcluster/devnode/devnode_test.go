package devnode_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
)

// holdEnv makes the test binary start a plane with a dev node, run a Pod
// whose command is `sleep <value>`, print "ready" and wait to be killed.
const holdEnv = "DEVNODE_TEST_HOLD_SLEEP"

func TestMain(m *testing.M) {
	if arg := os.Getenv(holdEnv); arg != "" {
		holdPod(arg)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		clustertest.Exit(agentStandIn(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		clustertest.Exit(probe(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		clustertest.Exit(probe(os.Args[1:]))
	}
	// Tokens renewed within seconds, for TestAPodReachesServicesByNameAndTheAPIAsItsServiceAccountWithRenewedTokens.
	devnode.RenewTokensAfter(3 * time.Second)
	// The test binary is the dev node's opkit: the containers of opkit's
	// image run it, and its agent stand-in answers.
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	devnode.UseOpkit(exe)
	clustertest.Main(m)
}

func holdPod(sleepArg string) {
	ctx := context.Background()
	c, err := devcluster.Start(ctx, devcluster.Options{DevNode: true})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	pod := devPod("default", "held", corev1.RestartPolicyNever, "sleep", sleepArg)
	if err := cl.Create(ctx, pod); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return err == nil && pod.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		fmt.Println("error: pod not running:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	<-c.Done()
}

var tolerate = []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}

func devPod(ns, name string, policy corev1.RestartPolicy, argv ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: policy,
			Tolerations:   tolerate,
			Containers:    []corev1.Container{{Name: "main", Image: "ignored", Command: argv}},
		},
	}
}

var eventually = clustertest.Eventually

func waitPhase(t *testing.T, env *clustertest.Env, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("pod %s reaches %s", pod.Name, phase), func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == phase, nil
	})
}

// kubectl runs the plane's kubectl as an administrator.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), args...)
}

func TestJobRunsEchoAndKubectlLogsShowsIt(t *testing.T) {
	env := clustertest.New(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: env.Namespace},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   tolerate,
			Containers:    []corev1.Container{{Name: "hello", Image: "busybox:1.36", Command: []string{"echo", "hello"}}},
		}}},
	}
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "job completes", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err
		}
		return job.Status.Succeeded == 1, nil
	})
	out, err := kubectl(t, "logs", "-n", env.Namespace, "job/hello")
	if err != nil || out != "hello\n" {
		t.Fatalf("kubectl logs job/hello = %q, %v; want %q", out, err, "hello\n")
	}
}

func TestFailingCommandFailsThePodAndTheJobRetries(t *testing.T) {
	env := clustertest.New(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fails", Namespace: env.Namespace},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(1)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Tolerations:   tolerate,
				Containers:    []corev1.Container{{Name: "main", Image: "ignored", Command: []string{"sh", "-c", "echo trying; exit 3"}}},
			}},
		},
	}
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "job fails after backoffLimit", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err
		}
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	var pods corev1.PodList
	if err := env.Client.List(t.Context(), &pods, client.InNamespace(env.Namespace), client.MatchingLabels{"job-name": "fails"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Errorf("the job made %d pods, want 2 (first try + backoffLimit 1)", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodFailed {
			t.Errorf("pod %s phase %s, want Failed", p.Name, p.Status.Phase)
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			t.Fatalf("pod %s: no terminated container status: %+v", p.Name, p.Status.ContainerStatuses)
		}
		if term := p.Status.ContainerStatuses[0].State.Terminated; term.ExitCode != 3 || term.Reason != "Error" {
			t.Errorf("pod %s: terminated %+v, want exit code 3, reason Error", p.Name, term)
		}
	}
}

// pidOf reads the container process id from the status's containerID.
func pidOf(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	id := pod.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(strings.TrimPrefix(id, "opkit-devnode://"))
	if err != nil {
		t.Fatalf("containerID %q: %v", id, err)
	}
	return pid
}

func TestDeletedPodsProcessIsGoneWithinTheGracePeriod(t *testing.T) {
	env := clustertest.New(t)
	for _, tc := range []struct {
		name  string
		argv  []string
		grace int64
	}{
		{"polite", []string{"sleep", "1000"}, 5},
		// Ignores SIGTERM: only SIGKILL after the grace period ends it.
		{"stubborn", []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.2; done"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := devPod(env.Namespace, tc.name, corev1.RestartPolicyNever, tc.argv...)
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(tc.grace)
			if err := env.Client.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			waitPhase(t, env, pod, corev1.PodRunning)
			pid := pidOf(t, pod)
			if !clustertest.ProcessAlive(pid) {
				t.Fatalf("process %d of a Running pod is not alive", pid)
			}
			deleted := time.Now()
			if err := env.Client.Delete(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			limit := time.Duration(tc.grace)*time.Second + 2*time.Second
			eventually(t, limit, "process ends within the grace period", func(context.Context) (bool, error) {
				return !clustertest.ProcessAlive(pid), nil
			})
			t.Logf("process gone %s after delete (grace %ds)", time.Since(deleted).Round(100*time.Millisecond), tc.grace)
			eventually(t, 10*time.Second, "pod object removed", func(ctx context.Context) (bool, error) {
				err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
		})
	}
}

func TestMissingCommandReportsStartError(t *testing.T) {
	env := clustertest.New(t)
	pod := devPod(env.Namespace, "missing", corev1.RestartPolicyNever, "opkit-no-such-command", "x")
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, pod, corev1.PodFailed)
	term := pod.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != "StartError" || term.ExitCode != 128 ||
		!strings.Contains(term.Message, `"opkit-no-such-command"`) || !strings.Contains(term.Message, "not found") {
		t.Errorf("terminated state %+v; want reason StartError, exit code 128 and a message naming the command", term)
	}

	// With restartPolicy Always the container waits in CrashLoopBackOff,
	// its last state naming the failure.
	looping := devPod(env.Namespace, "missing-looping", corev1.RestartPolicyAlways, "opkit-no-such-command")
	if err := env.Client.Create(t.Context(), looping); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "CrashLoopBackOff", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(looping), looping); err != nil {
			return false, err
		}
		s := looping.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CrashLoopBackOff" &&
			s[0].LastTerminationState.Terminated != nil && s[0].LastTerminationState.Terminated.Reason == "StartError", nil
	})
}

func TestHostileArgumentIsPassedVerbatim(t *testing.T) {
	env := clustertest.New(t)
	texts := map[string]string{
		"subshell":  "$(rm -rf /)",
		"semicolon": "; echo pwned",
		"quotes":    `it's "quoted" \ back`,
		"newlines":  "line one\nline two\n\ttabbed",
		"long":      strings.Repeat("0123456789", 1024),
		"unicode":   "héllo — 世界 \u2028",
	}
	for name, text := range texts {
		pod := devPod(env.Namespace, name, corev1.RestartPolicyNever, "echo", text)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, env, pod, corev1.PodSucceeded)
		out, err := kubectl(t, "logs", "-n", env.Namespace, name)
		if err != nil || out != text+"\n" {
			t.Errorf("%s: log %q, %v; want the text verbatim", name, out, err)
		}
	}
}

func TestEnvVolumesAndInitContainers(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: env.Namespace}, Data: map[string]string{"color": "blue", "file.txt": "from configmap"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec", Namespace: env.Namespace}, Data: map[string][]byte{"token": []byte("s3cret")}}
	for _, o := range []client.Object{cm, secret} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "envpod", Namespace: env.Namespace, Labels: map[string]string{"app": "demo"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   tolerate,
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				}}}},
			},
			InitContainers: []corev1.Container{{
				Name: "init", Image: "ignored",
				Command:      []string{"sh", "-c", `echo initialized > "$OPKIT_MOUNT_SCRATCH/init"`},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
			}},
			Containers: []corev1.Container{{
				Name: "main", Image: "ignored",
				Command: []string{"sh", "-c", `printf '%s|' "$GREETING" "$POD" "$COLOR" "$TOKEN" "$APP"; ` +
					`cat "$OPKIT_POD_ROOT/etc/config/file.txt" "$OPKIT_POD_ROOT/etc/secret/token" "$OPKIT_POD_ROOT/scratch/init" "$OPKIT_MOUNT_INFO/name"; ` +
					`printf 'done' > "$OPKIT_POD_ROOT/dev/termination-log"`},
				Args: []string{},
				Env: []corev1.EnvVar{
					{Name: "NAME", Value: "world"},
					{Name: "GREETING", Value: "hello $(NAME) $(UNDEFINED) $$(NAME)"},
					{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
					{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "color"}}},
					{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/config"},
					{Name: "secret", MountPath: "/etc/secret"},
					{Name: "scratch", MountPath: "/scratch"},
					{Name: "info", MountPath: "/etc/info"},
				},
			}},
		},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, pod, corev1.PodSucceeded)
	out, err := kubectl(t, "logs", "-n", env.Namespace, "envpod")
	want := "hello world $(UNDEFINED) $(NAME)|envpod|blue|s3cret|demo|from configmaps3cretinitialized\nenvpod"
	if err != nil || out != want {
		t.Errorf("log = %q, %v\nwant  %q", out, err, want)
	}
	if msg := pod.Status.ContainerStatuses[0].State.Terminated.Message; msg != "done" {
		t.Errorf("termination message %q, want %q", msg, "done")
	}
	if init := pod.Status.InitContainerStatuses; len(init) != 1 || init[0].State.Terminated == nil || init[0].State.Terminated.ExitCode != 0 {
		t.Errorf("init container status %+v, want terminated with 0", init)
	}
}

func TestMissingConfigMapWaitsThenRuns(t *testing.T) {
	env := clustertest.New(t)
	pod := devPod(env.Namespace, "waits", corev1.RestartPolicyNever, "echo", "$(COLOR)")
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "late"}, Key: "color"}}}}
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "CreateContainerConfigError", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		s := pod.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CreateContainerConfigError" &&
			strings.Contains(s[0].State.Waiting.Message, `"late"`), nil
	})
	late := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: env.Namespace}, Data: map[string]string{"color": "green"}}
	if err := env.Client.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, pod, corev1.PodSucceeded)
	if out, err := kubectl(t, "logs", "-n", env.Namespace, "waits"); err != nil || out != "green\n" {
		t.Errorf("log %q, %v; want green", out, err)
	}
}

func TestKubectlLogsFollowPreviousAndTail(t *testing.T) {
	env := clustertest.New(t)
	follow := devPod(env.Namespace, "counter", corev1.RestartPolicyNever, "sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.5; done")
	if err := env.Client.Create(t.Context(), follow); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, follow, corev1.PodRunning)
	// -f returns when the container ends, with everything it wrote.
	out, err := kubectl(t, "logs", "-f", "-n", env.Namespace, "counter")
	if err != nil || out != "1\n2\n3\n" {
		t.Errorf("logs -f = %q, %v", out, err)
	}
	if out, err := kubectl(t, "logs", "--tail=1", "-n", env.Namespace, "counter"); err != nil || out != "3\n" {
		t.Errorf("logs --tail=1 = %q, %v", out, err)
	}

	restarts := devPod(env.Namespace, "restarts", corev1.RestartPolicyOnFailure, "sh", "-c", `echo "run at $(date +%s%N)"; exit 1`)
	if err := env.Client.Create(t.Context(), restarts); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a restart", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(restarts), restarts); err != nil {
			return false, err
		}
		s := restarts.Status.ContainerStatuses
		return len(s) == 1 && s[0].RestartCount >= 1 && s[0].State.Running == nil, nil
	})
	if restarts.Status.Phase != corev1.PodRunning {
		t.Errorf("an OnFailure pod restarting has phase %s, want Running", restarts.Status.Phase)
	}
	prev, err := kubectl(t, "logs", "--previous", "-n", env.Namespace, "restarts")
	if err != nil || !strings.HasPrefix(prev, "run at ") {
		t.Errorf("logs --previous = %q, %v", prev, err)
	}
}

func TestKilledNodeOwnerLeavesNoChildProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	marker := strconv.Itoa(5_000_000 + int(n.Int64())) // `sleep <marker>`: unique in the process table
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), holdEnv+"="+marker)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("holder: %q", line)
	}
	if pids := clustertest.ProcessesMentioning("sleep\x00" + marker); len(pids) != 1 {
		t.Fatalf("want the pod's sleep process, found %v", pids)
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	eventually(t, 10*time.Second, "the pod's process dies with the node's owner", func(context.Context) (bool, error) {
		return len(clustertest.ProcessesMentioning("sleep\x00"+marker)) == 0, nil
	})
}

func TestNodeStatusSurvivesAnotherWriterOfTheNode(t *testing.T) {
	env := clustertest.New(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	name := "contended-" + env.Namespace
	nodes := cs.CoreV1().Nodes()
	if _, err := nodes.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// Another controller (the node lifecycle controller, in a real plane)
	// writes the same Node's status all along.
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Other","status":"True","reason":"Busy","message":"write %d"}]}}`, i)
			_, _ = nodes.PatchStatus(ctx, name, []byte(patch))
		}
	}()
	for i := range 30 {
		if err := devnode.ReportStatus(t.Context(), env.Config, name); err != nil {
			t.Errorf("report %d: %v", i, err)
		}
	}
	stop()
	wg.Wait()
	node, err := nodes.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range node.Status.Conditions {
		got[c.Type] = c.Status
	}
	if got[corev1.NodeReady] != corev1.ConditionTrue || got["Other"] != corev1.ConditionTrue {
		t.Errorf("conditions %v; want the dev node's Ready and the other writer's kept", got)
	}
}
