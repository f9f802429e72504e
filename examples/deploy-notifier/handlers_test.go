// Package deploynotifier_test runs the example's handlers as opkit runs
// them (python3, the binding context on stdin, a minimal environment)
// against a local GitHub (internal/githubfake) and, for deploy, a fake
// Deployment endpoint: no cluster needed. internal/engine's
// TestDeployNotifierExample runs the whole example on the local control
// plane.
package deploynotifier_test

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/githubfake"
)

const repo = "packit/packit-service"

// run is one handler run: its result (stdout), log (stderr) and exit
// status.
type run struct {
	Result struct {
		Status struct {
			LastDeployedSha      *string `json:"lastDeployedSha"`
			NotifiedPullRequests []int   `json:"notifiedPullRequests"`
		} `json:"status"`
		Skipped      bool   `json:"skipped"`
		RequeueAfter string `json:"requeueAfter"`
		Refuse       string `json:"refuse"`
		Error        *struct {
			Message   string `json:"message"`
			Permanent bool   `json:"permanent"`
		} `json:"error"`
		Events []struct{ Type, Reason, Message string } `json:"events"`
	}
	Stdout, Log string
	Exit        int
}

// handler starts a handler of the example with the binding context on
// stdin and the environment env (NAME=value) on top of PATH, as the exec
// executor gives it.
func handler(t *testing.T, script string, ctx any, env ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	in, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "python3", script)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "OPKIT_IDEMPOTENCY_KEY=test"}, env...)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stdout, &stderr
}

// runHandler runs a handler to its end.
func runHandler(t *testing.T, script string, ctx any, env ...string) run {
	t.Helper()
	cmd, stdout, stderr := handler(t, script, ctx, env...)
	var r run
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		r.Exit = ee.ExitCode()
	}
	r.Stdout, r.Log = stdout.String(), stderr.String()
	if strings.TrimSpace(r.Stdout) != "" {
		if err := json.Unmarshal(stdout.Bytes(), &r.Result); err != nil {
			t.Fatalf("%s wrote %q, not a result: %v; log:\n%s", script, r.Stdout, err, r.Log)
		}
	}
	t.Logf("%s exited %d; result %s; log:\n%s", script, r.Exit, strings.TrimSpace(r.Stdout), r.Log)
	return r
}

// notifyContext is notify's binding context: a DeployNotifier of env that
// recorded last (none when empty), its Deployment running image, rolled
// out or not.
func notifyContext(env, last, image string, rolledOut bool) map[string]any {
	status := map[string]any{}
	if last != "" {
		status["lastDeployedSha"] = last
	}
	available := 1
	if !rolledOut {
		available = 0
	}
	return map[string]any{
		"operator": "deploy-notifier", "handler": "notify", "trigger": "when", "runId": "01jd5v3q8m2k4x7zab",
		"idempotencyKey": "0b6a3f2e-1c1d-4b8e-9a39-2f1d7f4b1a11/1/notify/when/3", "attempt": 1,
		"object": map[string]any{
			"apiVersion": "deploy.example.com/v1alpha1", "kind": "DeployNotifier",
			"metadata": map[string]any{"name": "worker-" + env, "namespace": "packit"},
			"spec":     map[string]any{"repository": repo, "environment": env, "deployment": "packit-worker-" + env},
			"status":   status,
		},
		"related": map[string]any{"app": map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "packit-worker-" + env, "namespace": "packit", "generation": 4},
			"spec": map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "worker", "image": image},
			}}}},
			"status": map[string]any{"observedGeneration": 4, "replicas": 1, "updatedReplicas": 1, "availableReplicas": available},
		}},
	}
}

func githubEnv(gh *githubfake.Server) []string {
	return []string{"GITHUB_API_URL=" + gh.URL, "GITHUB_TOKEN=" + gh.Token()}
}

