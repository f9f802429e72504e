// Package rehearsal_test rehearses production on the local control plane:
// what opkit generate manifests --dev-node gives for the deploy notifier
// (examples/deploy-notifier), its exec handlers in runners of
// python:3.12-slim, is applied with kubectl as it is, and the plane's dev
// node runs the engine's Pod and the runners' Pods: opkit's image is the
// node's opkit (this test binary, run under the name opkit: see
// TestMain), the runner's image is ignored (its command, the agent the
// init container copied, runs on the host, and python3 is the host's).
// The runners reach the engine by its Service's name, the engine reaches
// the API server as its ServiceAccount, and the test sends GitHub's
// deliveries to the hooks Service's endpoint, which the engine wrote.
//
// Only the example's own values are changed, as a team would for its
// cluster: the GitHub API's URL (a local fake GitHub), the namespace,
// and shorter retries and rechecks. Its exec handlers name
// python:3.12-slim already, which opkit dev ignores.
package rehearsal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cli"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/githubfake"
	"github.com/opkit-dev/opkit/internal/manifests"
)

// plane is the test binary's control plane, whose dev node runs this
// binary as opkit.
var plane *devcluster.Cluster

// TestMain is opkit's CLI when the binary runs under the name opkit: the
// dev node runs it so, for the engine's Pod and the runner's init
// container, and the runner runs the copy the init container made. Else
// it starts a plane whose dev node's opkit is a link named opkit to this
// binary.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "opkit" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if len(os.Args) > 0 && slices.Contains(os.Args, "-test.short=true") {
		return m.Run()
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "opkit-rehearsal-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "opkit")
	if err := os.Symlink(exe, link); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plane, err = devcluster.Start(context.Background(), devcluster.Options{DevNode: true, Opkit: link, Log: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local control plane: %v\n", err)
		return 1
	}
	defer plane.Stop()
	return m.Run()
}

const (
	repo    = "packit/packit-service"
	secret  = "webhook s3cret"
	example = "../../../examples/deploy-notifier"
)

// freePorts returns n ports free on the host now: the engine's Pod binds
// the host's, as every process of the dev node does.
func freePorts(t *testing.T, n int) []int32 {
	t.Helper()
	var out []int32
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, int32(ln.Addr().(*net.TCPAddr).Port))
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return out
}

