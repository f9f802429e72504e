package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cli"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/githubfake"
	"github.com/opkit-dev/opkit/internal/why"
)

// TestDeployNotifierExampleCommentsOncePerPullRequestAndDeploysOnRequest
// runs examples/deploy-notifier (operator.yaml and setup.yaml, as the
// README applies them) in the test's namespace, against a local GitHub:
//
//   - the first rollouts seen are recorded, and tell nobody;
//   - three pull requests merged, the staging Deployment rolled to their
//     SHA: each gets one "Deployed to stg" comment, though the answer to
//     the second comment is lost (a 502 after it was made) and the run
//     retried;
//   - production rolled to it: each gets one "Deployed to prod" comment;
//   - a rollout whose range holds no pull request comments on nothing;
//   - "/deploy <sha>" from a member of the team, delivered signed to the
//     engine's hooks listener, sets the staging Deployment's image, whose
//     rollout tells the pull request of that SHA, and opkit why on the
//     Deployment names, newest first, the image change, the deploy run
//     that made it, and alice's delivery that ran it;
//   - the same from someone else changes nothing, and the archive has the
//     delivery Handled with the handler's refusal as reason; deliveries
//     with a bad signature or of another comment are refused.
func TestDeployNotifierExampleCommentsOncePerPullRequestAndDeploysOnRequest(t *testing.T) {
	t.Parallel()
	const (
		repo    = "packit/packit-service"
		secret  = "webhook s3cret"
		example = "../../examples/deploy-notifier/"
	)
	env := clustertest.New(t)
	ctx := t.Context()
	ns := env.Namespace
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)

	// The Secrets the README has made with kubectl.
	for name, data := range map[string]map[string]string{"github-token": {"token": gh.Token()}, "github-webhook": {"secret": secret}} {
		create(t, env, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data})
	}
	// The archive in a file of its own, which opkit why reads as well.
	archivePath := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(ctx, archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	d := exampleDefinition(t, example+"operator.yaml",
		"https://api.github.com", gh.URL,
		"namespace: default", "namespace: "+ns,
		"initialDelay: 10s, maxDelay: 10m", "initialDelay: 1s, maxDelay: 2s",
		"{name: RECHECK_AFTER, value: 15s}", "{name: RECHECK_AFTER, value: 1s}")
	if err := e.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	setup, err := os.ReadFile(example + "setup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	setupFile := filepath.Join(t.TempDir(), "setup.yaml")
	text := strings.ReplaceAll(string(setup), "namespace: default", "namespace: "+ns)
	text = strings.ReplaceAll(text, strings.Repeat("0", 40), base)
	if err := os.WriteFile(setupFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "kubectl apply -f setup.yaml (once the CRD is served)", func(context.Context) (bool, error) {
		_, err := clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "apply", "-n", ns, "-f", setupFile)
		return err == nil, nil
	})

	notifier := func(name string) (sha string, told []int64) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("deploy.example.com/v1alpha1")
		u.SetKind("DeployNotifier")
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatal(err)
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
		eventually(t, 3*time.Minute, name+" records "+sha, func(context.Context) (bool, error) {
			var got string
			got, told = notifier(name)
			return got == sha, nil
		})
		return told
	}
	roll := func(deployment, sha string) {
		t.Helper()
		updateDeployment(t, env, deployment, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "quay.io/packit/packit-worker:" + sha
		})
	}
	// comments says, for each pull request, what its comments of the
	// notifier say: "stg <sha>", "prod <sha>"; a comment without its
	// marker, or not by the token's user, is listed as wrong.
	comments := func(prs ...int) map[int][]string {
		out := map[int][]string{}
		for _, n := range prs {
			out[n] = []string{}
			for _, c := range gh.Comments(repo, n) {
				var envName, sha string
				if _, err := fmt.Sscanf(c.Body, "Deployed to %s in %40s", &envName, &sha); err != nil {
					continue
				}
				if marker := fmt.Sprintf("<!-- opkit-deploy-notifier env=%s pr=%d sha=%s ", envName, n, sha); !strings.Contains(c.Body, marker) || c.Author != gh.Login() {
					out[n] = append(out[n], "wrong: "+c.Body)
					continue
				}
				out[n] = append(out[n], envName+" "+sha)
			}
		}
		return out
	}
	wantComments := func(what string, want map[int][]string) {
		t.Helper()
		got := comments(slices.Sorted(maps.Keys(want))...)
		for n, w := range want {
			if !slices.Equal(got[n], w) {
				t.Errorf("%s: #%d has the comments %q; want %q", what, n, got[n], w)
			}
		}
	}
	defer func() {
		if t.Failed() {
			t.Logf("objects:\n%s", must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "deploynotifiers,deployments,pods", "-n", ns, "-o", "wide")))
			page, _ := store.List(context.Background(), archive.Query{Operator: "deploy-notifier", Limit: 100})
			for _, r := range page.Runs {
				logs, _ := logData(store.Logs(context.Background(), r.ID, 0))
				t.Logf("run %s %s/%s of %s: %s %s %s-%s\n%s", r.ID, r.Handler, r.Trigger, r.Name, r.Outcome, r.Error, r.StartedAt.Format("15:04:05.000"), r.FinishedAt.Format("15:04:05.000"), logs)
			}
		}
	}()

	// The first rollouts are recorded, and nobody is told.
	for _, name := range []string{"worker-stg", "worker-prod"} {
		if told := waitDeployed(name, base); len(told) != 0 {
			t.Errorf("%s told %v of the first rollout it saw; want nobody", name, told)
		}
	}

	// Three pull requests reach staging; the answer to the second comment
	// is lost.
	gh.MergePull(repo, "alice", "Fix the worker", 1)
	gh.MergePull(repo, "bob", "Faster imports", 2)
	gh.MergePull(repo, "carol", "Retry on 502", 1)
	stg := gh.Head(repo)
	lost := gh.Inject(githubfake.Fault{Method: "POST", Path: "/repos/*/*/issues/*/comments", Skip: 1, Apply: true, Status: http.StatusBadGateway})
	roll("packit-worker-stg", stg)
	if told := waitDeployed("worker-stg", stg); !slices.Equal(told, []int64{1, 2, 3}) {
		t.Errorf("worker-stg told %v; want #1, #2 and #3", told)
	}
	if lost.Hits() != 1 {
		t.Errorf("the lost answer's fault applied %d times; want once", lost.Hits())
	}
	wantComments("staging", map[int][]string{1: {"stg " + stg}, 2: {"stg " + stg}, 3: {"stg " + stg}})

	// Then production.
	roll("packit-worker-prod", stg)
	if told := waitDeployed("worker-prod", stg); !slices.Equal(told, []int64{1, 2, 3}) {
		t.Errorf("worker-prod told %v; want #1, #2 and #3", told)
	}
	both := []string{"stg " + stg, "prod " + stg}
	wantComments("production", map[int][]string{1: both, 2: both, 3: both})

	// A rollout with no pull request in its range.
	bump := gh.Push(repo, "Bump the version")
	roll("packit-worker-stg", bump)
	if told := waitDeployed("worker-stg", bump); len(told) != 0 {
		t.Errorf("a rollout without a pull request told %v; want nobody", told)
	}
	wantComments("a rollout without pull requests", map[int][]string{1: both, 2: both, 3: both})

	// /deploy from a member of the team: the staging Deployment runs the
	// SHA, and its rollout tells the pull request.
	url := "http://" + e.HooksAddr() + "/hooks/deploy-notifier/github"
	send := func(d githubfake.Delivery) (int, map[string]string) {
		t.Helper()
		if d.Secret == "" && d.Signature == "" {
			d.Secret = secret
		}
		d.Event = "issue_comment"
		resp, err := d.Send(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var answer map[string]string
		_ = json.Unmarshal([]byte(resp.Body), &answer)
		return resp.Status, answer
	}
	deliveryOf := func(id, what string) *archive.Delivery {
		t.Helper()
		var got *archive.Delivery
		eventually(t, time.Minute, what, func(ctx context.Context) (bool, error) {
			d, err := store.GetDelivery(ctx, id)
			got = d
			return err == nil && d.Outcome != archive.DeliveryPending, err
		})
		return got
	}
	gh.AddTeamMember("packit", "deployers", "alice")
	pr := gh.MergePull(repo, "dave", "Deploy from a comment", 1)
	status, answer := send(githubfake.Delivery{Payload: gh.IssueCommentEvent(gh.Comment(repo, pr.Number, "alice", "/deploy "+pr.MergeCommitSHA[:10]))})
	if status != http.StatusAccepted {
		t.Fatalf("a signed /deploy was answered %d %v; want 202", status, answer)
	}
	if d := deliveryOf(answer["delivery"], "the /deploy delivery handled"); d.Outcome != archive.DeliveryHandled || d.Reason != "" {
		t.Errorf("the /deploy delivery: %s %q; want Handled", d.Outcome, d.Reason)
	}
	if told := waitDeployed("worker-stg", pr.MergeCommitSHA); !slices.Equal(told, []int64{int64(pr.Number)}) {
		t.Errorf("the rollout /deploy made told %v; want #%d", told, pr.Number)
	}
	wantComments("after /deploy", map[int][]string{1: both, 2: both, 3: both, pr.Number: {"stg " + pr.MergeCommitSHA}})
	wantWhy(t, archivePath, ns, answer["delivery"], pr.MergeCommitSHA)

	// Someone else's /deploy is refused by the handler; a forged one and
	// another comment are refused by the source.
	status, answer = send(githubfake.Delivery{Payload: gh.IssueCommentEvent(gh.Comment(repo, pr.Number, "mallory", "/deploy "+base))})
	if status != http.StatusAccepted {
		t.Fatalf("mallory's /deploy was answered %d %v; want 202", status, answer)
	}
	refused := deliveryOf(answer["delivery"], "mallory's /deploy handled")
	if want := "refused by handler deploy: mallory is not a member of packit/deployers"; refused.Outcome != archive.DeliveryHandled || refused.Reason != want {
		t.Errorf("mallory's /deploy: %s %q; want Handled, %q", refused.Outcome, refused.Reason, want)
	}
	if status, answer := send(githubfake.Delivery{Signature: githubfake.Sign("a guess", []byte("{}")), Payload: gh.IssueCommentEvent(gh.Comment(repo, pr.Number, "alice", "/deploy "+base))}); status != http.StatusUnauthorized {
		t.Errorf("a forged /deploy was answered %d %v; want 401", status, answer)
	}
	if status, answer := send(githubfake.Delivery{Payload: gh.IssueCommentEvent(gh.Comment(repo, pr.Number, "alice", "LGTM"))}); status != http.StatusOK || answer["reason"] != "filtered out" {
		t.Errorf("a comment that is no command was answered %d %v; want 200 filtered out", status, answer)
	}
	dep := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "packit-worker-stg"}, dep); err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "quay.io/packit/packit-worker:"+pr.MergeCommitSHA {
		t.Errorf("the staging Deployment runs %s after the refused deliveries; want %s still", img, pr.MergeCommitSHA)
	}
	page, err := store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "deploy-notifier"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Deliveries); n != 4 {
		t.Errorf("%d deliveries in the archive; want 4: two handled, two refused", n)
	}
	wantComments("in the end", map[int][]string{1: both, 2: both, 3: both, pr.Number: {"stg " + pr.MergeCommitSHA}})
}

