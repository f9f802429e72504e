package githubfake

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultToken is the token a Server accepts when Options.Token is empty.
const DefaultToken = "ghp_githubfake0000000000000000000000000"

// DefaultLogin is the user the token authenticates as when Options.Login
// is empty: the author of the comments posted through the API.
const DefaultLogin = "opkit-bot"

// DefaultBranch is the one branch of every repository.
const DefaultBranch = "main"

// Options configure a Server.
type Options struct {
	// Token is the token every request must carry. Defaults to
	// DefaultToken.
	Token string
	// Login is the user the token authenticates as. Defaults to
	// DefaultLogin.
	Login string
	// RateLimit is how many requests may be made per hour (every request
	// counts but a 304 Not Modified). Defaults to DefaultRateLimit.
	RateLimit int
	// App, when set, is a GitHub App installed on every repository:
	// POST /app/installations/{id}/access_tokens trades its JWT for an
	// installation token, which authenticates as Token does.
	App *App
	// Control serves the control API under ControlPath (control.go): the
	// world set up and read over HTTP, for a fake run as a command
	// rather than from a Go test.
	Control bool
}

// misuser is what a misuse of the setup methods fails: the test given to
// New, or a command's control API (Serve), which answers it 400.
type misuser interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Server is a local GitHub. Its methods are safe for concurrent use with
// the requests it serves; those that set up or read the world (CreateRepo,
// MergePull, Comments...) fail the test given to New on a misuse (an
// unknown repository), and so belong in the test's goroutine; a Server
// of Serve refuses the control API's request instead.
type Server struct {
	// URL is the REST API's base URL, without a trailing slash: what
	// GITHUB_API_URL is set to.
	URL string

	t       misuser
	opts    Options
	srv     *httptest.Server
	mux     *http.ServeMux
	closing chan struct{}
	closed  sync.Once

	mu        sync.Mutex
	repos     map[string]*repo           // by lower-case full name
	teams     map[string]map[string]bool // lower-case "org/team" -> lower-case logins
	calls     []Call
	faults    []*Injection
	seq       int   // commits made, for their SHAs and order
	commentID int64 // the last comment's id

	orgs          map[string]string // lower-case login -> login
	events        []*Event          // oldest first
	lastEventID   int64
	pollInterval  int // seconds
	rateRemaining int
	rateReset     time.Time
	installTokens map[string]time.Time // installation token -> expiry
}

// PullRequest is a pull request of a Server's repository, as it was when
// returned.
type PullRequest struct {
	Repo   string
	Number int
	Title  string
	Author string
	// Branch is its head branch's name.
	Branch string
	// Commits are its own commits, oldest first.
	Commits []string
	Merged  bool
	// MergeCommitSHA is its merge commit on main, once merged.
	MergeCommitSHA string
	MergedAt       time.Time
}

// Comment is a comment on an issue or pull request.
type Comment struct {
	ID        int64
	Repo      string
	Issue     int
	Author    string
	Body      string
	CreatedAt time.Time
}

// Call is one request the server answered.
type Call struct {
	Method string
	Path   string
	// Query is the raw query, without "?".
	Query string
	// IfNoneMatch is the request's If-None-Match: the ETag of a
	// conditional request.
	IfNoneMatch string
	// Status is the answer's status; 0 when the client went away before
	// an answer (a hanging request).
	Status int
	// Time is when the request came.
	Time time.Time
}

type repo struct {
	owner, name string
	commits     map[string]*commit
	head        string // main's head
	issues      map[int]*issue
	lastNumber  int
}

func (r *repo) fullName() string { return r.owner + "/" + r.name }

type commit struct {
	sha, message, author string
	parents              []string
	seq                  int
	at                   time.Time
}

type issue struct {
	number        int
	title, author string
	created       time.Time
	pull          *pull // nil for an issue
	comments      []*Comment
}

type pull struct {
	branch   string
	base     string   // main's head when opened
	commits  []string // oldest first
	merged   bool
	mergeSHA string
	mergedAt time.Time
}

// New starts a Server, closed when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := newServer(t, opts)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Serve starts a Server on ln, for a command (cmd/githubfake): a misuse
// through the control API is that request's 400, nothing else. Close
// stops it.
func Serve(ln net.Listener, opts Options) *Server {
	s := newServer(refuser{}, opts)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	_ = s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	s.URL = s.srv.URL
	return s
}

func newServer(t misuser, opts Options) *Server {
	if opts.Token == "" {
		opts.Token = DefaultToken
	}
	if opts.Login == "" {
		opts.Login = DefaultLogin
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = DefaultRateLimit
	}
	s := &Server{
		t: t, opts: opts, closing: make(chan struct{}),
		repos: map[string]*repo{}, teams: map[string]map[string]bool{},
		orgs: map[string]string{}, pollInterval: DefaultPollInterval, installTokens: map[string]time.Time{},
	}
	s.mux = s.routes()
	return s
}

