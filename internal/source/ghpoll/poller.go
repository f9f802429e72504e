package ghpoll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/source"
)

// Clock is the poller's time: Now, and After for its waits. Tests give
// one that does not wait.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option configures a Poller.
type Option func(*Poller)

// WithHTTPClient makes the poller's requests with c (http.DefaultClient's
// transport, with a 30 s timeout, by default).
func WithHTTPClient(c *http.Client) Option { return func(p *Poller) { p.client = c } }

// WithClock gives the poller its time.
func WithClock(c Clock) Option { return func(p *Poller) { p.clock = c } }

// maxBody is the largest answer read: a page of 100 events is well below.
const maxBody = 32 << 20

// Poller polls one source's events. Its State is safe for concurrent use
// with Run; Run is called once at a time.
type Poller struct {
	spec     v1alpha1.GitHubPollSource
	interval time.Duration
	operator string
	name     string
	secrets  source.Secrets
	cursors  source.Cursors
	client   *http.Client
	clock    Clock
	events   string // the events' URL
	html     string // the web's base URL, for html_url

	etag     string // the first page's, of the last poll delivered whole
	appToken string // a GitHub App's installation token
	appUntil time.Time

	mu    sync.Mutex
	state source.State
}

var _ source.Consumer = (*Poller)(nil)

// New returns the poller of an operator's source sourceName, of the spec
// as the definition checked and defaulted it, polling every interval (or
// GitHub's X-Poll-Interval when longer). It returns an error for a spec
// it can never poll.
func New(spec *v1alpha1.GitHubPollSource, interval time.Duration, operator, sourceName string, secrets source.Secrets, cursors source.Cursors, opts ...Option) (*Poller, error) {
	if spec == nil {
		return nil, fmt.Errorf("source %s: no githubPoll spec", sourceName)
	}
	p := &Poller{
		spec: *spec, interval: interval, operator: operator, name: sourceName, secrets: secrets, cursors: cursors,
		client: &http.Client{Timeout: 30 * time.Second}, clock: realClock{},
		state: source.State{Lag: -1},
	}
	for _, o := range opts {
		o(p)
	}
	if p.spec.APIURL == "" {
		p.spec.APIURL = "https://api.github.com"
	}
	base, err := url.Parse(strings.TrimSuffix(p.spec.APIURL, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("source %s: apiURL %q is not an http(s) URL like https://api.github.com", sourceName, p.spec.APIURL)
	}
	switch {
	case p.spec.Repository != "" && p.spec.Organization == "":
		owner, repo, ok := strings.Cut(p.spec.Repository, "/")
		if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
			return nil, fmt.Errorf("source %s: repository %q is not owner/name", sourceName, p.spec.Repository)
		}
		p.events = base.String() + "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + "/events"
	case p.spec.Organization != "" && p.spec.Repository == "":
		p.events = base.String() + "/orgs/" + url.PathEscape(p.spec.Organization) + "/events"
	default:
		return nil, fmt.Errorf("source %s: set exactly one of repository and organization", sourceName)
	}
	if (p.spec.TokenSecretRef == nil) == (p.spec.App == nil) {
		return nil, fmt.Errorf("source %s: set exactly one of tokenSecretRef and app", sourceName)
	}
	if p.spec.Since == "" {
		p.spec.Since = v1alpha1.SinceNow
	}
	if p.spec.Since != v1alpha1.SinceNow && p.spec.Since != v1alpha1.SinceAll {
		return nil, fmt.Errorf("source %s: since %q: Now or All", sourceName, p.spec.Since)
	}
	if p.interval <= 0 {
		return nil, fmt.Errorf("source %s: poll interval %s: it must be positive", sourceName, p.interval)
	}
	p.html = htmlBase(base)
	return p, nil
}

// htmlBase is the web's URL of an API's: github.com for api.github.com,
// the host of a GitHub Enterprise Server's /api/v3.
func htmlBase(api *url.URL) string {
	if api.Host == "api.github.com" {
		return "https://github.com"
	}
	return api.Scheme + "://" + api.Host + strings.TrimSuffix(api.Path, "/api/v3")
}

// State is how the source stands.
func (p *Poller) State() source.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Run polls until ctx ends, and returns nil then.
func (p *Poller) Run(ctx context.Context, sink source.Sink) error {
	failures := 0
	for {
		wait, err := p.poll(ctx, sink)
		if ctx.Err() != nil {
			return nil
		}
		now := p.clock.Now()
		var limited *rateLimitError
		p.mu.Lock()
		switch {
		case errors.As(err, &limited):
			failures = 0
			wait = max(wait, limited.until.Sub(now))
			p.state.Connected, p.state.Err, p.state.RetryAt = false, err, now.Add(wait)
		case err != nil:
			failures++
			wait = source.Backoff(failures, rand.Float64())
			var delivering *deliverError
			p.state.Connected, p.state.Err, p.state.RetryAt = errors.As(err, &delivering), err, now.Add(wait)
		default:
			failures = 0
			p.state.Connected, p.state.Err, p.state.RetryAt = true, nil, time.Time{}
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-p.clock.After(wait):
		}
	}
}