// wantWhy runs opkit why on the staging Deployment after alice's /deploy
// of sha (delivery, its archive id) and wants, newest first: the image
// change by deploy.py, during the deploy run; that run, caused by the
// delivery; the delivery, an issue_comment by alice.
func wantWhy(t *testing.T, archivePath, ns, delivery, sha string) {
	t.Helper()
	whyCmd := func(args ...string) string {
		t.Helper()
		var stdout, stderr strings.Builder
		root := cli.NewRootCommand()
		root.SetArgs(append([]string{"why", ns + "/packit-worker-stg", "--kind", "Deployment", "--kubeconfig", clustertest.Cluster(t).KubeconfigPath(), "--archive", archivePath}, args...))
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		if err := root.ExecuteContext(t.Context()); err != nil {
			t.Fatalf("opkit why %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	out := whyCmd("-o", "json")
	var chain why.Chain
	if err := json.Unmarshal([]byte(out), &chain); err != nil {
		t.Fatalf("opkit why -o json: %v\n%s", err, out)
	}
	change, run, sent := -1, -1, -1
	var runID string
	for i, e := range chain.Entries {
		switch {
		case e.Kind == "change" && e.Change.Manager == "deploy-notifier" && slices.ContainsFunc(e.Change.Fields, func(f why.Field) bool {
			return strings.HasSuffix(f.Path, ".image") && f.Value == "quay.io/packit/packit-worker:"+sha
		}) && change < 0:
			change = i
			runID = strings.TrimPrefix(e.Cause, "run ")
		case e.Kind == "run" && e.Run.Handler == "deploy" && e.Run.Trigger == "event" && e.Run.Outcome == string(archive.Succeeded) && e.Cause == "delivery "+delivery:
			run = i
			if runID != e.Run.ID {
				t.Errorf("the image change is said to be by %q; want the deploy run %s", runID, e.Run.ID)
			}
		case e.Kind == "delivery" && e.Delivery.ID == delivery:
			sent = i
			if e.Delivery.Sender != "alice" || e.Delivery.Event != "issue_comment" || e.Delivery.Source != "github" {
				t.Errorf("the delivery is said to be %+v; want an issue_comment from github by alice", e.Delivery)
			}
		}
	}
	if change < 0 || run < 0 || sent < 0 || change >= run || run >= sent {
		t.Errorf("opkit why has the image change at %d, the deploy run at %d, the delivery at %d; want all three, in that order:\n%s", change, run, sent, out)
	}
	table := whyCmd()
	// The table clips long values: the SHA's first 12 digits are there.
	for _, s := range []string{"by deploy-notifier (Update), during run", "handler deploy on event of deploy-notifier: Succeeded", "issue_comment by alice", "packit-worker:" + sha[:12]} {
		if !strings.Contains(table, s) {
			t.Errorf("opkit why's table lacks %q:\n%s", s, table)
		}
	}
}