// told returns, for each pull request, the environments its comments say
// it was deployed to, with the SHA: {1: ["stg abc..."]}.
func told(gh *githubfake.Server, prs ...int) map[int][]string {
	out := map[int][]string{}
	for _, n := range prs {
		out[n] = []string{}
		for _, c := range gh.Comments(repo, n) {
			var env, sha string
			if _, err := fmt.Sscanf(c.Body, "Deployed to %s in %40s", &env, &sha); err == nil {
				marker := fmt.Sprintf("<!-- opkit-deploy-notifier env=%s pr=%d sha=%s ", env, n, sha)
				if !strings.Contains(c.Body, marker) || c.Author != gh.Login() {
					out[n] = append(out[n], "without its marker: "+c.Body)
					continue
				}
				out[n] = append(out[n], env+" "+sha)
			}
		}
	}
	return out
}

// history is a repository with three pull requests merged after base (the
// second with two commits), a commit pushed to main, and a pull request
// left open; head is main's head.
func history(t *testing.T) (gh *githubfake.Server, base, head string) {
	gh = githubfake.New(t, githubfake.Options{})
	base = gh.CreateRepo(repo)
	gh.MergePull(repo, "alice", "Fix the worker", 1)
	gh.MergePull(repo, "bob", "Faster imports", 2)
	gh.Push(repo, "Bump the version")
	gh.MergePull(repo, "carol", "Retry on 502", 1)
	gh.OpenPull(repo, "dave", "Not merged yet", 1)
	return gh, base, gh.Head(repo)
}

func TestNotifyCommentsOnEachPullRequestOncePerEnvironment(t *testing.T) {
	gh, base, head := history(t)
	image := "quay.io/packit/packit-worker:" + head

	r := runHandler(t, "notify.py", notifyContext("stg", base, image, true), githubEnv(gh)...)
	want := map[int][]string{1: {"stg " + head}, 2: {"stg " + head}, 3: {"stg " + head}, 4: {}}
	if got := told(gh, 1, 2, 3, 4); r.Exit != 0 || !equal(got, want) {
		t.Fatalf("after a rollout to stg: exit %d, comments %v; want %v", r.Exit, got, want)
	}
	if s := r.Result.Status; s.LastDeployedSha == nil || *s.LastDeployedSha != head || !slices.Equal(s.NotifiedPullRequests, []int{1, 2, 3}) {
		t.Errorf("status %+v; want lastDeployedSha %s, notifiedPullRequests [1 2 3]", s, head)
	}
	if len(r.Result.Events) != 1 || r.Result.Events[0].Reason != "Notified" || !strings.Contains(r.Result.Events[0].Message, "#1, #2, #3 told") {
		t.Errorf("events %+v; want one Notified naming #1, #2, #3", r.Result.Events)
	}

	// The same run again (its success was not recorded before a crash):
	// the markers are found, nothing is posted.
	posts := countPosts(gh)
	r = runHandler(t, "notify.py", notifyContext("stg", base, image, true), githubEnv(gh)...)
	if got := told(gh, 1, 2, 3, 4); r.Exit != 0 || !equal(got, want) || countPosts(gh) != posts {
		t.Errorf("the run repeated: exit %d, comments %v, %d POSTs more; want none more", r.Exit, got, countPosts(gh)-posts)
	}
	if s := r.Result.Status; !slices.Equal(s.NotifiedPullRequests, []int{1, 2, 3}) {
		t.Errorf("the repeated run's status %+v; want the same pull requests", s)
	}

	// prod is told apart from stg.
	r = runHandler(t, "notify.py", notifyContext("prod", base, image, true), githubEnv(gh)...)
	for n := 1; n <= 3; n++ {
		want[n] = []string{"stg " + head, "prod " + head}
	}
	if got := told(gh, 1, 2, 3, 4); r.Exit != 0 || !equal(got, want) {
		t.Errorf("after a rollout to prod: exit %d, comments %v; want %v", r.Exit, got, want)
	}
}