// rateLimitError is a rate limit that holds the polls until a time.
type rateLimitError struct {
	what  string
	until time.Time
}

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("%s: waiting until %s, when GitHub resets it", e.what, e.until.UTC().Format(time.RFC3339))
}

// deliverError is a message the sink did not take.
type deliverError struct {
	id  string
	err error
}

func (e *deliverError) Error() string {
	return fmt.Sprintf("event %s not recorded, delivered again at the next poll: %v", e.id, e.err)
}

func (e *deliverError) Unwrap() error { return e.err }

// event is one event as the events API lists it.
type event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Actor     json.RawMessage `json:"actor"`
	Repo      json.RawMessage `json:"repo"`
	Org       json.RawMessage `json:"org"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`

	seq int64 // ID as a number
}

// poll makes one poll: it reads the pages down to the cursor, delivers
// what is newer, and returns the wait before the next poll. A
// *rateLimitError is returned after what could be delivered was.
func (p *Poller) poll(ctx context.Context, sink source.Sink) (time.Duration, error) {
	cursor, err := p.cursors.Cursor(ctx, p.operator, p.name)
	if err != nil {
		return 0, fmt.Errorf("reading the source's cursor from the run archive: %w", err)
	}
	var since int64 = -1 // no cursor
	if cursor != "" {
		if since, err = strconv.ParseInt(cursor, 10, 64); err != nil || since < 0 {
			return 0, fmt.Errorf("the source's cursor in the run archive, %q, is not an event id", cursor)
		}
	}
	wait := p.interval
	var fresh []event // newest first
	var etag string
	var limited error
	next := p.events
	for first := true; next != ""; first = false {
		page, err := p.get(ctx, next, first)
		if err != nil {
			return 0, err
		}
		p.heard()
		if first {
			wait = max(wait, page.pollInterval)
			if page.notModified {
				return wait, nil
			}
			etag = page.etag
		}
		limited = page.exhausted
		reached := false
		for _, e := range page.events {
			if since >= 0 && e.seq <= since {
				reached = true
				break
			}
			fresh = append(fresh, e)
		}
		next = ""
		switch {
		case reached, since < 0 && p.spec.Since == v1alpha1.SinceNow:
			// Down to the cursor, or only the newest is wanted.
		case limited != nil && page.next != "":
			return wait, limited // the next pages after the reset
		default:
			next = page.next
		}
	}
	if since < 0 && p.spec.Since == v1alpha1.SinceNow {
		newest := "0"
		if len(fresh) > 0 {
			newest = fresh[0].ID
		}
		if err := p.cursors.SetCursor(ctx, p.operator, p.name, newest); err != nil {
			return 0, fmt.Errorf("recording the source's cursor in the run archive: %w", err)
		}
		p.etag = etag
		return wait, limited
	}
	for i := len(fresh) - 1; i >= 0; i-- {
		e := fresh[i]
		m, err := p.message(e)
		if err != nil {
			return 0, err
		}
		if err := sink.Deliver(ctx, m); err != nil {
			return 0, &deliverError{id: e.ID, err: err}
		}
		if err := p.cursors.SetCursor(ctx, p.operator, p.name, e.ID); err != nil {
			return 0, fmt.Errorf("recording the source's cursor (event %s) in the run archive: %w", e.ID, err)
		}
	}
	p.etag = etag // only now: a 304 must not hide what was not delivered
	return wait, limited
}

// heard notes an answer from GitHub.
func (p *Poller) heard() {
	p.mu.Lock()
	p.state.Last = p.clock.Now()
	p.mu.Unlock()
}

// page is one answer of the events API.
type page struct {
	notModified  bool
	events       []event
	etag, next   string
	pollInterval time.Duration
	exhausted    error // the rate limit is exhausted after this request
}

// get reads one page of events, with the first page's ETag when first.
// An installation token GitHub refuses is made again once.
func (p *Poller) get(ctx context.Context, u string, first bool) (*page, error) {
	for attempt := 0; ; attempt++ {
		token, err := p.token(ctx)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		req.Header.Set("User-Agent", "opkit")
		req.Header.Set("Authorization", "Bearer "+token)
		if first && p.etag != "" {
			req.Header.Set("If-None-Match", p.etag)
		}
		resp, err := p.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: reading the answer: %w", u, err)
		}
		if resp.StatusCode == http.StatusUnauthorized && p.spec.App != nil && attempt == 0 {
			p.appToken = "" // expired or revoked: make another
			continue
		}
		return p.read(u, resp, body)
	}
}

