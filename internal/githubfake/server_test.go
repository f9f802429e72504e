package githubfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

const repo = "packit/packit-service"

// call sends a request with the server's token (or auth, when given) and
// decodes the JSON answer into out.
func call(t *testing.T, gh *githubfake.Server, method, path string, body, out any, auth ...string) (int, http.Header) {
	t.Helper()
	var in io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		in = bytes.NewReader(data)
	}
	url := path
	if !strings.HasPrefix(path, "http") {
		url = gh.URL + path
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, in)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gh.Token())
	if len(auth) > 0 {
		req.Header.Set("Authorization", auth[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, resp.Header
}

type commitJSON struct {
	SHA     string `json:"sha"`
	Parents []struct {
		SHA string `json:"sha"`
	} `json:"parents"`
	Commit struct {
		Message string `json:"message"`
	} `json:"commit"`
}

type comparison struct {
	Status       string       `json:"status"`
	AheadBy      int          `json:"ahead_by"`
	BehindBy     int          `json:"behind_by"`
	TotalCommits int          `json:"total_commits"`
	Commits      []commitJSON `json:"commits"`
	MergeBase    commitJSON   `json:"merge_base_commit"`
}

type pullJSON struct {
	Number int    `json:"number"`
	State  string `json:"state"`
	User   struct {
		Login string `json:"login"`
	} `json:"user"`
	MergedAt       *string `json:"merged_at"`
	MergeCommitSHA *string `json:"merge_commit_sha"`
}

type commentJSON struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
	User struct {
		Login string `json:"login"`
	} `json:"user"`
}

func shas(cs []commitJSON) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.SHA)
	}
	return out
}

func TestCompareListsTheCommitsBetweenTwoDeploymentsOldestFirst(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)
	a := gh.MergePull(repo, "alice", "Fix the worker", 2)
	open := gh.OpenPull(repo, "carol", "Not merged", 1)
	direct := gh.Push(repo, "Bump the version")
	b := gh.MergePull(repo, "bob", "Faster imports", 1)
	head := gh.Head(repo)

	var got comparison
	if status, _ := call(t, gh, "GET", "/repos/"+repo+"/compare/"+base+"..."+head, nil, &got); status != 200 {
		t.Fatalf("compare: %d", status)
	}
	want := slices.Concat(a.Commits, []string{a.MergeCommitSHA, direct}, b.Commits, []string{b.MergeCommitSHA})
	if !slices.Equal(shas(got.Commits), want) || got.Status != "ahead" || got.AheadBy != 6 || got.TotalCommits != 6 || got.BehindBy != 0 {
		t.Errorf("compare base...head: %s, ahead %d, behind %d, total %d, commits %v; want ahead by 6: %v", got.Status, got.AheadBy, got.BehindBy, got.TotalCommits, shas(got.Commits), want)
	}
	if slices.Contains(shas(got.Commits), open.Commits[0]) {
		t.Errorf("compare lists %s, the commit of a pull request not merged", open.Commits[0])
	}
	if m := got.Commits[2]; len(m.Parents) != 2 || m.Parents[0].SHA != base || m.Parents[1].SHA != a.Commits[1] {
		t.Errorf("the merge commit's parents: %+v; want main's head then the pull request's last commit", m.Parents)
	}

	// Short SHAs and main resolve; the other way round is behind; the
	// same twice is identical.
	got = comparison{}
	call(t, gh, "GET", "/repos/"+repo+"/compare/"+head[:7]+"...main", nil, &got)
	if got.Status != "identical" || len(got.Commits) != 0 {
		t.Errorf("compare head...main: %s with %d commits; want identical", got.Status, len(got.Commits))
	}
	got = comparison{}
	call(t, gh, "GET", "/repos/"+repo+"/compare/"+head+"..."+base, nil, &got)
	if got.Status != "behind" || got.BehindBy != 6 || len(got.Commits) != 0 || got.MergeBase.SHA != base {
		t.Errorf("compare head...base: %s, behind %d, %d commits, merge base %s; want behind by 6, no commits, merge base %s", got.Status, got.BehindBy, len(got.Commits), got.MergeBase.SHA, base)
	}
	got = comparison{}
	call(t, gh, "GET", "/repos/"+repo+"/compare/"+open.Commits[0]+"..."+head, nil, &got)
	if got.Status != "diverged" || got.BehindBy != 1 || got.AheadBy != 3 {
		t.Errorf("compare of a branch not merged with main: %s, ahead %d, behind %d; want diverged, 3 and 1", got.Status, got.AheadBy, got.BehindBy)
	}

	for _, path := range []string{
		"/repos/" + repo + "/compare/" + base + "..." + strings.Repeat("0", 40),
		"/repos/" + repo + "/compare/" + base,
		"/repos/packit/unknown/compare/" + base + "..." + head,
	} {
		var e struct{ Message string }
		if status, _ := call(t, gh, "GET", path, nil, &e); status != 404 || e.Message != "Not Found" {
			t.Errorf("GET %s: %d %q; want 404 Not Found", path, status, e.Message)
		}
	}
}