func equal(a, b map[int][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func countPosts(gh *githubfake.Server) int {
	n := 0
	for _, c := range gh.Calls() {
		if c.Method == "POST" {
			n++
		}
	}
	return n
}

func TestNotifyTellsNobodyOfAFirstDeploymentARollbackOrNoNewSHA(t *testing.T) {
	gh, base, head := history(t)
	for _, c := range []struct {
		name, last, image string
		rolledOut         bool
		status            string // the lastDeployedSha recorded; "" when skipped
		requeue           string // requeueAfter
		calls             bool   // GitHub is asked
	}{
		{"first deployment", "", "quay.io/packit/packit-worker:" + head, true, head, "", false},
		{"the same SHA again", head, "quay.io/packit/packit-worker:" + head, true, "", "", false},
		{"a tag that is no SHA", base, "quay.io/packit/packit-worker:latest", true, "", "", false},
		{"a short uppercase tag", base, "quay.io/packit/packit-worker:ABCDEF1", true, "", "", false},
		{"a digest", base, "quay.io/packit/packit-worker@sha256:" + strings.Repeat("a", 64), true, "", "", false},
		{"a rollout going on", base, "quay.io/packit/packit-worker:" + head, false, "", "15s", false},
		{"the same SHA rolled again", head, "quay.io/packit/packit-worker:" + head, false, "", "", false},
		{"a rollback", head, "registry:5000/packit-worker:" + base[:7], true, base[:7], "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := len(gh.Calls())
			r := runHandler(t, "notify.py", notifyContext("stg", c.last, c.image, c.rolledOut), githubEnv(gh)...)
			if r.Exit != 0 || r.Result.Error != nil {
				t.Fatalf("exit %d, error %+v", r.Exit, r.Result.Error)
			}
			got := ""
			if s := r.Result.Status.LastDeployedSha; s != nil {
				got = *s
			}
			if got != c.status || r.Result.Skipped != (c.status == "") || r.Result.RequeueAfter != c.requeue || len(r.Result.Status.NotifiedPullRequests) != 0 {
				t.Errorf("status %q, skipped %v, requeueAfter %q, notified %v; want status %q, requeueAfter %q, nobody notified", got, r.Result.Skipped, r.Result.RequeueAfter, r.Result.Status.NotifiedPullRequests, c.status, c.requeue)
			}
			if asked := len(gh.Calls()) > calls; asked != c.calls {
				t.Errorf("GitHub asked: %v; want %v", asked, c.calls)
			}
		})
	}
	if got := told(gh, 1, 2, 3, 4); !equal(got, map[int][]string{1: {}, 2: {}, 3: {}, 4: {}}) {
		t.Errorf("comments %v; want none", got)
	}
}

func TestNotifyRetriedAfterALostAnswerCommentsOnce(t *testing.T) {
	gh, base, head := history(t)
	image := "quay.io/packit/packit-worker:" + head
	// The second comment is made, but its answer is a 502.
	gh.Inject(githubfake.Fault{Method: "POST", Skip: 1, Apply: true, Status: http.StatusBadGateway})
	r := runHandler(t, "notify.py", notifyContext("stg", base, image, true), githubEnv(gh)...)
	if r.Exit != 75 || r.Result.Error == nil || r.Result.Error.Permanent || !strings.Contains(r.Result.Error.Message, "502") {
		t.Errorf("a 502: exit %d, error %+v; want exit 75 (retried) with the status", r.Exit, r.Result.Error)
	}
	ctx := notifyContext("stg", base, image, true)
	ctx["attempt"] = 2
	r = runHandler(t, "notify.py", ctx, githubEnv(gh)...)
	want := map[int][]string{1: {"stg " + head}, 2: {"stg " + head}, 3: {"stg " + head}}
	if got := told(gh, 1, 2, 3); r.Exit != 0 || !equal(got, want) {
		t.Errorf("after the retry: exit %d, comments %v; want %v", r.Exit, got, want)
	}
}

func TestNotifyKilledBetweenTwoCommentsCommentsOnceWhenRunAgain(t *testing.T) {
	gh, base, head := history(t)
	image := "quay.io/packit/packit-worker:" + head
	hang := gh.Inject(githubfake.Fault{Method: "POST", Skip: 1, Hang: true})
	cmd, _, _ := handler(t, "notify.py", notifyContext("stg", base, image, true), githubEnv(gh)...)
	select {
	case <-hang.Hit():
	case <-time.After(time.Minute):
		t.Fatal("the second comment was never posted")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := told(gh, 1, 2, 3); !equal(got, map[int][]string{1: {"stg " + head}, 2: {}, 3: {}}) {
		t.Fatalf("killed while posting the second comment: %v; want only #1 told", got)
	}
	r := runHandler(t, "notify.py", notifyContext("stg", base, image, true), githubEnv(gh)...)
	want := map[int][]string{1: {"stg " + head}, 2: {"stg " + head}, 3: {"stg " + head}}
	if got := told(gh, 1, 2, 3); r.Exit != 0 || !equal(got, want) {
		t.Errorf("run again: exit %d, comments %v; want %v", r.Exit, got, want)
	}
}

func TestNotifyFindsItsMarkerPastTheFirstPageOfComments(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)
	pr := gh.MergePull(repo, "alice", "A popular change", 1)
	for i := range 150 {
		body := fmt.Sprintf("comment %d", i)
		if i == 130 {
			body = "Deployed to stg in x.\n\n<!-- opkit-deploy-notifier env=stg pr=1 sha=x key=y -->"
		}
		gh.Comment(repo, pr.Number, "someone", body)
	}
	// pr=1 does not stand for pr=12, nor stg for prod.
	pr12 := gh.MergePull(repo, "bob", "Twelve", 1)
	gh.Comment(repo, pr12.Number, "someone", "<!-- opkit-deploy-notifier env=prod pr=2 sha=x key=y -->")
	r := runHandler(t, "notify.py", notifyContext("stg", base, "q/w:"+gh.Head(repo), true), githubEnv(gh)...)
	if r.Exit != 0 || !slices.Equal(r.Result.Status.NotifiedPullRequests, []int{1, 2}) {
		t.Fatalf("exit %d, notified %v; want 1 and 2", r.Exit, r.Result.Status.NotifiedPullRequests)
	}
	if n := len(gh.Comments(repo, pr.Number)); n != 150 {
		t.Errorf("#1 has %d comments; want its 150, its marker found on page 2", n)
	}
	if got := told(gh, pr12.Number); len(got[pr12.Number]) != 1 {
		t.Errorf("#2, marked for prod only: %v; want told of stg once", got)
	}
}

func TestNotifyReadsEveryPageOfALongComparison(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)
	first := gh.MergePull(repo, "alice", "The first", 1)
	for i := range 230 {
		gh.Push(repo, fmt.Sprintf("commit %d", i))
	}
	last := gh.MergePull(repo, "bob", "The last", 1)
	r := runHandler(t, "notify.py", notifyContext("stg", base, "q/w:"+gh.Head(repo), true), githubEnv(gh)...)
	if want := []int{first.Number, last.Number}; r.Exit != 0 || !slices.Equal(r.Result.Status.NotifiedPullRequests, want) {
		t.Errorf("234 commits: exit %d, notified %v; want %v, from the first and the third page", r.Exit, r.Result.Status.NotifiedPullRequests, want)
	}
}