// read makes a page of an answer, or the error it is.
func (p *Poller) read(u string, resp *http.Response, body []byte) (*page, error) {
	h := resp.Header
	pg := &page{etag: h.Get("ETag"), next: p.nextLink(h.Get("Link"))}
	if s, err := strconv.Atoi(h.Get("X-Poll-Interval")); err == nil && s > 0 {
		pg.pollInterval = seconds(s)
	}
	reset := p.reset(h)
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.Unmarshal(body, &pg.events); err != nil {
			return nil, fmt.Errorf("GET %s: the answer is not a list of events: %w", u, err)
		}
		for i := range pg.events {
			e := &pg.events[i]
			n, err := strconv.ParseInt(e.ID, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("GET %s: event id %q is not a number", u, source.Clip(e.ID, 64))
			}
			// The id as GitHub writes it: "+7" or "007" is event 7, not
			// a delivery id of its own (nor one past 200 characters).
			e.ID, e.seq = strconv.FormatInt(n, 10), n
		}
		if h.Get("X-RateLimit-Remaining") == "0" && !reset.IsZero() {
			pg.exhausted = &rateLimitError{what: "GitHub's rate limit is used up (X-RateLimit-Remaining 0)", until: reset}
		}
		return pg, nil
	case http.StatusNotModified:
		pg.notModified = true
		return pg, nil
	}
	msg := githubMessage(body)
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err == nil && ra >= 0 &&
		(resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests) {
		return nil, &rateLimitError{what: fmt.Sprintf("GitHub's secondary rate limit (%d %s, Retry-After %ds)", resp.StatusCode, msg, ra), until: p.clock.Now().Add(seconds(ra))}
	}
	if (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests) && h.Get("X-RateLimit-Remaining") == "0" && !reset.IsZero() {
		return nil, &rateLimitError{what: fmt.Sprintf("GitHub's rate limit is used up (%d %s)", resp.StatusCode, msg), until: reset}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return nil, &rateLimitError{what: fmt.Sprintf("GitHub's secondary rate limit (429 %s)", msg), until: p.clock.Now().Add(time.Minute)}
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("GET %s: 401 %s: GitHub refuses the credentials: %s", u, msg, p.checkCredentials())
	case http.StatusForbidden:
		return nil, fmt.Errorf("GET %s: 403 %s: the credentials may not read these events: %s", u, msg, p.checkCredentials())
	case http.StatusNotFound:
		return nil, fmt.Errorf("GET %s: 404 %s: check that %s exists, and that the credentials can see it (a private repository is 404 to a token that cannot read it)", u, msg, p.target())
	}
	return nil, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, msg)
}

// seconds is a header's count of seconds, n >= 0, as a Duration: at
// most the longest, some 292 years, where n seconds would overflow one.
func seconds(n int) time.Duration {
	if int64(n) > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}

// reset is X-RateLimit-Reset's time, zero when there is none.
func (p *Poller) reset(h http.Header) time.Time {
	s, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || s <= 0 {
		return time.Time{}
	}
	return time.Unix(s, 0)
}

// target names what is polled.
func (p *Poller) target() string {
	if p.spec.Repository != "" {
		return "the repository " + p.spec.Repository
	}
	return "the organization " + p.spec.Organization
}

// checkCredentials says what to check of the credentials.
func (p *Poller) checkCredentials() string {
	if ref := p.spec.TokenSecretRef; ref != nil {
		return fmt.Sprintf("check the token in Secret %s/%s, key %s (not expired nor revoked, and allowed to read %s's events)", ref.Namespace, ref.Name, ref.Key, p.target())
	}
	a := p.spec.App
	return fmt.Sprintf("check app.appID %d, app.installationID %d and the App's private key in Secret %s/%s, key %s, and that the installation can read %s",
		a.AppID, a.InstallationID, a.PrivateKeySecretRef.Namespace, a.PrivateKeySecretRef.Name, a.PrivateKeySecretRef.Key, p.target())
}

// nextLink is the Link header's rel="next", when it is on the API's host:
// the token is never sent elsewhere.
func (p *Poller) nextLink(link string) string {
	for _, part := range strings.Split(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok || !strings.Contains(params, `rel="next"`) {
			continue
		}
		target = strings.Trim(strings.TrimSpace(target), "<>")
		next, err1 := url.Parse(target)
		api, err2 := url.Parse(p.events)
		if err1 != nil || err2 != nil || next.Scheme != api.Scheme || next.Host != api.Host {
			return ""
		}
		return target
	}
	return ""
}

// githubMessage is the message of GitHub's error body, or its start:
// at most 120 bytes of it.
func githubMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return source.Clip(e.Message, 120)
	}
	return source.Clip(strings.TrimSpace(string(body)), 120)
}