func TestComparePaginatesOnlyWhenAsked(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	base := gh.CreateRepo(repo)
	for i := range 260 {
		gh.Push(repo, fmt.Sprintf("commit %d", i))
	}
	var got comparison
	_, h := call(t, gh, "GET", "/repos/"+repo+"/compare/"+base+"...main", nil, &got)
	if len(got.Commits) != 250 || got.TotalCommits != 260 || h.Get("Link") != "" {
		t.Errorf("compare without per_page: %d commits of %d, Link %q; want the first 250, no Link", len(got.Commits), got.TotalCommits, h.Get("Link"))
	}
	var all []string
	next := "/repos/" + repo + "/compare/" + base + "...main?per_page=100"
	for next != "" {
		got = comparison{}
		_, h := call(t, gh, "GET", next, nil, &got)
		all = append(all, shas(got.Commits)...)
		next = nextLink(h)
	}
	if len(all) != 260 || all[259] != gh.Head(repo) {
		t.Errorf("compare page by page: %d commits, the last %s; want 260, the last main's head", len(all), all[len(all)-1])
	}
}

var (
	nextRE = regexp.MustCompile(`<([^>]+)>; rel="next"`)
	lastRE = regexp.MustCompile(`<[^>]+[?&]page=3[&>][^>]*>?; rel="last"`)
)

func nextLink(h http.Header) string {
	if m := nextRE.FindStringSubmatch(h.Get("Link")); m != nil {
		return m[1]
	}
	return ""
}

func TestCommitPullsNamesThePullRequestsOfACommit(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	a := gh.MergePull(repo, "alice", "Fix the worker", 2)
	direct := gh.Push(repo, "Bump the version")
	open := gh.OpenPull(repo, "carol", "Not merged", 1)

	for _, sha := range append(a.Commits, a.MergeCommitSHA) {
		var got []pullJSON
		call(t, gh, "GET", "/repos/"+repo+"/commits/"+sha+"/pulls", nil, &got)
		if len(got) != 1 || got[0].Number != a.Number || got[0].State != "closed" || got[0].User.Login != "alice" ||
			got[0].MergedAt == nil || got[0].MergeCommitSHA == nil || *got[0].MergeCommitSHA != a.MergeCommitSHA {
			t.Errorf("pulls of %s: %+v; want #%d by alice, merged in %s", sha, got, a.Number, a.MergeCommitSHA)
		}
	}
	var got []pullJSON
	call(t, gh, "GET", "/repos/"+repo+"/commits/"+direct+"/pulls", nil, &got)
	if len(got) != 0 {
		t.Errorf("pulls of a commit pushed to main: %+v; want none", got)
	}
	got = nil
	call(t, gh, "GET", "/repos/"+repo+"/commits/"+open.Commits[0][:10]+"/pulls", nil, &got)
	if len(got) != 1 || got[0].State != "open" || got[0].MergedAt != nil {
		t.Errorf("pulls of an open pull request's commit: %+v; want it, open, not merged", got)
	}
	var e struct{ Message string }
	if status, _ := call(t, gh, "GET", "/repos/"+repo+"/commits/"+strings.Repeat("a", 40)+"/pulls", nil, &e); status != 422 || !strings.HasPrefix(e.Message, "No commit found for SHA") {
		t.Errorf("pulls of an unknown commit: %d %q; want 422 No commit found for SHA", status, e.Message)
	}

	var c commitJSON
	if status, _ := call(t, gh, "GET", "/repos/"+repo+"/commits/"+direct[:7], nil, &c); status != 200 || c.SHA != direct || c.Commit.Message != "Bump the version" {
		t.Errorf("the commit %s: %d %+v; want %s", direct[:7], status, c, direct)
	}
}