// deployContext is deploy's binding context for c, sent as a delivery.
func deployContext(gh *githubfake.Server, c githubfake.Comment) map[string]any {
	payload := gh.IssueCommentEvent(c)
	return map[string]any{
		"operator": "deploy-notifier", "handler": "deploy", "trigger": "event", "runId": "01jd5v3q8m2k4x7zac",
		"idempotencyKey": "deploy-notifier/event/github/72d3162e-cc78-11e3-81ab-4c9367dc0958/deploy", "attempt": 1,
		"object": nil,
		"event": map[string]any{
			"source": "github", "deliveryId": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "event": "issue_comment",
			"receivedAt": time.Now().UTC().Format(time.RFC3339), "headers": map[string]string{"x-github-event": "issue_comment"},
			"payload": payload, "id": "01jd5v3q8m2k4x7zad",
		},
	}
}

func deployEnv(gh *githubfake.Server, kubeconfig string) []string {
	return append(githubEnv(gh), "REPOSITORY="+repo, "DEPLOY_TEAM=packit/deployers", "DEPLOYMENT=packit-worker-stg", "KUBECONFIG="+kubeconfig)
}

func TestDeployRefusesAnyoneButTheTeamAndAnythingButACommit(t *testing.T) {
	gh, _, head := history(t)
	gh.AddTeamMember("packit", "deployers", "alice")
	other := githubfake.New(t, githubfake.Options{})
	other.CreateRepo("someone/else")
	otherPR := other.MergePull("someone/else", "alice", "x", 1)
	for _, c := range []struct {
		name    string
		comment githubfake.Comment
		payload func(map[string]any)
		reason  string
	}{
		{"not a member", gh.Comment(repo, 1, "mallory", "/deploy "+head), nil, "mallory is not a member of packit/deployers"},
		{"a shell", gh.Comment(repo, 1, "alice", "/deploy $(rm -rf /)"), nil, `'/deploy $(rm -rf /)' is not /deploy <sha>`},
		{"a SHA and more", gh.Comment(repo, 1, "alice", "/deploy "+head[:7]+"; rm -rf /"), nil, "is not /deploy <sha>"},
		{"upper case", gh.Comment(repo, 1, "alice", "/deploy "+strings.ToUpper(head)), nil, "is not /deploy <sha>"},
		{"too short", gh.Comment(repo, 1, "alice", "/deploy abc123"), nil, "is not /deploy <sha>"},
		{"no commit", gh.Comment(repo, 1, "alice", "/deploy 1234567"), nil, "1234567 is not a commit of packit/packit-service"},
		{"another repository", other.Comment("someone/else", otherPR.Number, "alice", "/deploy "+head), nil, "the comment is on someone/else, not packit/packit-service"},
		{"an edited comment", gh.Comment(repo, 1, "alice", "/deploy "+head), func(p map[string]any) { p["action"] = "edited" }, "the event issue_comment (edited) is not a new comment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := gh
			if c.comment.Repo != repo {
				src = other
			}
			ctx := deployContext(src, c.comment)
			if c.payload != nil {
				c.payload(ctx["event"].(map[string]any)["payload"].(map[string]any))
			}
			r := runHandler(t, "deploy.py", ctx, deployEnv(gh, "/nonexistent")...)
			if r.Exit != 0 || !strings.Contains(r.Result.Refuse, c.reason) {
				t.Errorf("exit %d, refuse %q; want one saying %q", r.Exit, r.Result.Refuse, c.reason)
			}
		})
	}
}

