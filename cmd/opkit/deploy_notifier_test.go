package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/githubfake"
)

// TestDeployNotifierKilledBetweenTwoCommentsCommentsOncePerPullRequest
// runs examples/deploy-notifier with opkit run against a local GitHub,
// and kills opkit with SIGKILL while notify is between its first and
// second comment of a staging rollout (the second POST hangs). Production
// is rolled out while no engine runs. Started again on the same archive,
// opkit finishes both: each pull request has exactly one comment per
// environment, and the interrupted run is recorded Cancelled.
func TestDeployNotifierKilledBetweenTwoCommentsCommentsOncePerPullRequest(t *testing.T) {
	t.Parallel()
	const repo = "packit/packit-service"
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cl, err := devcluster.Start(t.Context(), devcluster.Options{DevNode: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	c, err := client.New(cl.RESTConfig(), client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)

	// The example, as its README runs it, in a directory of the test's:
	// GitHub is the local one, a rollout in progress is looked at every
	// second, and retries are quick.
	dir := t.TempDir()
	def, setup := deployNotifierExample(t, c, gh, dir, base)

	archivePath := filepath.Join(dir, "runs.db")
	var engine *exec.Cmd // the opkit run started last
	start := func() *lockedBuffer {
		t.Helper()
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--metrics-addr", "0", "--hooks-addr", "127.0.0.1:0")
		waitOutput(t, out, "operator deploy-notifier: running", 60*time.Second)
		engine = cmd
		return out
	}
	out := start()
	clustertest.Eventually(t, time.Minute, "kubectl apply -f setup.yaml", func(context.Context) (bool, error) {
		_, err := kubectl(t, cl.KubeconfigPath(), "apply", "-f", setup)
		return err == nil, nil
	})
	deployed := func(name string) string {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("deploy.example.com/v1alpha1")
		u.SetKind("DeployNotifier")
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, u); err != nil {
			t.Fatal(err)
		}
		sha, _, _ := unstructured.NestedString(u.Object, "status", "lastDeployedSha")
		return sha
	}
	waitDeployed := func(name, sha string) {
		t.Helper()
		clustertest.Eventually(t, 3*time.Minute, name+" records "+sha, func(context.Context) (bool, error) { return deployed(name) == sha, nil })
	}
	roll := func(deployment, sha string) {
		t.Helper()
		if _, err := kubectl(t, cl.KubeconfigPath(), "set", "image", "deployment/"+deployment, "worker=quay.io/packit/packit-worker:"+sha); err != nil {
			t.Fatal(err)
		}
	}
	comments := func(n int) []string {
		var got []string
		for _, cm := range gh.Comments(repo, n) {
			var envName, sha string
			if _, err := fmt.Sscanf(cm.Body, "Deployed to %s in %40s", &envName, &sha); err == nil {
				got = append(got, envName+" "+sha)
			}
		}
		return got
	}
	defer func() {
		if t.Failed() {
			t.Logf("opkit run:\n%s", out.String())
		}
	}()
	waitDeployed("worker-stg", base)
	waitDeployed("worker-prod", base)

	// Three pull requests reach staging; the second comment hangs, and
	// opkit is killed.
	for _, who := range []string{"alice", "bob", "carol"} {
		gh.MergePull(repo, who, "A change of "+who, 1)
	}
	sha := gh.Head(repo)
	hang := gh.Inject(githubfake.Fault{Method: "POST", Path: "/repos/*/*/issues/*/comments", Skip: 1, Hang: true})
	roll("packit-worker-stg", sha)
	select {
	case <-hang.Hit():
	case <-time.After(3 * time.Minute):
		t.Fatalf("notify never posted its second comment; opkit run:\n%s", out.String())
	}
	if got := [][]string{comments(1), comments(2), comments(3)}; !slices.Equal(got[0], []string{"stg " + sha}) || len(got[1])+len(got[2]) != 0 {
		t.Fatalf("comments while the second hangs: %q; want #1's only", got)
	}
	if err := engine.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()
	// The handler died with opkit: its hanging request's client is gone.
	clustertest.Eventually(t, 30*time.Second, "the handler's hanging POST abandoned", func(context.Context) (bool, error) {
		return slices.ContainsFunc(gh.Calls(), func(c githubfake.Call) bool { return c.Method == "POST" && c.Status == 0 }), nil
	})

	// Production rolls out while no engine runs; then opkit starts again.
	roll("packit-worker-prod", sha)
	out = start()
	waitDeployed("worker-stg", sha)
	waitDeployed("worker-prod", sha)
	for n := 1; n <= 3; n++ {
		// The two notifiers run at once: in either order.
		if got, want := comments(n), []string{"prod " + sha, "stg " + sha}; !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Errorf("#%d has the comments %q; want %q, once each", n, got, want)
		}
	}
	if err := engine.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()

	// The archive: the run killed is Cancelled, and ran again with its key.
	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	page, err := store.List(t.Context(), archive.Query{Operator: "deploy-notifier", Name: "worker-stg", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var cancelled *archive.Run
	for i, r := range page.Runs {
		if r.Outcome == archive.Cancelled {
			cancelled = &page.Runs[i]
		}
	}
	if cancelled == nil {
		t.Fatalf("no Cancelled run of worker-stg among %d", len(page.Runs))
	}
	// The rollout is finished after the restart by a run of notify: the
	// killed run again with its key, or (as now) the resume run, which
	// comes first and whose success cancels the pending requeue.
	finished := slices.ContainsFunc(page.Runs, func(r archive.Run) bool {
		return r.Outcome == archive.Succeeded && r.ID > cancelled.ID
	})
	if !finished {
		t.Errorf("no notify run of worker-stg succeeded after the one killed (%s, key %s)", cancelled.ID, cancelled.Key)
	}
}

// deployNotifierExample writes examples/deploy-notifier into dir, as its
// README runs it: GitHub is gh, a rollout in progress is looked at every
// second, retries are quick, and both Deployments run base. It creates
// the Secrets the example needs, and returns the paths of its definition
// and its setup.yaml.
func deployNotifierExample(t *testing.T, c client.Client, gh *githubfake.Server, dir, base string) (def, setup string) {
	t.Helper()
	const example = "../../examples/deploy-notifier/"
	for _, f := range []string{"notify.py", "deploy.py", "ghapi.py"} {
		data, err := os.ReadFile(example + f)
		if err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, filepath.Join(dir, f), string(data))
	}
	def = filepath.Join(dir, "operator.yaml")
	writeTestFile(t, def, replaceAll(t, example+"operator.yaml",
		"https://api.github.com", gh.URL,
		"{name: RECHECK_AFTER, value: 15s}", "{name: RECHECK_AFTER, value: 1s}",
		"initialDelay: 10s, maxDelay: 10m", "initialDelay: 1s, maxDelay: 2s"))
	setup = filepath.Join(dir, "setup.yaml")
	writeTestFile(t, setup, replaceAll(t, example+"setup.yaml", strings.Repeat("0", 40), base))
	for name, data := range map[string]map[string]string{"github-token": {"token": gh.Token()}, "github-webhook": {"secret": "s3cret"}} {
		if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	return def, setup
}

// writeTestFile writes data to path.
func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceAll is file's text with each old of the pairs replaced by its
// new; each old must be found.
func replaceAll(t *testing.T, file string, pairs ...string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(text, pairs[i]) {
			t.Fatalf("%s no longer holds %q", file, pairs[i])
		}
		text = strings.ReplaceAll(text, pairs[i], pairs[i+1])
	}
	return text
}
