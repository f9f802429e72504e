package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/githubfake"
)

// opkitIn runs the CLI as a user would, in the directory dir.
func opkitIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(cliBinary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), archiveEnv(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("opkit %v: %v", args, err)
	}
	return r
}

// TestReplayOfADeployNotifierRunGivesItsResultAndAFixedScriptsDiff runs
// examples/deploy-notifier with opkit run against a local GitHub until
// notify has commented on a pull request, then replays that run with
// opkit replay, as a developer would on their machine: the definition's
// notify.py, run in the definition's directory with the GitHub token from
// --env-file, gives the result recorded (and comments no second time: it
// finds its marker); a fixed copy of the script in the developer's own
// directory, given after --, shows the changed message as a diff and
// exits 1.
func TestReplayOfADeployNotifierRunGivesItsResultAndAFixedScriptsDiff(t *testing.T) {
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
	dir := t.TempDir()
	def, setup := deployNotifierExample(t, c, gh, dir, base)
	archivePath := filepath.Join(dir, "runs.db")

	engine, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--metrics-addr", "0", "--hooks-addr", "127.0.0.1:0")
	waitOutput(t, out, "operator deploy-notifier: running", 60*time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("opkit run:\n%s", out.String())
		}
	}()
	clustertest.Eventually(t, time.Minute, "kubectl apply -f setup.yaml", func(context.Context) (bool, error) {
		_, err := kubectl(t, cl.KubeconfigPath(), "apply", "-f", setup)
		return err == nil, nil
	})
	deployed := func() string {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("deploy.example.com/v1alpha1")
		u.SetKind("DeployNotifier")
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "worker-stg"}, u); err != nil {
			t.Fatal(err)
		}
		sha, _, _ := unstructured.NestedString(u.Object, "status", "lastDeployedSha")
		return sha
	}
	clustertest.Eventually(t, 3*time.Minute, "worker-stg records the first rollout", func(context.Context) (bool, error) { return deployed() == base, nil })
	gh.MergePull(repo, "alice", "A change of alice", 1)
	sha := gh.Head(repo)
	if _, err := kubectl(t, cl.KubeconfigPath(), "set", "image", "deployment/packit-worker-stg", "worker=quay.io/packit/packit-worker:"+sha); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 3*time.Minute, "worker-stg records "+sha, func(context.Context) (bool, error) { return deployed() == sha, nil })
	if err := engine.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()
	if got := gh.Comments(repo, 1); len(got) != 1 {
		t.Fatalf("#1 has %d comments after the rollout; want 1", len(got))
	}

	// The run that told #1.
	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := store.List(t.Context(), archive.Query{Operator: "deploy-notifier", Handler: "notify", Name: "worker-stg", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var told *archive.Run
	for _, r := range page.Runs {
		full, err := store.Get(t.Context(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if full.Outcome == archive.Succeeded && strings.Contains(string(full.Result), "#1 told") {
			told = full
		}
	}
	_ = store.Close()
	if told == nil {
		t.Fatalf("no notify run of worker-stg recorded telling #1 among %d", len(page.Runs))
	}

	// Replayed from the definition's directory: the same result, and no
	// second comment.
	envFile := filepath.Join(t.TempDir(), "secrets.env")
	writeTestFile(t, envFile, "# the Secret github-token's token, which the archive never keeps\nGITHUB_TOKEN="+gh.Token()+"\n")
	replay := opkitIn(t, dir, "replay", told.ID, "-f", "operator.yaml", "--env-file", envFile, "--archive", archivePath)
	if replay.code != 0 || !strings.Contains(replay.stdout, "the same as run "+told.ID) || !strings.Contains(replay.stdout, "#1 told") {
		t.Errorf("opkit replay %s: exit %d\nstdout: %s\nstderr: %s\nwant the result recorded, #1 told", told.ID, replay.code, replay.stdout, replay.stderr)
	}
	if !strings.Contains(replay.stderr, "#1 was told of stg already") {
		t.Errorf("opkit replay's stderr lacks notify's log finding its comment:\n%s", replay.stderr)
	}
	if got := gh.Comments(repo, 1); len(got) != 1 {
		t.Errorf("#1 has %d comments after opkit replay; want 1 (the replay finds the marker)", len(got))
	}

	// A fix, in a checkout of the developer's (not beside the
	// definition): its paths after -- are the current directory's.
	work := t.TempDir()
	fixed := filepath.Join(work, "fixed")
	if err := os.Mkdir(fixed, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(fixed, "notify.py"), replaceAll(t, filepath.Join(dir, "notify.py"), `+ " told" if told`, `+ " told of the deployment" if told`))
	ghapi, err := os.ReadFile(filepath.Join(dir, "ghapi.py"))
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(fixed, "ghapi.py"), string(ghapi))
	replay = opkitIn(t, work, "replay", told.ID, "-f", def, "--env-file", envFile, "--archive", archivePath, "--", "python3", "fixed/notify.py")
	if replay.code != 1 || !strings.Contains(replay.stdout, "differs from run "+told.ID) ||
		!strings.Contains(replay.stdout, `-       "message": "`+sha[:12]+` in stg: #1 told"`) ||
		!strings.Contains(replay.stdout, `+       "message": "`+sha[:12]+` in stg: #1 told of the deployment"`) {
		t.Errorf("opkit replay %s -- python3 fixed/notify.py: exit %d\nstdout: %s\nstderr: %s\nwant the message's change as a diff, and exit 1", told.ID, replay.code, replay.stdout, replay.stderr)
	}
}