// apiserver is a fake of the Deployment endpoints deploy.py uses, over
// TLS, with a kubeconfig for it as opkit writes one.
type apiserver struct {
	mu        sync.Mutex
	image     string
	version   int
	conflicts int // PATCHes to answer 409 first
	patches   []string
}

func (a *apiserver) start(t *testing.T, namespace string) (kubeconfig string) {
	path := "/apis/apps/v1/namespaces/" + namespace + "/deployments/packit-worker-stg"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if r.URL.Path != path || r.Header.Get("Authorization") != "Bearer sa-token" {
			http.Error(w, `{"message": "not found"}`, http.StatusNotFound)
			return
		}
		dep := map[string]any{
			"metadata": map[string]any{"name": "packit-worker-stg", "resourceVersion": fmt.Sprint(a.version)},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "worker", "image": a.image},
			}}}},
		}
		if r.Method == "PATCH" {
			body, _ := io.ReadAll(r.Body)
			a.patches = append(a.patches, r.Header.Get("Content-Type")+" "+string(body))
			if m := r.URL.Query().Get("fieldManager"); m != "deploy-notifier" {
				http.Error(w, `{"message": "fieldManager `+m+`: want deploy-notifier"}`, http.StatusBadRequest)
				return
			}
			var ops []struct {
				Op, Path string
				Value    any // a string, or the annotations of the run (deploy.py's run_annotations)
			}
			if err := json.Unmarshal(body, &ops); err != nil || r.Header.Get("Content-Type") != "application/json-patch+json" {
				http.Error(w, `{"message": "bad patch"}`, http.StatusBadRequest)
				return
			}
			if a.conflicts > 0 {
				a.conflicts--
				a.version++ // someone else wrote it
			}
			for _, op := range ops {
				switch {
				case op.Op == "test" && op.Path == "/metadata/resourceVersion" && fmt.Sprint(op.Value) != fmt.Sprint(a.version),
					op.Op == "test" && op.Path == "/spec/template/spec/containers/0/name" && op.Value != "worker":
					http.Error(w, `{"message": "the test failed"}`, http.StatusUnprocessableEntity)
					return
				case op.Op == "replace" && op.Path == "/spec/template/spec/containers/0/image":
					a.image = fmt.Sprint(op.Value)
					a.version++
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(dep)
	}))
	t.Cleanup(srv.Close)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["opkit-run"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: pemCert(srv)}
	kc.AuthInfos["opkit-run"] = &clientcmdapi.AuthInfo{Token: "sa-token"}
	kc.Contexts["opkit-run"] = &clientcmdapi.Context{Cluster: "opkit-run", AuthInfo: "opkit-run", Namespace: namespace}
	kc.CurrentContext = "opkit-run"
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func pemCert(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestDeploySetsTheImageTagOfTheStagingDeployment(t *testing.T) {
	gh, base, head := history(t)
	gh.AddTeamMember("packit", "deployers", "alice")
	api := &apiserver{image: "quay.io/packit/packit-worker:" + base, version: 7, conflicts: 1}
	kubeconfig := api.start(t, "packit-stg")

	// A short SHA deploys the whole one; the Deployment changed meanwhile
	// once: it is read again.
	const runID, traceparent = "01m91agtsvy2aepj3a", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := runHandler(t, "deploy.py", deployContext(gh, gh.Comment(repo, 2, "Alice", "/deploy "+head[:10]+"\r\nplease")),
		append(deployEnv(gh, kubeconfig), "OPKIT_RUN_ID="+runID, "TRACEPARENT="+traceparent)...)
	if r.Exit != 0 || r.Stdout != "" || api.image != "quay.io/packit/packit-worker:"+head {
		t.Fatalf("exit %d, result %q, image %s; want %s, no result", r.Exit, r.Stdout, api.image, head)
	}
	if len(api.patches) != 2 || !strings.Contains(api.patches[1], `"path": "/metadata/resourceVersion", "value": "8"`) {
		t.Errorf("patches %q; want two JSON patches, the second testing resourceVersion 8", api.patches)
	}
	// The patch names the run (opkit why finds it) and its trace.
	if want := `"value": {"opkit.dev/run": "` + runID + `", "opkit.dev/traceparent": "` + traceparent + `"}`; len(api.patches) < 2 || !strings.Contains(api.patches[1], want) {
		t.Errorf("the patch %q does not add the annotations %s", api.patches, want)
	}
	// Again: it runs that image already.
	r = runHandler(t, "deploy.py", deployContext(gh, gh.Comment(repo, 2, "alice", "/deploy "+head)), deployEnv(gh, kubeconfig)...)
	if r.Exit != 0 || len(api.patches) != 2 {
		t.Errorf("the same SHA again: exit %d, %d patches; want no new patch", r.Exit, len(api.patches))
	}
}

// The handlers' definitions compile as they are in the example.
func TestTheExampleDefinitionsCompile(t *testing.T) {
	if _, err := definition.CompileFiles("operator.yaml", "import-images.yaml"); err != nil {
		t.Error(err)
	}
}

func TestImportImagesSaysWhatItWouldImport(t *testing.T) {
	ctx := map[string]any{
		"operator": "import-images", "handler": "stg", "trigger": "schedule", "idempotencyKey": "import-images/schedule/stg/1795569000",
		"attempt": 1, "object": nil, "schedule": map[string]any{"slot": "2026-11-25T01:10:00Z"},
	}
	r := runHandler(t, "import_images.py", ctx, "NAMESPACE=packit-stg", "IMAGE_STREAMS=packit-service, packit-worker")
	if r.Exit != 0 || !strings.Contains(r.Log, "would import the image stream packit-stg/packit-worker") {
		t.Errorf("exit %d, log %q", r.Exit, r.Log)
	}
	r = runHandler(t, "import_images.py", ctx, "NAMESPACE=packit-stg", "IMAGE_STREAMS=x;rm -rf /")
	if r.Exit == 0 || r.Result.Error == nil || !r.Result.Error.Permanent {
		t.Errorf("a stream that is no name: exit %d, error %+v; want a permanent error", r.Exit, r.Result.Error)
	}
}
