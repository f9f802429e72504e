package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/githubfake"
)

// TestDeployNotifierExampleDeploysOnAPolledCommentOnceAcrossARestart runs
// examples/deploy-notifier with the edit its README gives for a cluster
// GitHub cannot reach (the github source's webhook replaced by a
// githubPoll source; nothing else changed), against a local GitHub, with
// no hooks listener at all:
//
//   - "/deploy <sha>" commented by a member of the team is polled, handled
//     once, and sets the staging Deployment's image (its rollout is then
//     recorded by notify);
//   - every other event the repository's feed lists (the merges, the
//     pushes, notify's own comments) is recorded filtered out;
//   - the engine stopped, a second /deploy commented meanwhile: the next
//     engine, on the same archive, delivers it from the cursor, and
//     handles neither /deploy again.
func TestDeployNotifierExampleDeploysOnAPolledCommentOnceAcrossARestart(t *testing.T) {
	t.Parallel()
	const (
		repo    = "packit/packit-service"
		example = "../../examples/deploy-notifier/"
		events  = "/repos/" + repo + "/events"
	)
	env := clustertest.New(t)
	ctx := t.Context()
	ns := env.Namespace
	gh := githubfake.New(t, githubfake.Options{})
	gh.SetPollInterval(1) // the source's interval, 10s, is the longer
	base := gh.CreateRepo(repo)
	gh.AddTeamMember("packit", "deployers", "alice")
	create(t, env, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github-token"}, StringData: map[string]string{"token": gh.Token()}})

	readme, err := os.ReadFile(example + "README.md")
	if err != nil {
		t.Fatal(err)
	}
	const edit = "    githubPoll:\n      repository: packit/packit-service\n      tokenSecretRef: {namespace: default, name: github-token, key: token}\n      interval: 30s\n"
	if !strings.Contains(string(readme), edit) {
		t.Fatalf("examples/deploy-notifier/README.md no longer gives the githubPoll edit this test makes:\n%s", edit)
	}
	d := exampleDefinition(t, example+"operator.yaml",
		"    webhook:\n      github: {secretRef: {namespace: default, name: github-webhook, key: secret}}\n",
		strings.Replace(edit, "interval: 30s", "interval: 10s\n      apiURL: "+gh.URL, 1),
		"https://api.github.com", gh.URL,
		"namespace: default", "namespace: "+ns,
		"initialDelay: 10s, maxDelay: 10m", "initialDelay: 1s, maxDelay: 2s",
		"{name: RECHECK_AFTER, value: 15s}", "{name: RECHECK_AFTER, value: 1s}")
	store := newArchive(t)
	start := func() func() {
		// No HooksAddr: a polled source needs no listener.
		e, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: ns, Archive: store})
		polls := len(callsTo(gh, events))
		if err := e.Apply(ctx, d); err != nil {
			t.Fatal(err)
		}
		// Since: Now. The events before the first poll are not delivered.
		eventually(t, time.Minute, "the engine polls the repository's events", func(context.Context) (bool, error) {
			return len(callsTo(gh, events)) > polls, nil
		})
		return stop
	}
	stop := start()

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
	deployed := func(sha string) {
		t.Helper()
		eventually(t, 3*time.Minute, "worker-stg records "+sha, func(ctx context.Context) (bool, error) {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("deploy.example.com/v1alpha1")
			u.SetKind("DeployNotifier")
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "worker-stg"}, u); err != nil {
				return false, nil
			}
			got, _, _ := unstructured.NestedString(u.Object, "status", "lastDeployedSha")
			return got == sha, nil
		})
	}
	deployed(base)

	pr := gh.MergePull(repo, "dave", "Deploy from a comment", 1)
	first := gh.Comment(repo, pr.Number, "alice", "/deploy "+pr.MergeCommitSHA[:10])
	deployed(pr.MergeCommitSHA)

	stop()
	second := gh.Comment(repo, pr.Number, "alice", "/deploy "+base[:10])
	stop = start()
	defer stop()
	deployed(base)

	// The deliveries: each /deploy once, Handled; every other event of
	// the feed filtered out; no event twice.
	var all []archive.Delivery
	eventually(t, time.Minute, "the deliveries finished", func(ctx context.Context) (bool, error) {
		page, err := store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "deploy-notifier", Limit: 1000})
		if err != nil {
			return false, err
		}
		all = page.Deliveries
		return !slices.ContainsFunc(all, func(d archive.Delivery) bool { return d.Outcome == archive.DeliveryPending }), nil
	})
	seen := map[string]bool{}
	var handled []string
	for _, dl := range all {
		if seen[dl.DeliveryID] {
			t.Errorf("event %s was recorded twice", dl.DeliveryID)
		}
		seen[dl.DeliveryID] = true
		switch dl.Outcome {
		case archive.DeliveryHandled:
			full, err := store.GetDelivery(ctx, dl.ID)
			if err != nil {
				t.Fatal(err)
			}
			if dl.Event != "issue_comment" || dl.Reason != "" {
				t.Errorf("handled delivery %s: event %q, reason %q; want issue_comment, none", dl.ID, dl.Event, dl.Reason)
			}
			handled = append(handled, string(full.Payload))
		case archive.DeliveryRefused:
			if dl.Reason != "filtered out" {
				t.Errorf("delivery %s of event %s refused: %q; want filtered out", dl.ID, dl.Event, dl.Reason)
			}
		default:
			t.Errorf("delivery %s of event %s: %s %q", dl.ID, dl.Event, dl.Outcome, dl.Reason)
		}
	}
	if len(handled) != 2 || !strings.Contains(strings.Join(handled, "\n"), first.Body) || !strings.Contains(strings.Join(handled, "\n"), second.Body) {
		t.Errorf("handled deliveries:\n%s\nwant the two /deploy comments, once each", strings.Join(handled, "\n"))
	}
	page, err := store.List(ctx, archive.Query{Operator: "deploy-notifier", Handler: "deploy", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Runs); n != 2 {
		t.Errorf("deploy ran %d times; want 2, once per /deploy", n)
	}
}

// callsTo lists the fake GitHub's calls to path.
func callsTo(gh *githubfake.Server, path string) []githubfake.Call {
	var out []githubfake.Call
	for _, c := range gh.Calls() {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}
