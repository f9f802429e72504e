package githubfake

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxCommentBody is GitHub's longest comment body, in characters.
const MaxCommentBody = 65536

// compareCap is how many commits compare returns without pagination.
const compareCap = 250

const docsURL = "https://docs.github.com/rest"

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/{owner}/{repo}/compare/{basehead}", s.compare)
	mux.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref}", s.getCommit)
	mux.HandleFunc("GET /repos/{owner}/{repo}/commits/{sha}/pulls", s.commitPulls)
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues/{number}/comments", s.listComments)
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", s.postComment)
	mux.HandleFunc("GET /orgs/{org}/teams/{team}/memberships/{username}", s.membership)
	mux.HandleFunc("GET /repos/{owner}/{repo}/events", s.repoEvents)
	mux.HandleFunc("GET /orgs/{org}/events", s.orgEvents)
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.installationToken)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeError(w, http.StatusNotFound, "Not Found") })
	return mux
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// serve checks the token, applies the faults injected, routes the request
// and records it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.opts.Control && strings.HasPrefix(r.URL.Path, ControlPath) {
		s.control(w, r) // not GitHub's: not recorded, nor counted
		return
	}
	call := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, IfNoneMatch: r.Header.Get("If-None-Match"), Time: time.Now()}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		call.Status = sw.status
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
	}()
	if r.Method == http.MethodPost && appTokenPath.MatchString(r.URL.Path) {
		s.mux.ServeHTTP(sw, r) // authenticated by the App's JWT
		return
	}
	if !s.authorized(r) {
		writeError(sw, http.StatusUnauthorized, "Bad credentials")
		return
	}
	s.mu.Lock()
	counts := s.rateLimitLocked(sw, s.opts.Login)
	s.mu.Unlock()
	if !counts {
		return
	}
	// Counted already (rateLimitLocked), before the answer can reach the
	// client: a request that got none (the client went away) is given
	// back; a free answer (304) gave it back before it was written.
	defer func() {
		if sw.status == 0 {
			s.mu.Lock()
			s.giveBackLocked()
			s.mu.Unlock()
		}
	}()
	// Read the body now: the server notices a client that goes away
	// (r.Context ends) only once the body is read, and a hanging request
	// must notice it.
	body, err := io.ReadAll(http.MaxBytesReader(sw, r.Body, 1<<20))
	if err != nil {
		writeError(sw, http.StatusRequestEntityTooLarge, "Request body too large")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	inj := s.match(r)
	if inj == nil {
		s.mux.ServeHTTP(sw, r)
		return
	}
	f := inj.fault
	var done *httptest.ResponseRecorder
	if f.Apply {
		done = httptest.NewRecorder()
		s.mux.ServeHTTP(done, r)
	}
	if f.Hang {
		select {
		case <-inj.release:
		case <-r.Context().Done():
			return // the client is gone: no answer
		case <-s.closing:
			return
		}
	}
	switch {
	case f.Status != 0:
		for k, v := range f.Header {
			sw.Header().Set(k, v)
		}
		writeError(sw, f.Status, http.StatusText(f.Status))
	case done != nil:
		for k, v := range done.Header() {
			sw.Header()[k] = v
		}
		sw.WriteHeader(done.Code)
		_, _ = sw.Write(done.Body.Bytes())
	default:
		s.mux.ServeHTTP(sw, r)
	}
}

// appTokenPath is the path of an installation token's request.
var appTokenPath = regexp.MustCompile(`^/app/installations/[^/]+/access_tokens$`)

