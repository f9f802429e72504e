package githubfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

// received is what a receiver saw of one delivery.
type received struct {
	header http.Header
	body   []byte
}

func receiver(t *testing.T, status int) (string, <-chan received) {
	got := make(chan received, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), body}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDeliverSignsTheBodyAsGitHubDoes(t *testing.T) {
	url, got := receiver(t, http.StatusAccepted)
	status, err := githubfake.Deliver(t.Context(), url, "s3cret", "issue_comment", map[string]any{"action": "created"})
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("Deliver: %d %v; want 202", status, err)
	}
	r := <-got
	for name, want := range map[string]string{
		"Content-Type":        "application/json",
		"X-GitHub-Event":      "issue_comment",
		"X-Hub-Signature-256": githubfake.Sign("s3cret", r.body),
		"X-GitHub-Hook-ID":    githubfake.HookID,
	} {
		if v := r.header.Get(name); v != want {
			t.Errorf("%s: %q; want %q", name, v, want)
		}
	}
	if id := r.header.Get("X-GitHub-Delivery"); !uuidRE.MatchString(id) {
		t.Errorf("X-GitHub-Delivery %q is not a random UUID", id)
	}
	if string(r.body) != `{"action":"created"}` {
		t.Errorf("body %s", r.body)
	}

	// A redelivery keeps its id; a bad signature, no signature and raw
	// bodies are sent as asked.
	d := githubfake.Delivery{Event: "ping", Payload: []byte(`{"zen":"x"}`), Secret: "s3cret", ID: "same-id", Signature: "sha256=00"}
	resp, err := d.Send(t.Context(), url)
	r = <-got
	if err != nil || resp.ID != "same-id" || r.header.Get("X-GitHub-Delivery") != "same-id" || r.header.Get("X-Hub-Signature-256") != "sha256=00" || string(r.body) != `{"zen":"x"}` {
		t.Errorf("a delivery with its id, signature and raw body: %+v %v, headers %v, body %s", resp, err, r.header, r.body)
	}
	d = githubfake.Delivery{Event: "ping", Payload: json.RawMessage(`[]`), ContentType: "application/x-www-form-urlencoded"}
	if _, err := d.Send(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	r = <-got
	if _, signed := r.header["X-Hub-Signature-256"]; signed || r.header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		t.Errorf("a delivery without a secret: headers %v; want no signature and the content type asked", r.header)
	}
}

func TestIssueCommentEventIsGitHubsPayload(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	pr := gh.MergePull(repo, "alice", "Fix", 1)
	c := gh.Comment(repo, pr.Number, "bob", "/deploy "+pr.MergeCommitSHA)
	data, err := json.Marshal(gh.IssueCommentEvent(c))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Action string
		Issue  struct {
			Number      int
			PullRequest *struct {
				MergedAt *string `json:"merged_at"`
			} `json:"pull_request"`
		}
		Comment struct {
			ID   int64
			Body string
			User struct{ Login string }
		}
		Repository struct {
			FullName string `json:"full_name"`
		}
		Sender struct{ Login string }
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if p.Action != "created" || p.Issue.Number != pr.Number || p.Issue.PullRequest == nil || p.Issue.PullRequest.MergedAt == nil ||
		p.Comment.ID != c.ID || p.Comment.Body != c.Body || p.Comment.User.Login != "bob" || p.Repository.FullName != repo || p.Sender.Login != "bob" {
		t.Errorf("issue_comment payload: %s", data)
	}
	issue := gh.OpenIssue(repo, "carol", "A bug")
	data, _ = json.Marshal(gh.IssueCommentEvent(gh.Comment(repo, issue, "carol", "me too")))
	p.Issue.PullRequest = nil
	if err := json.Unmarshal(data, &p); err != nil || p.Issue.PullRequest != nil || p.Issue.Number != issue {
		t.Errorf("a comment on an issue: %s; want no pull_request", data)
	}
}
