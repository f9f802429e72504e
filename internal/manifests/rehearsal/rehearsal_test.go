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
// It is done twice, once per way a team installs opkit: with what opkit
// generate manifests prints, and with what helm install applies of the
// chart (deploy/helm/opkit) given the values opkit generate values writes
// for the same definitions and options, which deploy/helm's command
// render prints (go run: Helm's library is in that module alone). The
// first install is removed before the second is made, since both hold
// the same cluster-wide objects (the Operator CRD, the Operators).
//
// Only the example's own values are changed, as a team would for its
// cluster: the GitHub API's URL (a local fake GitHub), the namespace,
// and shorter retries and rechecks. Its exec handlers name
// python:3.12-slim already, which opkit dev ignores. Beside it, the same
// install holds a probe (testdata/probe), whose handlers in a runner
// report what they can reach of the API server.
package rehearsal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
// binary as opkit, by the link opkitLink.
var (
	plane     *devcluster.Cluster
	opkitLink string
)

// TestMain is opkit's CLI when the binary runs under the name opkit: the
// dev node runs it so, for the engine's Pod and the runner's init
// container, and the runner runs the copy the init container made. Else
// it starts a plane whose dev node's opkit is a link named opkit to this
// binary.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "opkit" {
		clustertest.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
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
	opkitLink = link
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
	probe   = "testdata/probe"
	drain   = "testdata/drain"
	// helmModule is deploy/helm, whose command render renders the chart.
	helmModule = "../../../deploy/helm"
	image      = "python:3.12-slim"
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