func TestIssueCommentsArePostedAndListedPageByPage(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{Login: "packit-bot"})
	gh.CreateRepo(repo)
	pr := gh.MergePull(repo, "alice", "Fix the worker", 1)
	gh.Comment(repo, pr.Number, "alice", "please review")
	for i := range 74 {
		var c commentJSON
		status, h := call(t, gh, "POST", fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), map[string]string{"body": fmt.Sprintf("comment %d", i)}, &c)
		if status != 201 || c.User.Login != "packit-bot" || c.Body != fmt.Sprintf("comment %d", i) || !strings.HasSuffix(h.Get("Location"), fmt.Sprint(c.ID)) {
			t.Fatalf("POST comment: %d %+v, Location %q; want 201, by packit-bot", status, c, h.Get("Location"))
		}
	}

	var bodies []string
	pages := 0
	next := fmt.Sprintf("/repos/%s/issues/%d/comments?per_page=30", repo, pr.Number)
	for next != "" {
		var page []commentJSON
		_, h := call(t, gh, "GET", next, nil, &page)
		for _, c := range page {
			bodies = append(bodies, c.Body)
		}
		pages++
		if pages == 1 && !lastRE.MatchString(h.Get("Link")) {
			t.Errorf("the first page's Link: %q; want the last page, 3", h.Get("Link"))
		}
		next = nextLink(h)
	}
	if pages != 3 || len(bodies) != 75 || bodies[0] != "please review" || bodies[74] != "comment 73" {
		t.Errorf("%d comments in %d pages, first %q, last %q; want 75 in 3, oldest first", len(bodies), pages, bodies[0], bodies[len(bodies)-1])
	}
	var page []commentJSON
	if _, h := call(t, gh, "GET", fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), nil, &page); len(page) != 30 || nextLink(h) == "" {
		t.Errorf("without per_page: %d comments, Link %q; want 30 and a next page", len(page), h.Get("Link"))
	}
	got := gh.Comments(repo, pr.Number)
	if len(got) != 75 || got[0].Author != "alice" || got[1].Author != "packit-bot" {
		t.Errorf("Comments: %d, by %s then %s; want 75, alice's then the bot's", len(got), got[0].Author, got[1].Author)
	}

	// GitHub's refusals.
	for _, c := range []struct {
		path   string
		body   any
		status int
	}{
		{fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), map[string]string{}, 422},
		{fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), map[string]string{"body": strings.Repeat("x", githubfake.MaxCommentBody+1)}, 422},
		{fmt.Sprintf("/repos/%s/issues/%d/comments", repo, 99), map[string]string{"body": "x"}, 404},
	} {
		if status, _ := call(t, gh, "POST", c.path, c.body, nil); status != c.status {
			t.Errorf("POST %s: %d; want %d", c.path, status, c.status)
		}
	}
	if n := len(gh.Comments(repo, pr.Number)); n != 75 {
		t.Errorf("%d comments after the refused ones; want 75", n)
	}
}

func TestEveryRequestNeedsTheToken(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{Token: "s3cret"})
	gh.CreateRepo(repo)
	path := "/repos/" + repo + "/commits/main"
	for auth, want := range map[string]int{
		"":              401,
		"Bearer wrong":  401,
		"Basic s3cret":  401,
		"Bearer s3cret": 200,
		"token s3cret":  200,
	} {
		var e struct{ Message string }
		status, _ := call(t, gh, "GET", path, nil, &e, auth)
		if status != want || (want == 401 && e.Message != "Bad credentials") {
			t.Errorf("Authorization %q: %d %q; want %d", auth, status, e.Message, want)
		}
	}
	if status, _ := call(t, gh, "GET", "/repos/"+repo+"/pulls", nil, nil); status != 404 {
		t.Errorf("an endpoint the fake does not serve: %d; want 404", status)
	}
}

func TestTeamMembershipIsActiveOrNotFound(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.AddTeamMember("packit", "deployers", "Alice")
	var m struct{ State, Role string }
	if status, _ := call(t, gh, "GET", "/orgs/Packit/teams/deployers/memberships/alice", nil, &m); status != 200 || m.State != "active" || m.Role != "member" {
		t.Errorf("a member: %d %+v; want 200, active member", status, m)
	}
	for _, path := range []string{"/orgs/packit/teams/deployers/memberships/mallory", "/orgs/packit/teams/admins/memberships/alice"} {
		if status, _ := call(t, gh, "GET", path, nil, nil); status != 404 {
			t.Errorf("GET %s: %d; want 404", path, status)
		}
	}
}

