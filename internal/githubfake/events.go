package githubfake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The events API: what GitHub lists of a repository's and an
// organization's activity, newest first, for clients that poll instead of
// receiving webhooks.

// maxEvents is how many events GitHub lists of a repository or an
// organization, at most: the older ones are gone from the API.
const maxEvents = 300

// DefaultPollInterval is the X-Poll-Interval, in seconds, the events API
// answers with unless SetPollInterval says otherwise: GitHub's.
const DefaultPollInterval = 60

// DefaultRateLimit is the requests a token may make per hour, as
// GitHub's for a user.
const DefaultRateLimit = 5000

// firstEventID is the first event's id. Ids grow by eventIDStep: not one
// by one, as GitHub's do not, and across a power of ten after the first
// event, so that a client that compares ids as strings, or counts on
// them being contiguous, goes wrong in tests.
const (
	firstEventID = 9_999_999_997
	eventIDStep  = 7
)

// Event is one event of the events API, as GitHub lists it.
type Event struct {
	// ID is the event's id: a number, as a string, larger for a newer
	// event.
	ID string
	// Type is GitHub's type of event, e.g. IssueCommentEvent.
	Type string
	// Actor is the login of who did it.
	Actor string
	// Repo is the repository's full name, owner/name.
	Repo string
	// Org is the organization that owns the repository ("" for a user's;
	// CreateOrg makes one).
	Org string
	// Payload is the event's payload: the webhook's payload for the same
	// action without repository, sender and organization, which the
	// event has at its top as repo, actor and org.
	Payload   map[string]any
	CreatedAt time.Time
}

// CreateOrg makes login an organization: the repositories it owns have
// events with an org, listed by GET /orgs/{org}/events too.
func (s *Server) CreateOrg(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orgs[strings.ToLower(login)] = login
}

// SetPollInterval sets the X-Poll-Interval the events API answers with,
// in seconds.
func (s *Server) SetPollInterval(seconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollInterval = seconds
}

// SetRateLimit sets how many requests are left until reset, when the
// limit (Options.RateLimit) is whole again. With none left, every request
// that would count is answered 403 "API rate limit exceeded" until reset.
func (s *Server) SetRateLimit(remaining int, reset time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateRemaining, s.rateReset = remaining, reset.Truncate(time.Second)
}

// RateRemaining returns how many requests are left until the reset.
func (s *Server) RateRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateRemaining
}

// AddEvent records an event of type typ by actor on the repository with
// payload (its webhook's, without repository, sender and organization),
// as GitHub does when something happens that the fake does not model
// (a release, a fork...). It returns the event.
func (s *Server) AddEvent(repoName, typ, actor string, payload map[string]any) Event {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.eventLocked(s.repoLocked(repoName), typ, actor, payload)
}

// Events returns the events of a repository, newest first, every one
// recorded (not only the 300 the API lists).
func (s *Server) Events(repoName string) []Event {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repoLocked(repoName)
	var out []Event
	for _, e := range slices.Backward(s.events) {
		if e.Repo == rp.fullName() {
			out = append(out, *e)
		}
	}
	return out
}

// Webhook returns the webhook event (X-GitHub-Event) and payload GitHub
// sends for the same action as e: e's payload with the repository, the
// sender and, for an organization's repository, the organization. Push
// events differ: the events API's PushEvent payload is a shorter one
// (ref, head, before, size, commits) than the push webhook's.
func (s *Server) Webhook(e Event) (string, map[string]any) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repoLocked(e.Repo)
	out := make(map[string]any, len(e.Payload)+3)
	for k, v := range e.Payload {
		out[k] = v
	}
	out["repository"] = s.repoJSON(rp)
	out["sender"] = s.userJSON(e.Actor)
	if e.Org != "" {
		out["organization"] = s.orgJSON(e.Org)
	}
	return WebhookEventName(e.Type), out
}