// Close stops the server: hanging requests are let go unanswered, and
// Close waits for the others to end. Calling it again does nothing.
func (s *Server) Close() {
	s.closed.Do(func() {
		close(s.closing)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// Token is the token the server accepts.
func (s *Server) Token() string { return s.opts.Token }

// Login is the user the token authenticates as.
func (s *Server) Login() string { return s.opts.Login }

var repoNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)

// CreateRepo creates the repository fullName ("owner/name") with one
// commit on main, and returns that commit's SHA.
func (s *Server) CreateRepo(fullName string) string {
	s.t.Helper()
	if !repoNameRE.MatchString(fullName) {
		s.t.Fatalf("githubfake: %q is not a repository's full name, owner/name", fullName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := strings.ToLower(fullName)
	if s.repos[key] != nil {
		s.t.Fatalf("githubfake: the repository %s exists already", fullName)
	}
	owner, name, _ := strings.Cut(fullName, "/")
	r := &repo{owner: owner, name: name, commits: map[string]*commit{}, issues: map[int]*issue{}}
	s.repos[key] = r
	r.head = s.commitLocked(r, "Initial commit", owner, nil).sha
	s.eventLocked(r, "CreateEvent", owner, map[string]any{
		"ref": nil, "ref_type": "repository", "master_branch": DefaultBranch, "description": nil, "pusher_type": "user",
	})
	return r.head
}

// Push adds a commit to main that belongs to no pull request, and returns
// its SHA.
func (s *Server) Push(repoName, message string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(repoName)
	before := r.head
	r.head = s.commitLocked(r, message, r.owner, []string{r.head}).sha
	s.pushEventLocked(r, r.owner, before)
	return r.head
}

// Head returns the SHA of main's head.
func (s *Server) Head(repoName string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repoLocked(repoName).head
}

// OpenPull opens a pull request by author with n commits (at least one)
// on a branch from main's head, and returns it.
func (s *Server) OpenPull(repoName, author, title string, n int) PullRequest {
	s.t.Helper()
	if n < 1 {
		s.t.Fatalf("githubfake: a pull request has at least one commit, not %d", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(repoName)
	r.lastNumber++
	num := r.lastNumber
	p := &pull{branch: fmt.Sprintf("%s/pr-%d", author, num), base: r.head}
	parent := r.head
	for i := 1; i <= n; i++ {
		c := s.commitLocked(r, fmt.Sprintf("%s (%d/%d)", title, i, n), author, []string{parent})
		p.commits = append(p.commits, c.sha)
		parent = c.sha
	}
	r.issues[num] = &issue{number: num, title: title, author: author, created: time.Now().UTC(), pull: p}
	s.eventLocked(r, "PullRequestEvent", author, map[string]any{"action": "opened", "number": num, "pull_request": s.pullJSON(r, r.issues[num])})
	return pullRequest(r, r.issues[num])
}

// Merge merges the open pull request number into main with a merge
// commit, and returns it.
func (s *Server) Merge(repoName string, number int) PullRequest {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, is := s.pullLocked(repoName, number)
	if is.pull.merged {
		s.t.Fatalf("githubfake: %s#%d is merged already", repoName, number)
	}
	p := is.pull
	msg := fmt.Sprintf("Merge pull request #%d from %s\n\n%s", number, p.branch, is.title)
	before := r.head
	c := s.commitLocked(r, msg, r.owner, []string{r.head, p.commits[len(p.commits)-1]})
	r.head = c.sha
	p.merged, p.mergeSHA, p.mergedAt = true, c.sha, c.at
	s.eventLocked(r, "PullRequestEvent", r.owner, map[string]any{"action": "closed", "number": number, "pull_request": s.pullJSON(r, is)})
	s.pushEventLocked(r, r.owner, before)
	return pullRequest(r, is)
}

// MergePull opens a pull request by author with n commits and merges it:
// OpenPull, then Merge.
func (s *Server) MergePull(repoName, author, title string, n int) PullRequest {
	s.t.Helper()
	pr := s.OpenPull(repoName, author, title, n)
	return s.Merge(repoName, pr.Number)
}

// Pull returns the pull request number as it is now.
func (s *Server) Pull(repoName string, number int) PullRequest {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	return pullRequest(s.pullLocked(repoName, number))
}

// OpenIssue opens an issue (not a pull request) and returns its number.
func (s *Server) OpenIssue(repoName, author, title string) int {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(repoName)
	r.lastNumber++
	r.issues[r.lastNumber] = &issue{number: r.lastNumber, title: title, author: author, created: time.Now().UTC()}
	s.eventLocked(r, "IssuesEvent", author, map[string]any{"action": "opened", "issue": s.issueJSON(r, r.issues[r.lastNumber])})
	return r.lastNumber
}

// Comment adds a comment by author on the issue or pull request number,
// as someone commenting on github.com, and returns it.
func (s *Server) Comment(repoName string, number int, author, body string) Comment {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(repoName)
	is := r.issues[number]
	if is == nil {
		s.t.Fatalf("githubfake: %s has no issue or pull request #%d", repoName, number)
	}
	return *s.commentLocked(r, is, author, body)
}

// Comments returns the comments on the issue or pull request number,
// oldest first.
func (s *Server) Comments(repoName string, number int) []Comment {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	is := s.repoLocked(repoName).issues[number]
	if is == nil {
		s.t.Fatalf("githubfake: %s has no issue or pull request #%d", repoName, number)
	}
	out := make([]Comment, 0, len(is.comments))
	for _, c := range is.comments {
		out = append(out, *c)
	}
	return out
}

// AddTeamMember makes login an active member of the team (its slug) of
// the organisation org.
func (s *Server) AddTeamMember(org, team, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := strings.ToLower(org + "/" + team)
	if s.teams[key] == nil {
		s.teams[key] = map[string]bool{}
	}
	s.teams[key][strings.ToLower(login)] = true
}

// Calls returns the requests answered so far, in the order they came.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// repoLocked returns the repository or fails the test.
func (s *Server) repoLocked(name string) *repo {
	s.t.Helper()
	r := s.repos[strings.ToLower(name)]
	if r == nil {
		s.t.Fatalf("githubfake: no repository %s (CreateRepo makes one)", name)
	}
	return r
}

// pullLocked returns the repository and its pull request number, failing
// the test when it has none.
func (s *Server) pullLocked(repoName string, number int) (*repo, *issue) {
	s.t.Helper()
	r := s.repoLocked(repoName)
	is := r.issues[number]
	if is == nil || is.pull == nil {
		s.t.Fatalf("githubfake: %s has no pull request #%d", repoName, number)
	}
	return r, is
}

// commitLocked makes a commit; its SHA is derived from the repository,
// the count of commits made and the message.
func (s *Server) commitLocked(r *repo, message, author string, parents []string) *commit {
	s.seq++
	sum := sha1.Sum(fmt.Appendf(nil, "%s\x00%d\x00%s\x00%s", r.fullName(), s.seq, message, strings.Join(parents, ",")))
	c := &commit{sha: hex.EncodeToString(sum[:]), message: message, author: author, parents: parents, seq: s.seq, at: time.Now().UTC().Truncate(time.Second)}
	r.commits[c.sha] = c
	return c
}

func (s *Server) commentLocked(r *repo, is *issue, author, body string) *Comment {
	s.commentID++
	c := &Comment{ID: s.commentID, Repo: r.fullName(), Issue: is.number, Author: author, Body: body, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	is.comments = append(is.comments, c)
	s.eventLocked(r, "IssueCommentEvent", author, map[string]any{"action": "created", "issue": s.issueJSON(r, is), "comment": s.commentJSON(r, is, c)})
	return c
}

// pushEventLocked records the PushEvent of main moving from before to
// its head, as the events API lists it: a shorter payload than the push
// webhook's (ref, head, before, size and commits, oldest first).
func (s *Server) pushEventLocked(r *repo, pusher, before string) {
	from, to := r.ancestors(before), r.ancestors(r.head)
	for sha := range from {
		delete(to, sha)
	}
	var commits []any
	for _, c := range r.sorted(to) {
		commits = append(commits, map[string]any{
			"sha":      c.sha,
			"author":   map[string]any{"name": c.author, "email": c.author + "@users.noreply.github.com"},
			"message":  c.message,
			"distinct": true,
			"url":      s.URL + "/repos/" + r.fullName() + "/commits/" + c.sha,
		})
	}
	s.eventLocked(r, "PushEvent", pusher, map[string]any{
		"repository_id": id("repo", r.fullName()), "push_id": s.lastEventID + 1, "size": len(commits), "distinct_size": len(commits),
		"ref": "refs/heads/" + DefaultBranch, "head": r.head, "before": before, "commits": commits,
	})
}

func pullRequest(r *repo, is *issue) PullRequest {
	p := is.pull
	return PullRequest{
		Repo: r.fullName(), Number: is.number, Title: is.title, Author: is.author, Branch: p.branch,
		Commits: slices.Clone(p.commits), Merged: p.merged, MergeCommitSHA: p.mergeSHA, MergedAt: p.mergedAt,
	}
}

// resolve finds a commit by its SHA or a unique prefix of at least 7
// hex digits, or main by name.
func (r *repo) resolve(ref string) *commit {
	if ref == DefaultBranch {
		return r.commits[r.head]
	}
	if c := r.commits[ref]; c != nil {
		return c
	}
	if len(ref) < 7 || strings.Trim(ref, "0123456789abcdef") != "" {
		return nil
	}
	var found *commit
	for sha, c := range r.commits {
		if strings.HasPrefix(sha, ref) {
			if found != nil {
				return nil // ambiguous
			}
			found = c
		}
	}
	return found
}

// ancestors is the set of commits reachable from sha, itself included.
func (r *repo) ancestors(sha string) map[string]bool {
	seen := map[string]bool{}
	stack := []string{sha}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		if c := r.commits[s]; c != nil {
			stack = append(stack, c.parents...)
		}
	}
	return seen
}

// sorted returns the commits of set, oldest first.
func (r *repo) sorted(set map[string]bool) []*commit {
	out := make([]*commit, 0, len(set))
	for sha := range set {
		out = append(out, r.commits[sha])
	}
	slices.SortFunc(out, func(a, b *commit) int { return a.seq - b.seq })
	return out
}