func TestFaultsFailTheNthRequestOrLoseItsAnswer(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	pr := gh.MergePull(repo, "alice", "Fix", 1)
	post := func(body string) int {
		status, _ := call(t, gh, "POST", fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), map[string]string{"body": body}, nil)
		return status
	}
	failed := gh.Inject(githubfake.Fault{Method: "POST", Path: "/repos/*/*/issues/*/comments", Skip: 1, Status: 502})
	lost := gh.Inject(githubfake.Fault{Method: "POST", Skip: 2, Apply: true, Status: 502})
	got := []int{post("one"), post("two"), post("three"), post("four")}
	if !slices.Equal(got, []int{201, 502, 502, 201}) {
		t.Errorf("four POSTs answered %v; want 201, 502 (the second fails), 502 (the third's answer is lost), 201", got)
	}
	var bodies []string
	for _, c := range gh.Comments(repo, pr.Number) {
		bodies = append(bodies, c.Body)
	}
	if !slices.Equal(bodies, []string{"one", "three", "four"}) {
		t.Errorf("comments %q; want one, three (made, its answer lost) and four", bodies)
	}
	if failed.Hits() != 1 || lost.Hits() != 1 {
		t.Errorf("hits %d and %d; want 1 each", failed.Hits(), lost.Hits())
	}
	// Every recorded, with its status; GETs were not counted by the POST
	// faults.
	if status, _ := call(t, gh, "GET", fmt.Sprintf("/repos/%s/issues/%d/comments", repo, pr.Number), nil, nil); status != 200 {
		t.Errorf("GET after the faults: %d", status)
	}
	var calls []string
	for _, c := range gh.Calls() {
		calls = append(calls, fmt.Sprintf("%s %d", c.Method, c.Status))
	}
	if want := []string{"POST 201", "POST 502", "POST 502", "POST 201", "GET 200"}; !slices.Equal(calls, want) {
		t.Errorf("calls %v; want %v", calls, want)
	}
}

func TestAHangingRequestIsHeldUntilReleasedOrItsClientGoes(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	pr := gh.MergePull(repo, "alice", "Fix", 1)
	path := fmt.Sprintf("%s/repos/%s/issues/%d/comments", gh.URL, repo, pr.Number)
	hang := gh.Inject(githubfake.Fault{Method: "POST", Hang: true, Times: -1})
	post := func(ctx context.Context, body string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", path, strings.NewReader(`{"body": "`+body+`"}`))
		req.Header.Set("Authorization", "token "+gh.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// A client that gives up: nothing is done, the call has no status.
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := post(ctx, "abandoned"); errc <- err }()
	select {
	case <-hang.Hit():
	case <-time.After(10 * time.Second):
		t.Fatal("the POST never reached the server")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Error("the abandoned POST got an answer")
	}

	// Released: answered as usual.
	statusc := make(chan int, 1)
	go func() { status, _ := post(t.Context(), "released"); statusc <- status }()
	for hang.Hits() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case status := <-statusc:
		t.Fatalf("the held POST was answered %d before its release", status)
	case <-time.After(100 * time.Millisecond):
	}
	hang.Release()
	if status := <-statusc; status != 201 {
		t.Errorf("the released POST: %d; want 201", status)
	}
	var bodies []string
	for _, c := range gh.Comments(repo, pr.Number) {
		bodies = append(bodies, c.Body)
	}
	if !slices.Equal(bodies, []string{"released"}) {
		t.Errorf("comments %q; want only the released one", bodies)
	}
	// The abandoned call is recorded once its handler saw the client go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []int
		for _, c := range gh.Calls() {
			got = append(got, c.Status)
		}
		if slices.Contains(got, 0) && slices.Contains(got, 201) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls answered %v; want 0 (the abandoned one) and 201", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseLetsHangingRequestsGo(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	hang := gh.Inject(githubfake.Fault{Hang: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(t.Context(), "GET", gh.URL+"/repos/a/b/commits/main", nil)
		req.Header.Set("Authorization", "token "+gh.Token())
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-hang.Hit():
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the server")
	}
	closed := make(chan struct{})
	go func() { gh.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a hanging request")
	}
	<-done
}