// exampleCopy copies the example's directory, its operator.yaml with the
// values replaced (old, new pairs).
func exampleCopy(t *testing.T, replace ...string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(example)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(example, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "operator.yaml" {
			text := string(data)
			for i := 0; i+1 < len(replace); i += 2 {
				if !strings.Contains(text, replace[i]) {
					t.Fatalf("operator.yaml has no %q", replace[i])
				}
				text = strings.ReplaceAll(text, replace[i], replace[i+1])
			}
			data = []byte(text)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return clustertest.Kubectl(t, plane.KubeconfigPath(), args...)
}

// The deploy notifier, installed from opkit generate manifests, runs its
// handlers in runners: a rollout comments once on each pull request it
// brings, a signed /deploy sent to the hooks Service deploys once, and
// every run in the engine's archive was taken by a runner.
func TestTheDeployNotifierInstalledFromGeneratedManifestsRunsItsHandlersInRunners(t *testing.T) {
	if plane == nil {
		t.Skip("needs the local control plane; not started with -short")
	}
	ctx := t.Context()
	cfg := plane.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("rehearsal-%d", time.Now().UnixNano()%1e9)
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)
	dir := exampleCopy(t,
		"https://api.github.com", gh.URL,
		"namespace: default", "namespace: "+ns,
		"initialDelay: 10s, maxDelay: 10m", "initialDelay: 1s, maxDelay: 2s",
		"{name: RECHECK_AFTER, value: 15s}", "{name: RECHECK_AFTER, value: 1s}")

	// opkit generate manifests --dev-node -f operator.yaml, on ports free
	// on this host.
	defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	m, err := manifests.New(defs, manifests.Options{
		Namespace: ns, CreateNamespace: true, DevNode: true,
		MetricsPort: ports[0], HooksPort: ports[1], RunnersPort: ports[2],
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := m.WriteManifests(&out); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "opkit.yaml")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The engine and the runners stop with their namespace; what is
		// cluster-wide goes too.
		_, _ = clustertest.Kubectl(t, plane.KubeconfigPath(), "delete", "--wait=false", "--ignore-not-found", "-f", file)
	})
	// Applied twice, as docs/production.md says: the Operators need their CRD.
	clustertest.Eventually(t, 2*time.Minute, "kubectl apply --server-side -f opkit.yaml", func(context.Context) (bool, error) {
		_, err := kubectl(t, "apply", "--server-side", "-f", file)
		return err == nil, nil
	})
	for name, data := range map[string]map[string]string{"github-token": {"token": gh.Token()}, "github-webhook": {"secret": secret}} {
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	setup, err := os.ReadFile(filepath.Join(dir, "setup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	setupFile := filepath.Join(t.TempDir(), "setup.yaml")
	text := strings.ReplaceAll(string(setup), "namespace: default", "namespace: "+ns)
	text = strings.ReplaceAll(text, strings.Repeat("0", 40), base)
	if err := os.WriteFile(setupFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 2*time.Minute, "kubectl apply -f setup.yaml (once the engine serves the CRD)", func(context.Context) (bool, error) {
		_, err := kubectl(t, "apply", "-n", ns, "-f", setupFile)
		return err == nil, nil
	})

	runner := manifests.RunnerName("deploy-notifier", "python:3.12-slim")
	enginePod := func() *corev1.Pod {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit"})
		if err != nil || len(pods.Items) == 0 {
			return nil
		}
		return &pods.Items[0]
	}
	defer func() {
		if !t.Failed() {
			return
		}
		t.Logf("objects:\n%s", must(kubectl(t, "get", "deploynotifiers,deployments,pods,endpointslices", "-n", ns, "-o", "wide")))
		for _, sel := range []string{"app.kubernetes.io/name=opkit", "app.kubernetes.io/name=opkit-runner"} {
			t.Logf("logs of %s:\n%s", sel, must(kubectl(t, "logs", "-n", ns, "-l", sel, "--all-containers", "--tail=200")))
		}
	}()
	clustertest.Eventually(t, 3*time.Minute, "the engine's Pod and the runner's run", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running[p.Labels["app.kubernetes.io/name"]] = true
			}
		}
		return running["opkit"] && running["opkit-runner"], nil
	})

	notifier := func(name string) (sha string, told []int64) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("deploy.example.com/v1alpha1")
		u.SetKind("DeployNotifier")
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return "", nil
		}
		sha, _, _ = unstructured.NestedString(u.Object, "status", "lastDeployedSha")
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "notifiedPullRequests")
		for _, n := range list {
			told = append(told, n.(int64))
		}
		return sha, told
	}
	waitDeployed := func(name, sha string) []int64 {
		t.Helper()
		var told []int64
		clustertest.Eventually(t, 3*time.Minute, name+" records "+sha, func(context.Context) (bool, error) {
			var got string
			got, told = notifier(name)
			return got == sha, nil
		})
		return told
	}
	roll := func(deployment, sha string) {
		t.Helper()
		clustertest.Eventually(t, 30*time.Second, "roll "+deployment, func(ctx context.Context) (bool, error) {
			d := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: deployment}, d); err != nil {
				return false, err
			}
			d.Spec.Template.Spec.Containers[0].Image = "quay.io/packit/packit-worker:" + sha
			return c.Update(ctx, d) == nil, nil
		})
	}
	comments := func(n int) []string {
		var out []string
		for _, cm := range gh.Comments(repo, n) {
			var envName, sha string
			if _, err := fmt.Sscanf(cm.Body, "Deployed to %s in %40s", &envName, &sha); err == nil {
				out = append(out, envName+" "+sha)
			}
		}
		return out
	}

	// The first rollout is recorded; a rollout of three pull requests
	// tells each once.
	if told := waitDeployed("worker-stg", base); len(told) != 0 {
		t.Errorf("worker-stg told %v of the first rollout it saw; want nobody", told)
	}
	gh.MergePull(repo, "alice", "Fix the worker", 1)
	gh.MergePull(repo, "bob", "Faster imports", 2)
	gh.MergePull(repo, "carol", "Retry on 502", 1)
	stg := gh.Head(repo)
	roll("packit-worker-stg", stg)
	if told := waitDeployed("worker-stg", stg); !slices.Equal(told, []int64{1, 2, 3}) {
		t.Errorf("worker-stg told %v; want #1, #2 and #3", told)
	}
	for n := 1; n <= 3; n++ {
		if got := comments(n); !slices.Equal(got, []string{"stg " + stg}) {
			t.Errorf("#%d has the comments %q; want one, stg %s", n, got, stg)
		}
	}

	// /deploy, signed, to the hooks Service's endpoint, which the engine
	// wrote to its EndpointSlice.
	var hooks string
	clustertest.Eventually(t, time.Minute, "the hooks Service has the engine's endpoint", func(ctx context.Context) (bool, error) {
		s, err := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, manifests.HooksName, metav1.GetOptions{})
		if err != nil || len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 || len(s.Ports) != 1 {
			return false, nil
		}
		hooks = net.JoinHostPort(s.Endpoints[0].Addresses[0], strconv.Itoa(int(*s.Ports[0].Port)))
		return true, nil
	})
	gh.AddTeamMember("packit", "deployers", "alice")
	pr := gh.MergePull(repo, "dave", "Deploy from a comment", 1)
	d := githubfake.Delivery{Secret: secret, Event: "issue_comment", Payload: gh.IssueCommentEvent(gh.Comment(repo, pr.Number, "alice", "/deploy "+pr.MergeCommitSHA[:10]))}
	resp, err := d.Send(ctx, "http://"+hooks+"/hooks/deploy-notifier/github")
	if err != nil {
		t.Fatal(err)
	}
	var answer map[string]string
	_ = json.Unmarshal([]byte(resp.Body), &answer)
	if resp.Status != http.StatusAccepted {
		t.Fatalf("a signed /deploy was answered %d %v; want 202", resp.Status, answer)
	}
	if told := waitDeployed("worker-stg", pr.MergeCommitSHA); !slices.Equal(told, []int64{int64(pr.Number)}) {
		t.Errorf("the rollout /deploy made told %v; want #%d", told, pr.Number)
	}
	if got := comments(pr.Number); !slices.Equal(got, []string{"stg " + pr.MergeCommitSHA}) {
		t.Errorf("#%d has the comments %q; want one, stg %s", pr.Number, got, pr.MergeCommitSHA)
	}

	// The archive, the engine's SQLite file on its Pod's emptyDir: each
	// run was taken by a runner, deploy ran once.
	pod := enginePod()
	if pod == nil {
		t.Fatal("no engine Pod")
	}
	store, err := archive.OpenSQLite(ctx, filepath.Join(plane.DataDir(), "pods", string(pod.UID), "volumes", "archive", "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var page *archive.Page
	clustertest.Eventually(t, time.Minute, "the runs are finished in the archive", func(ctx context.Context) (bool, error) {
		page, err = store.List(ctx, archive.Query{Operator: "deploy-notifier", Limit: 1000})
		if err != nil {
			return false, err
		}
		for _, r := range page.Runs {
			if r.FinishedAt.IsZero() {
				return false, nil
			}
		}
		return len(page.Runs) > 0, nil
	})
	deploys := 0
	for _, r := range page.Runs {
		l, err := store.Logs(ctx, r.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(l.Data), "opkit: runner "+runner+"-") {
			t.Errorf("run %s (%s, %s) was not taken by a runner of %s; its log:\n%s", r.ID, r.Handler, r.Outcome, runner, l.Data)
		}
		if r.Handler == "deploy" && r.Outcome == archive.Succeeded {
			deploys++
		}
	}
	if deploys != 1 {
		t.Errorf("deploy succeeded %d times; want once", deploys)
	}
}

func must(s string, err error) string {
	if err != nil {
		return fmt.Sprintf("%s(error: %v)", s, err)
	}
	return s
}
