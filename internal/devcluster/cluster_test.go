package devcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// holdEnv makes the test binary a process that starts a plane in the data
// directory it names (a temporary one for holdTemporary), prints "ready"
// and the data directory, and waits to be killed.
const holdEnv = "DEVCLUSTER_TEST_HOLD_DATA_DIR"

const holdTemporary = "temporary"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		holdCluster(dir)
		return
	}
	clustertest.Main(m)
}

func holdCluster(dataDir string) {
	if dataDir == holdTemporary {
		dataDir = ""
	}
	c, err := devcluster.Start(context.Background(), devcluster.Options{DataDir: dataDir})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready", c.DataDir())
	<-c.Done()
}

// startHolder starts a process that holds a plane on dataDir (or
// holdTemporary) and returns it with the plane's data directory.
func startHolder(t *testing.T, dataDir string) (*exec.Cmd, string) {
	t.Helper()
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), holdEnv+"="+dataDir)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		t.Fatalf("holder did not start a plane: %q %v", line, err)
	}
	return holder, dir
}

var eventually = clustertest.Eventually

func TestControlPlaneGarbageCollectsOwnedObjects(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	group := "gc.test.opkit.dev"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "CRD established", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})

	widget := &unstructured.Unstructured{}
	widget.SetAPIVersion(group + "/v1")
	widget.SetKind("Widget")
	widget.SetNamespace(env.Namespace)
	widget.SetName("w1")
	widget.Object["spec"] = map[string]any{"size": int64(3)}
	// The discovery cache of a new client can lag the CRD by a moment.
	eventually(t, 30*time.Second, "create Widget", func(ctx context.Context) (bool, error) {
		return env.Client.Create(ctx, widget) == nil, nil
	})

	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "w1-child", Namespace: env.Namespace,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: group + "/v1", Kind: "Widget", Name: "w1", UID: widget.GetUID(),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}}
	if err := env.Client.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, widget); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "garbage collector deletes the owned ConfigMap", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(child), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func TestJobGetsAPodThatWaitsForANode(t *testing.T) {
	env := clustertest.New(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: env.Namespace},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "hello", Image: "busybox:1.36", Command: []string{"echo", "hello"}}},
		}}},
	}
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	// The job controller (kube-controller-manager) creates the Pod; the
	// scheduler finds no node for it (the dev node's taint is not tolerated)
	// and says so in PodScheduled.
	var pod corev1.Pod
	eventually(t, 60*time.Second, "the job's Pod is created and found unschedulable", func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(env.Namespace), client.MatchingLabels{"job-name": "hello"}); err != nil {
			return false, err
		}
		if len(pods.Items) == 0 {
			return false, nil
		}
		pod = pods.Items[0]
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
		t.Errorf("pod %s: phase %q on node %q, want Pending on no node", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
	}
}

func TestStartRefusesATakenPortAndStartsNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dataDir := t.TempDir()

	c, err := devcluster.Start(t.Context(), devcluster.Options{DataDir: dataDir, APIServerPort: port})
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded on a taken port")
	}
	if !errors.Is(err, devcluster.ErrPortInUse) || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("error %q should say kube-apiserver's port 127.0.0.1:%d is in use", err, port)
	}
	if pids := clustertest.ProcessesMentioning(dataDir); len(pids) > 0 {
		t.Errorf("processes %v were started", pids)
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) > 0 {
		t.Errorf("data directory was written: %v", entries)
	}
}

func TestKilledParentLeavesNoProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dataDir := t.TempDir()
	holder, _ := startHolder(t, dataDir)
	if pids := clustertest.ProcessesMentioning(dataDir); len(pids) < 4 {
		t.Fatalf("want the plane's 4 components running, found %v", pids)
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	eventually(t, 15*time.Second, "components die with their parent", func(context.Context) (bool, error) {
		return len(clustertest.ProcessesMentioning(dataDir)) == 0, nil
	})
}

func TestTheNextStartRemovesTheDataOfAKilledPlaneAndNotALiveOnes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	// Planes in a temporary directory of the test's own, where nothing
	// else makes planes.
	t.Setenv("TMPDIR", t.TempDir())
	killed, killedDir := startHolder(t, holdTemporary)
	_, liveDir := startHolder(t, holdTemporary)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	eventually(t, 15*time.Second, "the killed plane's components die", func(context.Context) (bool, error) {
		return len(clustertest.ProcessesMentioning(killedDir)) == 0, nil
	})
	if _, err := os.Stat(filepath.Join(killedDir, "pki", "ca.key")); err != nil {
		t.Fatalf("the killed plane left no CA key to clean up (%v): the test shows nothing", err)
	}

	c, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, err := os.Stat(killedDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s, left by the killed plane, is still there (%v)", killedDir, err)
	}
	if _, err := os.Stat(filepath.Join(liveDir, "pki", "ca.key")); err != nil {
		t.Errorf("the data of the plane that runs was touched: %v", err)
	}
	if pids := clustertest.ProcessesMentioning(liveDir); len(pids) < 4 {
		t.Errorf("the plane that runs lost components: %v", pids)
	}
}