// WebhookEventName is the X-GitHub-Event of an events API type:
// IssueCommentEvent is issue_comment.
func WebhookEventName(typ string) string {
	typ = strings.TrimSuffix(typ, "Event")
	var b strings.Builder
	for i, r := range typ {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// eventLocked appends an event. A payload's values are JSON as
// json.Marshal writes them; they are copied through JSON, so that a later
// change of the world does not change a recorded event.
func (s *Server) eventLocked(rp *repo, typ, actor string, payload map[string]any) *Event {
	if s.lastEventID == 0 {
		s.lastEventID = firstEventID
	} else {
		s.lastEventID += eventIDStep
	}
	var copied map[string]any
	data, err := json.Marshal(payload)
	if err == nil {
		err = json.Unmarshal(data, &copied)
	}
	if err != nil {
		s.t.Fatalf("githubfake: the payload of a %s is not JSON: %v", typ, err)
	}
	e := &Event{
		ID: strconv.FormatInt(s.lastEventID, 10), Type: typ, Actor: actor, Repo: rp.fullName(),
		Org: s.orgs[strings.ToLower(rp.owner)], Payload: copied, CreatedAt: time.Now().UTC().Truncate(time.Second),
	}
	s.events = append(s.events, e)
	return e
}

func (s *Server) orgJSON(login string) map[string]any {
	return map[string]any{
		"login":      login,
		"id":         id("org", login),
		"url":        s.URL + "/orgs/" + login,
		"avatar_url": "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(id("org", login), 10),
	}
}

// eventJSON is an event as the API lists it.
func (s *Server) eventJSON(e *Event) map[string]any {
	actor := s.userJSON(e.Actor)
	out := map[string]any{
		"id":    e.ID,
		"type":  e.Type,
		"actor": map[string]any{"id": actor["id"], "login": e.Actor, "display_login": e.Actor, "url": actor["url"], "avatar_url": actor["avatar_url"]},
		"repo": map[string]any{
			"id":   id("repo", e.Repo),
			"name": e.Repo,
			"url":  s.URL + "/repos/" + e.Repo,
		},
		"payload":    e.Payload,
		"public":     true,
		"created_at": timeJSON(e.CreatedAt),
	}
	if e.Org != "" {
		out["org"] = s.orgJSON(e.Org)
	}
	return out
}

// GET /repos/{owner}/{repo}/events
func (s *Server) repoEvents(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repoOf(w, r)
	if rp == nil {
		return
	}
	s.listEvents(w, r, func(e *Event) bool { return e.Repo == rp.fullName() })
}

// GET /orgs/{org}/events
func (s *Server) orgEvents(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	org := s.orgs[strings.ToLower(r.PathValue("org"))]
	if org == "" {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	s.listEvents(w, r, func(e *Event) bool { return e.Org == org })
}

// listEvents answers with the events that match, newest first, a page of
// the newest maxEvents; with 304 Not Modified, which costs no request of
// the rate limit, when the client's If-None-Match is the page's ETag.
// s.mu is held.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, match func(*Event) bool) {
	var list []*Event
	for _, e := range slices.Backward(s.events) {
		if match(e) && len(list) < maxEvents {
			list = append(list, e)
		}
	}
	lo, hi := s.page(w, r, len(list))
	out := make([]any, 0, hi-lo)
	for _, e := range list[lo:hi] {
		out = append(out, s.eventJSON(e))
	}
	body, err := json.Marshal(out)
	if err != nil {
		panic(err) // only maps of JSON values are written
	}
	sum := sha256.Sum256(body)
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("X-Poll-Interval", strconv.Itoa(s.pollInterval))
	w.Header().Set("Cache-Control", "private, max-age=60, s-maxage=60")
	if inm := r.Header.Get("If-None-Match"); inm != "" && slices.Contains(strings.Split(inm, ", "), etag) {
		if _, counted := w.(*statusWriter); counted { // not a fault's recorder
			s.giveBackLocked()
		}
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(s.rateRemaining))
		w.Header().Set("X-RateLimit-Used", strconv.Itoa(s.opts.RateLimit-s.rateRemaining))
		w.Header().Del("Link")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// rateLimitLocked counts a request and sets its rate-limit headers,
// unless the limit is exhausted: then it answers 403 as GitHub does and
// returns false. A reset past refills the limit. The request is counted
// before its answer is written (a client that has read the answer reads
// the count with it); one that turns out free is given back.
func (s *Server) rateLimitLocked(w http.ResponseWriter, login string) bool {
	now := time.Now()
	if !now.Before(s.rateReset) {
		s.rateRemaining, s.rateReset = s.opts.RateLimit, now.Add(time.Hour).Truncate(time.Second)
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.opts.RateLimit))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(s.rateReset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
	if s.rateRemaining <= 0 {
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Used", strconv.Itoa(s.opts.RateLimit))
		writeError(w, http.StatusForbidden, fmt.Sprintf("API rate limit exceeded for user ID %d.", id("user", login)))
		return false
	}
	// A 304 gives it back, and says so in its own headers.
	s.rateRemaining--
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.rateRemaining))
	h.Set("X-RateLimit-Used", strconv.Itoa(s.opts.RateLimit-s.rateRemaining))
	return true
}

// giveBackLocked gives back the request rateLimitLocked counted: its
// answer was free, or never written.
func (s *Server) giveBackLocked() {
	s.rateRemaining = min(s.rateRemaining+1, s.opts.RateLimit)
}