// authorized reports whether r carries the token, or an installation
// token not expired, as "Bearer <token>" or "token <token>".
func (s *Server) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || (!strings.EqualFold(scheme, "bearer") && !strings.EqualFold(scheme, "token")) {
		return false
	}
	if token == s.opts.Token {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	expires, ok := s.installTokens[token]
	return ok && time.Now().Before(expires)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of JSON values are written
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// writeError answers as GitHub's errors read: {"message", "documentation_url"}.
func writeError(w http.ResponseWriter, status int, message string, extra ...any) {
	body := map[string]any{"message": message, "documentation_url": docsURL, "status": strconv.Itoa(status)}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	writeJSON(w, status, body)
}

// repoOf returns the request's repository, or answers 404.
func (s *Server) repoOf(w http.ResponseWriter, r *http.Request) *repo {
	rp := s.repos[strings.ToLower(r.PathValue("owner")+"/"+r.PathValue("repo"))]
	if rp == nil {
		writeError(w, http.StatusNotFound, "Not Found")
	}
	return rp
}

// page cuts a list of n items to the request's page (per_page, default 30,
// at most 100; page, from 1), and sets the Link header to the others.
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int) (lo, hi int) {
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per < 1 {
		per = 30
	}
	per = min(per, 100)
	pg, err := strconv.Atoi(q.Get("page"))
	if err != nil || pg < 1 {
		pg = 1
	}
	last := max(1, (n+per-1)/per)
	var links []string
	link := func(p int, rel string) {
		q.Set("page", strconv.Itoa(p))
		links = append(links, fmt.Sprintf(`<%s%s?%s>; rel="%s"`, s.URL, r.URL.Path, q.Encode(), rel))
	}
	if pg > 1 {
		link(min(pg-1, last), "prev")
	}
	if pg < last {
		link(pg+1, "next")
		link(last, "last")
	}
	if pg > 1 {
		link(1, "first")
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	lo = min((pg-1)*per, n)
	return lo, min(lo+per, n)
}

// GET /repos/{owner}/{repo}/compare/{base}...{head}
func (s *Server) compare(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repoOf(w, r)
	if rp == nil {
		return
	}
	baseRef, headRef, ok := strings.Cut(r.PathValue("basehead"), "...")
	base, head := rp.resolve(baseRef), rp.resolve(headRef)
	if !ok || base == nil || head == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	fromBase, fromHead := rp.ancestors(base.sha), rp.ancestors(head.sha)
	ahead, behind, common := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for sha := range fromHead {
		if fromBase[sha] {
			common[sha] = true
		} else {
			ahead[sha] = true
		}
	}
	for sha := range fromBase {
		if !fromHead[sha] {
			behind[sha] = true
		}
	}
	status := "diverged"
	switch {
	case len(ahead) == 0 && len(behind) == 0:
		status = "identical"
	case len(behind) == 0:
		status = "ahead"
	case len(ahead) == 0:
		status = "behind"
	}
	commits := rp.sorted(ahead)
	q := r.URL.Query()
	if q.Has("per_page") || q.Has("page") {
		lo, hi := s.page(w, r, len(commits))
		commits = commits[lo:hi]
	} else if len(commits) > compareCap {
		commits = commits[:compareCap]
	}
	list := make([]any, 0, len(commits))
	for _, c := range commits {
		list = append(list, s.commitJSON(rp, c))
	}
	var mergeBase any
	if cs := rp.sorted(common); len(cs) > 0 {
		mergeBase = s.commitJSON(rp, cs[len(cs)-1])
	}
	html := fmt.Sprintf("https://github.com/%s/compare/%s...%s", rp.fullName(), baseRef, headRef)
	writeJSON(w, http.StatusOK, map[string]any{
		"url":               s.URL + r.URL.Path,
		"html_url":          html,
		"permalink_url":     fmt.Sprintf("https://github.com/%s/compare/%s...%s", rp.fullName(), base.sha, head.sha),
		"diff_url":          html + ".diff",
		"patch_url":         html + ".patch",
		"base_commit":       s.commitJSON(rp, base),
		"merge_base_commit": mergeBase,
		"status":            status,
		"ahead_by":          len(ahead),
		"behind_by":         len(behind),
		"total_commits":     len(ahead),
		"commits":           list,
		"files":             []any{},
	})
}

// GET /repos/{owner}/{repo}/commits/{ref}
func (s *Server) getCommit(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, c := s.commitOf(w, r, "ref")
	if c == nil {
		return
	}
	out := s.commitJSON(rp, c)
	out["files"] = []any{}
	out["stats"] = map[string]any{"total": 0, "additions": 0, "deletions": 0}
	writeJSON(w, http.StatusOK, out)
}

// GET /repos/{owner}/{repo}/commits/{sha}/pulls
func (s *Server) commitPulls(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, c := s.commitOf(w, r, "sha")
	if c == nil {
		return
	}
	var pulls []any
	for _, is := range rp.issuesByNumber() {
		if p := is.pull; p != nil && (p.mergeSHA == c.sha || slices.Contains(p.commits, c.sha)) {
			pulls = append(pulls, s.pullJSON(rp, is))
		}
	}
	lo, hi := s.page(w, r, len(pulls))
	writeJSON(w, http.StatusOK, append([]any{}, pulls[lo:hi]...))
}

// commitOf returns the commit the request's path value param names, or
// answers 404 (no repository) or 422 (no such commit).
func (s *Server) commitOf(w http.ResponseWriter, r *http.Request, param string) (*repo, *commit) {
	rp := s.repoOf(w, r)
	if rp == nil {
		return nil, nil
	}
	c := rp.resolve(r.PathValue(param))
	if c == nil {
		writeError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+r.PathValue(param))
		return nil, nil
	}
	return rp, c
}