// copyOperator copies an operator's directory, its operator.yaml with the
// values replaced (old, new pairs).
func copyOperator(t *testing.T, src string, replace ...string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "operator.yaml" {
			text := string(data)
			for i := 0; i+1 < len(replace); i += 2 {
				if !strings.Contains(text, replace[i]) {
					t.Fatalf("%s/operator.yaml has no %q", src, replace[i])
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

// source is a way to install opkit: the file of objects it applies for
// the definitions and options of m, and whether they hold the namespace.
type source struct {
	name    string
	objects func(t *testing.T, m *manifests.Manifests) (file string, holdsNamespace bool)
}

var sources = []source{
	{"opkit generate manifests", func(t *testing.T, m *manifests.Manifests) (string, bool) {
		var out bytes.Buffer
		if err := m.WriteManifests(&out); err != nil {
			t.Fatal(err)
		}
		return writeTemp(t, "opkit.yaml", out.Bytes()), true
	}},
	// helm install --create-namespace -f values.yaml NAME deploy/helm/opkit,
	// the values from opkit generate values.
	{"the Helm chart", func(t *testing.T, m *manifests.Manifests) (string, bool) {
		var values bytes.Buffer
		if err := m.WriteValues(&values); err != nil {
			t.Fatal(err)
		}
		valuesFile, err := filepath.Abs(writeTemp(t, "values.yaml", values.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			t.Fatalf("rendering the chart needs the go command (go run in %s): %v", helmModule, err)
		}
		// -mod=mod, as make helmchart: this checkout's requirements as
		// they are.
		cmd := exec.CommandContext(t.Context(), goTool, "run", "-mod=mod", "./render",
			"-values", valuesFile, "-name", m.Options.Name, "-namespace", m.Options.Namespace)
		cmd.Dir = helmModule
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("rendering the chart (go run ./render in %s): %v\n%s", helmModule, err, stderr.String())
		}
		return writeTemp(t, "chart.yaml", out), false
	}},
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// install is opkit installed from a source into a namespace of its own,
// with the deploy notifier and the probe, and a local GitHub.
type install struct {
	ns   string
	cs   *kubernetes.Clientset
	c    client.Client
	gh   *githubfake.Server
	base string // the repository's first commit, which setup.yaml's Deployments run
	// What was installed: from source, for the definitions and options
	// of m; upgrade applies it again with other options.
	source source
	m      *manifests.Manifests
	defs   []*definition.Definition
}

// The deploy notifier and a probe, installed from opkit generate manifests
// and from the Helm chart, run their handlers in runners: a rollout
// comments once on each pull request it brings, a signed /deploy sent to
// the hooks Service deploys once, a handler reaches the API server only
// as its own serviceAccount, and every run in the engine's archive was
// taken by a runner.
func TestAnInstallFromGeneratedManifestsOrTheHelmChartRunsHandlersInRunners(t *testing.T) {
	if plane == nil {
		t.Skip("needs the local control plane; not started with -short")
	}
	for i, s := range sources {
		ok := t.Run(s.name, func(t *testing.T) {
			in := installFrom(t, s, fmt.Sprintf("rehearsal-%d-%d", i, time.Now().UnixNano()%1e9))
			t.Run("the deploy notifier comments on rollouts and deploys on /deploy", in.deployNotifier)
			t.Run("a handler reaches the API server only as its own serviceAccount", in.probe)
			t.Run("every run was taken by a runner", in.archive)
			if i > 0 {
				// Day two once: the chart renders the same objects
				// (deploy/helm's TestChartRendersWhatGenerateManifestsGives).
				return
			}
			t.Run("an upgrade keeps every run, and the runners find the new engine", in.upgrade)
			t.Run("a drain through runners survives the engine replaced, a runner deleted, the engine killed", in.drainThroughReplacements)
		})
		if !ok {
			break // the next install might meet what this one left
		}
	}
}

// installFrom installs from s into the namespace ns, and removes it all at
// the test's end, waiting until it is gone.
func installFrom(t *testing.T, s source, ns string) *install {
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
	gh := githubfake.New(t, githubfake.Options{})
	in := &install{ns: ns, cs: cs, c: c, gh: gh, base: gh.CreateRepo(repo), source: s}
	notifier := copyOperator(t, example,
		"https://api.github.com", gh.URL,
		"namespace: default", "namespace: "+ns,
		"initialDelay: 10s, maxDelay: 10m", "initialDelay: 1s, maxDelay: 2s",
		"{name: RECHECK_AFTER, value: 15s}", "{name: RECHECK_AFTER, value: 1s}")
	// A handler gets no KUBERNETES_SERVICE_*: the probe is told the
	// plane's API server, which a Pod of the dev node reaches as the host.
	prober := copyOperator(t, probe, "https://api-server.invalid", cfg.Host)

	// opkit generate manifests --dev-node -f operator.yaml -f probe.yaml,
	// on ports free on this host.
	drainer := copyOperator(t, drain)
	defs, err := definition.CompileFiles(filepath.Join(notifier, "operator.yaml"), filepath.Join(prober, "operator.yaml"), filepath.Join(drainer, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 4)
	m, err := manifests.New(defs, manifests.Options{
		Namespace: ns, CreateNamespace: true, DevNode: true,
		MetricsPort: ports[0], HooksPort: ports[1], RunnersPort: ports[2],
		RunsAPI: true, RunsAPIPort: ports[3],
	})
	if err != nil {
		t.Fatal(err)
	}
	in.m, in.defs = m, defs
	file, holdsNamespace := s.objects(t, m)
	t.Cleanup(func() {
		// The engine and the runners go with their namespace, what is
		// cluster-wide with the file. Waited for: the next install
		// applies the same Operator CRD and Operators.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		tb := &ctxTB{TB: t, ctx: ctx}
		deletes := [][]string{{"-f", file}}
		if !holdsNamespace {
			deletes = append(deletes, []string{"namespace", ns})
		}
		for _, what := range deletes {
			args := append([]string{"delete", "--ignore-not-found", "--wait", "--timeout=3m"}, what...)
			if out, err := clustertest.Kubectl(tb, plane.KubeconfigPath(), args...); err != nil {
				t.Errorf("removing the install: %v\n%s", err, out)
			}
		}
	})
	if !holdsNamespace {
		// helm install --create-namespace.
		if _, err := kubectl(t, "create", "namespace", ns); err != nil {
			t.Fatal(err)
		}
	}
	// Applied until it takes, as docs/production.md says to apply twice:
	// the Operators need their CRD.
	clustertest.Eventually(t, 2*time.Minute, "kubectl apply --server-side -f "+filepath.Base(file), func(context.Context) (bool, error) {
		_, err := kubectl(t, "apply", "--server-side", "-f", file)
		return err == nil, nil
	})
	for name, data := range map[string]map[string]string{"github-token": {"token": gh.Token()}, "github-webhook": {"secret": secret}} {
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}); err != nil {
		t.Fatal(err)
	}
	setup, err := os.ReadFile(filepath.Join(notifier, "setup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(setup), "namespace: default", "namespace: "+ns)
	text = strings.ReplaceAll(text, strings.Repeat("0", 40), in.base)
	setupFile := writeTemp(t, "setup.yaml", []byte(text))
	clustertest.Eventually(t, 2*time.Minute, "kubectl apply -f setup.yaml (once the engine serves the CRD)", func(context.Context) (bool, error) {
		_, err := kubectl(t, "apply", "-n", ns, "-f", setupFile)
		return err == nil, nil
	})

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tb := &ctxTB{TB: t, ctx: ctx}
		t.Logf("objects:\n%s", must(clustertest.Kubectl(tb, plane.KubeconfigPath(), "get", "deploynotifiers,probes,deployments,pods,endpointslices", "-n", ns, "-o", "wide")))
		for _, sel := range []string{"app.kubernetes.io/name=opkit", "app.kubernetes.io/name=opkit-runner"} {
			t.Logf("logs of %s:\n%s", sel, must(clustertest.Kubectl(tb, plane.KubeconfigPath(), "logs", "-n", ns, "-l", sel, "--all-containers", "--tail=200")))
		}
	})
	clustertest.Eventually(t, 3*time.Minute, "the engine's Pod and the runners run", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running[p.Labels["app.kubernetes.io/name"]+" "+p.Labels["opkit.dev/operator"]] = true
			}
		}
		return running["opkit "] && running["opkit-runner deploy-notifier"] && running["opkit-runner probe"] && running["opkit-runner drain"], nil
	})
	return in
}

// ctxTB is a testing.TB whose Context is ctx: a cleanup's kubectl, when
// the test's context has ended.
type ctxTB struct {
	testing.TB
	ctx context.Context
}

func (c *ctxTB) Context() context.Context { return c.ctx }

// deployNotifier: the first rollout is recorded; a rollout of three pull
// requests tells each once; a signed /deploy to the hooks Service's
// endpoint deploys once, and its rollout is told.
func (in *install) deployNotifier(t *testing.T) {
	ctx, ns, c, gh := t.Context(), in.ns, in.c, in.gh
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

	if told := waitDeployed("worker-stg", in.base); len(told) != 0 {
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
		s, err := in.cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, manifests.HooksName, metav1.GetOptions{})
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
}

// answer is what the API server answered the probe (testdata/probe/probe.py):
// an HTTP status and the user it took the caller for, or why no answer
// came.
type answer struct {
	Code  int    `json:"code"`
	User  string `json:"user"`
	Error string `json:"error"`
}

func (a *answer) refused() bool { return a != nil && (a.Code == 401 || a.Code == 403) }

func (a *answer) String() string {
	switch {
	case a == nil:
		return "no call"
	case a.Error != "":
		return "no answer: " + a.Error
	case a.User != "":
		return fmt.Sprintf("%d as %s", a.Code, a.User)
	}
	return strconv.Itoa(a.Code)
}

// report is what a probe's handler found, in its Probe's status.
type report struct {
	Roots           []string `json:"roots"`
	TokenFile       bool     `json:"tokenFile"`
	ServiceEnv      bool     `json:"serviceEnv"`
	InCluster       *answer  `json:"inCluster"`
	RunnerTokenFile bool     `json:"runnerTokenFile"`
	RunnerToken     *answer  `json:"runnerToken"`
	Kubeconfig      *answer  `json:"kubeconfig"`
}

// probe: in a runner, a handler without serviceAccount finds no
// ServiceAccount token and no KUBERNETES_SERVICE_*, and the API server
// refuses its calls, made as the in-cluster configuration makes them or
// with its runner's own token; with serviceAccount, its kubeconfig makes
// it that ServiceAccount.
func (in *install) probe(t *testing.T) {
	p := &unstructured.Unstructured{}
	p.SetAPIVersion("probe.example.com/v1")
	p.SetKind("Probe")
	p.SetNamespace(in.ns)
	p.SetName("reach")
	clustertest.Eventually(t, time.Minute, "create the Probe (once the engine serves its CRD)", func(ctx context.Context) (bool, error) {
		return in.c.Create(ctx, p.DeepCopy()) == nil, nil
	})
	reports := map[string]*report{}
	clustertest.Eventually(t, 2*time.Minute, "both probe handlers report in the Probe's status", func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(p.GroupVersionKind())
		if err := in.c.Get(ctx, client.ObjectKeyFromObject(p), u); err != nil {
			return false, nil
		}
		status, _ := u.Object["status"].(map[string]any)
		for _, h := range []string{"bare", "account"} {
			v, ok := status[h]
			if !ok {
				return false, nil
			}
			data, err := json.Marshal(v)
			if err != nil {
				return false, err
			}
			r := &report{}
			if err := json.Unmarshal(data, r); err != nil {
				return false, fmt.Errorf("status.%s: %w", h, err)
			}
			reports[h] = r
		}
		return true, nil
	})
	for h, r := range reports {
		t.Logf("%s found: token file %v, $KUBERNETES_SERVICE_HOST %v, runner's token file %v; the API server answered the in-cluster call %s, the runner token's %s, the kubeconfig's %s",
			h, r.TokenFile, r.ServiceEnv, r.RunnerTokenFile, r.InCluster, r.RunnerToken, r.Kubeconfig)
		if r.TokenFile {
			t.Errorf("%s: a ServiceAccount token is mounted in the runner, where the in-cluster configuration reads it", h)
		}
		if r.ServiceEnv {
			t.Errorf("%s: the handler has $KUBERNETES_SERVICE_HOST", h)
		}
		if !r.RunnerTokenFile {
			t.Errorf("%s: the probe found no runner token at /var/run/secrets/opkit.dev/runner/token under %q: it looked in the wrong places", h, r.Roots)
		}
		if !r.InCluster.refused() {
			t.Errorf("%s: the API server answered a call made as the in-cluster configuration would %s; want it refused (401 or 403)", h, r.InCluster)
		}
		if !r.RunnerToken.refused() {
			t.Errorf("%s: the API server answered a call with the runner's token (audience %s) %s; want it refused (401 or 403)", h, manifests.RunnerAudience, r.RunnerToken)
		}
	}
	if r := reports["bare"]; r.Kubeconfig != nil {
		t.Errorf("bare, without serviceAccount, has a $KUBECONFIG, which the API server answered %s", r.Kubeconfig)
	}
	want := "system:serviceaccount:" + in.ns + ":probe"
	if r := reports["account"]; r.Kubeconfig == nil || r.Kubeconfig.Code != http.StatusCreated || r.Kubeconfig.User != want {
		t.Errorf("account, with serviceAccount probe: its $KUBECONFIG's call was answered %s; want 201 as %s", r.Kubeconfig, want)
	}
}

// openArchive opens the engine's SQLite file, on its claim: the dev
// node's directory of the volume bound to it.
func (in *install) openArchive(t *testing.T) *archive.SQLite {
	t.Helper()
	ctx := t.Context()
	claim, err := in.cs.CoreV1().PersistentVolumeClaims(in.ns).Get(ctx, in.m.Options.Name+"-archive", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the archive's claim: %v", err)
	}
	pv, err := in.cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("the archive claim's volume %q: %v (%+v)", claim.Spec.VolumeName, err, pv)
	}
	store, err := archive.OpenSQLite(ctx, filepath.Join(pv.Spec.HostPath.Path, "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// archive: the engine's SQLite file on its claim holds every run, each
// taken by a runner of its operator; deploy succeeded once.
func (in *install) archive(t *testing.T) {
	ctx := t.Context()
	store := in.openArchive(t)
	var err error
	var page *archive.Page
	clustertest.Eventually(t, time.Minute, "the runs are finished in the archive", func(ctx context.Context) (bool, error) {
		page, err = store.List(ctx, archive.Query{Limit: 1000})
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
	deploys, probes := 0, 0
	for _, r := range page.Runs {
		l, err := store.Logs(ctx, r.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		runner := manifests.RunnerName(r.Operator, image)
		if !strings.Contains(string(l.Data), "opkit: runner "+runner+"-") {
			t.Errorf("run %s (%s/%s, %s) was not taken by a runner of %s; its log:\n%s", r.ID, r.Operator, r.Handler, r.Outcome, runner, l.Data)
		}
		switch {
		case r.Handler == "deploy" && r.Outcome == archive.Succeeded:
			deploys++
		case r.Operator == "probe":
			probes++
		}
	}
	if deploys != 1 {
		t.Errorf("deploy succeeded %d times; want once", deploys)
	}
	if probes == 0 {
		t.Error("the archive has no run of the probe")
	}
}

func must(s string, err error) string {
	if err != nil {
		return fmt.Sprintf("%s(error: %v)", s, err)
	}
	return s
}