func TestTheDataDirIsPrivateAndItsKeysReadableByTheUserAlone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	// A kept data directory that exists, readable by all, is made
	// private; a temporary one is made so.
	kept := filepath.Join(t.TempDir(), "plane")
	if err := os.Mkdir(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dataDir := range []string{kept, ""} {
		c, err := devcluster.Start(t.Context(), devcluster.Options{DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		dir := c.DataDir()
		info, err := os.Stat(dir)
		if err != nil {
			c.Stop()
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o700 {
			t.Errorf("data directory %s has mode %o, want 700", dir, perm)
		}
		keys := 0
		err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !strings.Contains(string(data), "PRIVATE KEY") && !strings.Contains(string(data), "client-key-data") {
				return nil
			}
			keys++
			info, err := d.Info()
			if err != nil {
				return err
			}
			if perm := info.Mode().Perm(); perm&0o077 != 0 {
				t.Errorf("%s holds a private key and has mode %o, want 600", path, perm)
			}
			return nil
		})
		c.Stop()
		if err != nil {
			t.Fatal(err)
		}
		if keys < 10 {
			t.Errorf("found %d files with private keys in %s, want the CA's, the certificates' and the kubeconfigs'", keys, dir)
		}
	}
}

func TestStopLeavesNoProcessAndRemovesTemporaryData(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.DataDir()
	if len(clustertest.ProcessesMentioning(dir)) < 4 {
		t.Fatalf("want 4 components mentioning %s", dir)
	}
	c.Stop()
	if pids := clustertest.ProcessesMentioning(dir); len(pids) > 0 {
		t.Errorf("processes %v still run after Stop", pids)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary data directory %s still exists: %v", dir, err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done is not closed after Stop")
	}
	if c.Err() != nil {
		t.Errorf("Err after a requested Stop = %v, want nil", c.Err())
	}
}

// TestKeptDataDirSurvivesARestart also restarts a data directory made
// before the plane had a front proxy (its files removed): it gets one, and
// kube-apiserver publishes its CA for aggregated API servers.
func TestKeptDataDirSurvivesARestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dataDir := t.TempDir()
	start := func() (*devcluster.Cluster, client.Client) {
		c, err := devcluster.Start(t.Context(), devcluster.Options{DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(c.RESTConfig(), client.Options{Scheme: clustertest.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c, cl
	}
	c, cl := start()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := cl.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	for _, f := range []string{"front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-client.crt", "front-proxy-client.key"} {
		if err := os.Remove(filepath.Join(dataDir, "pki", f)); err != nil {
			t.Fatal(err)
		}
	}
	c, cl = start()
	defer c.Stop()
	var got corev1.ConfigMap
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(cm), &got); err != nil || got.Data["k"] != "v" {
		t.Fatalf("ConfigMap after restart: %v %v", got.Data, err)
	}
	frontProxyCA, err := os.ReadFile(filepath.Join(dataDir, "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatalf("the restart made no front-proxy CA: %v", err)
	}
	var auth corev1.ConfigMap
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, &auth); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver adds to the CAs the ConfigMap holds (several API
	// servers share it), so the first start's CA may stay in it.
	if ca := auth.Data["requestheader-client-ca-file"]; !strings.Contains(ca, strings.TrimSpace(string(frontProxyCA))) {
		t.Errorf("requestheader-client-ca-file = %q, want it to hold the new front-proxy CA", ca)
	}
	if names := auth.Data["requestheader-allowed-names"]; names != `["front-proxy-client"]` {
		t.Errorf("requestheader-allowed-names = %s, want [\"front-proxy-client\"]", names)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "etcd")); err != nil {
		t.Errorf("etcd data: %v", err)
	}
}

// TestALeanPlaneLeavesOutFairnessAndTheControllersItLists starts a lean
// plane: its API server answers without API Priority and Fairness (no
// flow schema named in a response's headers), and its controller manager
// runs without each of LeanOffControllers; the package's plane, lean under
// make test, collects garbage and runs Jobs (the tests above).
func TestALeanPlaneLeavesOutFairnessAndTheControllersItLists(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c, err := devcluster.Start(t.Context(), devcluster.Options{Lean: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cfg := c.RESTConfig()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(c.Endpoint() + "/api/v1/namespaces/default")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the default namespace: %s", resp.Status)
	}
	if fs := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"); fs != "" {
		t.Errorf("the API server classified the request by flow schema %s: API Priority and Fairness is on", fs)
	}
	var kcm string
	for _, comp := range c.Components() {
		if comp.Name == "kube-controller-manager" {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", comp.Pid))
			if err != nil {
				t.Fatal(err)
			}
			kcm = strings.ReplaceAll(string(b), "\x00", " ")
		}
	}
	if kcm == "" {
		t.Fatal("no kube-controller-manager among the plane's components")
	}
	for _, name := range devcluster.LeanOffControllers {
		if !strings.Contains(kcm, ",-"+name) {
			t.Errorf("kube-controller-manager runs %s: its command line is %s", name, kcm)
		}
	}
}