// issueOf returns the request's issue, or answers 404.
func (s *Server) issueOf(w http.ResponseWriter, r *http.Request) (*repo, *issue) {
	rp := s.repoOf(w, r)
	if rp == nil {
		return nil, nil
	}
	n, err := strconv.Atoi(r.PathValue("number"))
	is := rp.issues[n]
	if err != nil || is == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil, nil
	}
	return rp, is
}

// GET /repos/{owner}/{repo}/issues/{number}/comments
func (s *Server) listComments(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, is := s.issueOf(w, r)
	if is == nil {
		return
	}
	lo, hi := s.page(w, r, len(is.comments))
	list := make([]any, 0, hi-lo)
	for _, c := range is.comments[lo:hi] {
		list = append(list, s.commentJSON(rp, is, c))
	}
	writeJSON(w, http.StatusOK, list)
}

// POST /repos/{owner}/{repo}/issues/{number}/comments
func (s *Server) postComment(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Body *string `json:"body"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, is := s.issueOf(w, r)
	if is == nil {
		return
	}
	switch {
	case in.Body == nil || *in.Body == "":
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed",
			"errors", []any{map[string]any{"resource": "IssueComment", "code": "missing_field", "field": "body"}})
		return
	case utf8.RuneCountInString(*in.Body) > MaxCommentBody:
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed",
			"errors", []any{map[string]any{"resource": "IssueComment", "code": "custom", "field": "body", "message": fmt.Sprintf("body is too long (maximum is %d characters)", MaxCommentBody)}})
		return
	}
	c := s.commentLocked(rp, is, s.opts.Login, *in.Body)
	out := s.commentJSON(rp, is, c)
	w.Header().Set("Location", out["url"].(string))
	writeJSON(w, http.StatusCreated, out)
}

// GET /orgs/{org}/teams/{team}/memberships/{username}
func (s *Server) membership(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	org, team, user := r.PathValue("org"), r.PathValue("team"), r.PathValue("username")
	if !s.teams[strings.ToLower(org+"/"+team)][strings.ToLower(user)] {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"url":   s.URL + r.URL.Path,
		"role":  "member",
		"state": "active",
	})
}

func (r *repo) issuesByNumber() []*issue {
	out := make([]*issue, 0, len(r.issues))
	for _, is := range r.issues {
		out = append(out, is)
	}
	slices.SortFunc(out, func(a, b *issue) int { return a.number - b.number })
	return out
}

// id is a stable positive number for a name, as GitHub's ids.
func id(kind, name string) int64 {
	sum := sha1.Sum([]byte(kind + "\x00" + strings.ToLower(name)))
	return int64(binary.BigEndian.Uint32(sum[:4]))
}

func timeJSON(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

func (s *Server) userJSON(login string) map[string]any {
	typ := "User"
	if strings.HasSuffix(login, "[bot]") {
		typ = "Bot"
	}
	return map[string]any{
		"login":      login,
		"id":         id("user", login),
		"avatar_url": "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(id("user", login), 10),
		"type":       typ,
		"url":        s.URL + "/users/" + url.PathEscape(login),
		"html_url":   "https://github.com/" + url.PathEscape(login),
	}
}

func (s *Server) repoJSON(rp *repo) map[string]any {
	return map[string]any{
		"id":             id("repo", rp.fullName()),
		"name":           rp.name,
		"full_name":      rp.fullName(),
		"owner":          s.userJSON(rp.owner),
		"private":        false,
		"html_url":       "https://github.com/" + rp.fullName(),
		"url":            s.URL + "/repos/" + rp.fullName(),
		"default_branch": DefaultBranch,
	}
}

func (s *Server) commitJSON(rp *repo, c *commit) map[string]any {
	parents := make([]any, 0, len(c.parents))
	for _, p := range c.parents {
		parents = append(parents, map[string]any{"sha": p, "url": s.URL + "/repos/" + rp.fullName() + "/commits/" + p})
	}
	person := map[string]any{"name": c.author, "email": c.author + "@users.noreply.github.com", "date": timeJSON(c.at)}
	return map[string]any{
		"sha":      c.sha,
		"url":      s.URL + "/repos/" + rp.fullName() + "/commits/" + c.sha,
		"html_url": "https://github.com/" + rp.fullName() + "/commit/" + c.sha,
		"commit": map[string]any{
			"message":   c.message,
			"author":    person,
			"committer": person,
		},
		"author":    s.userJSON(c.author),
		"committer": s.userJSON(c.author),
		"parents":   parents,
	}
}

func (s *Server) pullJSON(rp *repo, is *issue) map[string]any {
	p := is.pull
	state, mergeSHA, closed := "open", any(nil), any(nil)
	if p.merged {
		state, mergeSHA, closed = "closed", p.mergeSHA, timeJSON(p.mergedAt)
	}
	return map[string]any{
		"url":              fmt.Sprintf("%s/repos/%s/pulls/%d", s.URL, rp.fullName(), is.number),
		"id":               id("pull", fmt.Sprintf("%s#%d", rp.fullName(), is.number)),
		"number":           is.number,
		"state":            state,
		"title":            is.title,
		"body":             "",
		"user":             s.userJSON(is.author),
		"html_url":         fmt.Sprintf("https://github.com/%s/pull/%d", rp.fullName(), is.number),
		"issue_url":        fmt.Sprintf("%s/repos/%s/issues/%d", s.URL, rp.fullName(), is.number),
		"created_at":       timeJSON(is.created),
		"closed_at":        closed,
		"merged_at":        timeJSON(p.mergedAt),
		"merge_commit_sha": mergeSHA,
		"draft":            false,
		"head":             map[string]any{"ref": p.branch, "sha": p.commits[len(p.commits)-1], "repo": s.repoJSON(rp)},
		"base":             map[string]any{"ref": DefaultBranch, "sha": p.base, "repo": s.repoJSON(rp)},
	}
}

func (s *Server) issueJSON(rp *repo, is *issue) map[string]any {
	kind, state := "issues", "open"
	out := map[string]any{
		"url":        fmt.Sprintf("%s/repos/%s/issues/%d", s.URL, rp.fullName(), is.number),
		"id":         id("issue", fmt.Sprintf("%s#%d", rp.fullName(), is.number)),
		"number":     is.number,
		"title":      is.title,
		"body":       "",
		"user":       s.userJSON(is.author),
		"comments":   len(is.comments),
		"created_at": timeJSON(is.created),
	}
	if p := is.pull; p != nil {
		kind = "pull"
		if p.merged {
			state = "closed"
		}
		out["pull_request"] = map[string]any{
			"url":       fmt.Sprintf("%s/repos/%s/pulls/%d", s.URL, rp.fullName(), is.number),
			"html_url":  fmt.Sprintf("https://github.com/%s/pull/%d", rp.fullName(), is.number),
			"merged_at": timeJSON(p.mergedAt),
		}
	}
	out["state"] = state
	out["html_url"] = fmt.Sprintf("https://github.com/%s/%s/%d", rp.fullName(), kind, is.number)
	return out
}

func (s *Server) commentJSON(rp *repo, is *issue, c *Comment) map[string]any {
	kind := "issues"
	if is.pull != nil {
		kind = "pull"
	}
	return map[string]any{
		"id":                 c.ID,
		"url":                fmt.Sprintf("%s/repos/%s/issues/comments/%d", s.URL, rp.fullName(), c.ID),
		"html_url":           fmt.Sprintf("https://github.com/%s/%s/%d#issuecomment-%d", rp.fullName(), kind, is.number, c.ID),
		"issue_url":          fmt.Sprintf("%s/repos/%s/issues/%d", s.URL, rp.fullName(), is.number),
		"body":               c.Body,
		"user":               s.userJSON(c.Author),
		"created_at":         timeJSON(c.CreatedAt),
		"updated_at":         timeJSON(c.CreatedAt),
		"author_association": "NONE",
	}
}
