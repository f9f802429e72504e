package ghpoll_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/githubfake"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/ghpoll"
)

const repo = "packit/deploy-notifier"

var tokenRef = v1alpha1.SecretKeySelector{Namespace: "team-a", Name: "github", Key: "token"}

// clock is real time whose waits are short: it records the wait asked
// for and waits at most 20 ms.
type clock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *clock) Now() time.Time { return time.Now() }

func (c *clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return time.After(min(d, 20*time.Millisecond))
}

// waited reports whether a wait of at least d was asked for.
func (c *clock) waited(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waits {
		if w >= d {
			return true
		}
	}
	return false
}

// sink records the messages delivered; fail, while it returns an error
// for a message, refuses it.
type sink struct {
	mu   sync.Mutex
	got  []source.Message
	fail func(m source.Message) error
}

func (s *sink) Deliver(_ context.Context, m source.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(m); err != nil {
			return err
		}
	}
	s.got = append(s.got, m)
	return nil
}

func (s *sink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.got {
		out = append(out, m.ID)
	}
	return out
}

func (s *sink) messages() []source.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.Message(nil), s.got...)
}

func openArchive(t *testing.T, dir string) archive.Store {
	t.Helper()
	s, err := archive.OpenSQLite(context.Background(), filepath.Join(dir, "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func secrets(values map[string]string) source.Secrets {
	return func(_ context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error) {
		v, ok := values[ref.Namespace+"/"+ref.Name+"/"+ref.Key]
		if !ok {
			return nil, fmt.Errorf("secret %s/%s has no key %s", ref.Namespace, ref.Name, ref.Key)
		}
		return []byte(v), nil
	}
}

type setup struct {
	gh      *githubfake.Server
	cursors source.Cursors
	clock   *clock
	since   string
	token   string
	spec    *v1alpha1.GitHubPollSource
	secrets source.Secrets
}

// start runs a poller of the setup until the test ends or stop is called.
func (s setup) start(t *testing.T, snk source.Sink) (p *ghpoll.Poller, stop func()) {
	t.Helper()
	spec := s.spec
	if spec == nil {
		spec = &v1alpha1.GitHubPollSource{Repository: repo, TokenSecretRef: &tokenRef, APIURL: s.gh.URL, Since: s.since}
	}
	sec := s.secrets
	if sec == nil {
		tok := s.token
		if tok == "" {
			tok = s.gh.Token()
		}
		sec = secrets(map[string]string{"team-a/github/token": tok + "\n"})
	}
	p, err := ghpoll.New(spec, 10*time.Second, "notifier", "github", sec, s.cursors, ghpoll.WithClock(s.clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, snk) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v when its context ended, want nil", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return 30s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// eventually fails the test unless cond holds within 30 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newSetup(t *testing.T, since string) setup {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateOrg("packit")
	gh.CreateRepo(repo)
	return setup{gh: gh, cursors: openArchive(t, t.TempDir()), clock: &clock{}, since: since}
}

// eventIDs are the ids of a repository's events, oldest first.
func eventIDs(gh *githubfake.Server) []string {
	var out []string
	events := gh.Events(repo)
	for i := len(events) - 1; i >= 0; i-- {
		out = append(out, events[i].ID)
	}
	return out
}

func TestEventsAreDeliveredOnceOldestFirstAsTheWebhookDeliversThem(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	n := s.gh.OpenIssue(repo, "alice", "Deploy please")
	c := s.gh.Comment(repo, n, "bob", "/deploy")
	var snk sink
	s.start(t, &snk)
	want := eventIDs(s.gh)
	eventually(t, "the 3 events delivered", func() bool { return len(snk.ids()) >= 3 })
	// Idle polls: conditional, answered 304, delivering nothing again.
	eventually(t, "a conditional request answered 304", func() bool {
		for _, call := range s.gh.Calls() {
			if call.Status == 304 && call.IfNoneMatch != "" {
				return true
			}
		}
		return false
	})
	if got := strings.Join(snk.ids(), ","); got != strings.Join(want, ",") {
		t.Fatalf("delivered %s, want %s: each once, oldest first", got, strings.Join(want, ","))
	}
	m := snk.messages()[2]
	if m.Event != "issue_comment" || m.Headers["x-github-event"] != "issue_comment" || m.Headers["x-github-delivery"] != m.ID {
		t.Errorf("message %+v: want event issue_comment, and its id as x-github-delivery", m)
	}
	if m.Published.IsZero() {
		t.Error("Published is zero; want the event's created_at")
	}
	var body map[string]any
	if err := json.Unmarshal(m.Body, &body); err != nil {
		t.Fatal(err)
	}
	// The webhook's payload for the same comment has these, equal.
	hook := s.gh.IssueCommentEvent(c)
	for _, k := range []string{"action", "comment", "issue"} {
		w, _ := json.Marshal(hook[k])
		g, _ := json.Marshal(body[k])
		if string(w) != string(g) {
			t.Errorf("body's %s: %s, want the webhook's %s", k, g, w)
		}
	}
	r, _ := body["repository"].(map[string]any)
	snd, _ := body["sender"].(map[string]any)
	org, _ := body["organization"].(map[string]any)
	if r["full_name"] != repo || r["name"] != "deploy-notifier" || snd["login"] != "bob" || org["login"] != "packit" {
		t.Errorf("body's repository %v, sender %v, organization %v: want %s, bob and packit as the webhook has them", r, snd, org, repo)
	}
	wantRepo := s.gh.IssueCommentEvent(c)["repository"].(map[string]any)
	if r["id"] != float64(wantRepo["id"].(int64)) {
		t.Errorf("repository id %v, want the webhook's %v", r["id"], wantRepo["id"])
	}

	// A new comment is delivered once, after the others.
	s.gh.Comment(repo, n, "carol", "/deploy again")
	eventually(t, "the new comment delivered", func() bool { return len(snk.ids()) >= 4 })
	time.Sleep(100 * time.Millisecond) // a few more polls: none delivers it again
	if got, want := strings.Join(snk.ids(), ","), strings.Join(eventIDs(s.gh), ","); got != want {
		t.Errorf("delivered %s, want %s", got, want)
	}
}

func TestXPollIntervalLengthensTheWait(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceNow)
	s.gh.SetPollInterval(120)
	var snk sink
	p, _ := s.start(t, &snk)
	eventually(t, "a wait of X-Poll-Interval's 120s", func() bool { return s.clock.waited(120 * time.Second) })
	if s.clock.waited(121 * time.Second) {
		t.Error("a wait longer than X-Poll-Interval's 120s")
	}
	if st := p.State(); !st.Connected || st.Err != nil || st.Lag != -1 || st.Last.IsZero() {
		t.Errorf("state %+v: want connected, no error, lag -1, last set", st)
	}
}

func TestSinceNowStartsAtTheNewestEventAndAllDeliversEveryOne(t *testing.T) {
	for _, since := range []string{v1alpha1.SinceNow, v1alpha1.SinceAll} {
		t.Run(since, func(t *testing.T) {
			s := newSetup(t, since)
			n := s.gh.OpenIssue(repo, "alice", "Old")
			s.gh.Comment(repo, n, "bob", "old")
			before := eventIDs(s.gh)
			var snk sink
			s.start(t, &snk)
			eventually(t, "the cursor set", func() bool {
				c, _ := s.cursors.Cursor(context.Background(), "notifier", "github")
				return c != ""
			})
			s.gh.Comment(repo, n, "carol", "new")
			all := eventIDs(s.gh)
			want := all[len(before):]
			if since == v1alpha1.SinceAll {
				want = all
			}
			eventually(t, "the new comment delivered", func() bool { return len(snk.ids()) >= len(want) })
			time.Sleep(50 * time.Millisecond)
			if got := strings.Join(snk.ids(), ","); got != strings.Join(want, ",") {
				t.Errorf("since %s delivered %s, want %s", since, got, strings.Join(want, ","))
			}
		})
	}
}

func TestSinceNowWithNoEventsYetDeliversTheFirstOne(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo("packit/empty")
	s := setup{gh: gh, cursors: openArchive(t, t.TempDir()), clock: &clock{}}
	s.spec = &v1alpha1.GitHubPollSource{Organization: "packit", TokenSecretRef: &tokenRef, APIURL: gh.URL}
	gh.CreateOrg("packit") // after the repository's creation: its event has no org
	var snk sink
	s.start(t, &snk)
	eventually(t, "the cursor set to 0", func() bool {
		c, _ := s.cursors.Cursor(context.Background(), "notifier", "github")
		return c == "0"
	})
	gh.CreateRepo("packit/second")
	eventually(t, "the second repository's creation delivered", func() bool { return len(snk.ids()) == 1 })
	if m := snk.messages()[0]; m.Event != "create" {
		t.Errorf("delivered %s, want create", m.Event)
	}
}

func TestARestartNeitherMissesNorRepeatsAnEvent(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	n := s.gh.OpenIssue(repo, "alice", "Deploys")
	s.gh.Comment(repo, n, "bob", "one")
	var snk sink
	_, stop := s.start(t, &snk)
	eventually(t, "the first events delivered", func() bool { return len(snk.ids()) == len(eventIDs(s.gh)) })
	stop()
	// While the engine is down, more than a page of events.
	for i := range 45 {
		s.gh.Comment(repo, n, "bob", "while down "+strconv.Itoa(i))
	}
	s.start(t, &snk) // a new poller, the same archive
	want := eventIDs(s.gh)
	eventually(t, "the events made while down delivered", func() bool { return len(snk.ids()) >= len(want) })
	time.Sleep(100 * time.Millisecond)
	if got := strings.Join(snk.ids(), ","); got != strings.Join(want, ",") {
		t.Errorf("delivered %s\nwant      %s", got, strings.Join(want, ","))
	}
}

func TestPaginationDeliversMoreThanAPageOldestFirst(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	n := s.gh.OpenIssue(repo, "alice", "Busy")
	for i := range 70 {
		s.gh.Comment(repo, n, "bob", "c"+strconv.Itoa(i))
	}
	var snk sink
	s.start(t, &snk)
	want := eventIDs(s.gh)
	eventually(t, "every event delivered", func() bool { return len(snk.ids()) >= len(want) })
	if got := strings.Join(snk.ids(), ","); got != strings.Join(want, ",") {
		t.Errorf("delivered %s\nwant      %s", got, strings.Join(want, ","))
	}
	pages := 0
	for _, c := range s.gh.Calls() {
		if strings.Contains(c.Query, "page=") {
			pages++
		}
	}
	if pages < 2 {
		t.Errorf("%d requests of a next page, want at least 2 for %d events", pages, len(want))
	}
}

func TestADeliverErrorDeliversTheSameEventAgainAndHoldsTheCursor(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	n := s.gh.OpenIssue(repo, "alice", "Flaky")
	s.gh.Comment(repo, n, "bob", "first")
	s.gh.Comment(repo, n, "bob", "second")
	ids := eventIDs(s.gh)
	bad := ids[2] // the first comment
	failures := 0
	var cursorAtFailure []string
	snk := &sink{}
	snk.fail = func(m source.Message) error {
		if m.ID == bad && failures < 2 {
			failures++
			c, _ := s.cursors.Cursor(context.Background(), "notifier", "github")
			cursorAtFailure = append(cursorAtFailure, c)
			return errors.New("archive full")
		}
		return nil
	}
	p, _ := s.start(t, snk)
	eventually(t, "a state saying the delivery failed", func() bool {
		st := p.State()
		return st.Err != nil && strings.Contains(st.Err.Error(), "event "+bad+" not recorded") && !st.RetryAt.IsZero()
	})
	eventually(t, "every event delivered after the failures", func() bool { return len(snk.ids()) >= len(ids) })
	if got := strings.Join(snk.ids(), ","); got != strings.Join(ids, ",") {
		t.Errorf("delivered %s, want %s: the failed event again, and none after it before it", got, strings.Join(ids, ","))
	}
	for _, c := range cursorAtFailure {
		if c != ids[1] {
			t.Errorf("cursor %s while event %s failed, want %s: the cursor does not pass an event not delivered", c, bad, ids[1])
		}
	}
	eventually(t, "the cursor at the newest", func() bool {
		c, _ := s.cursors.Cursor(context.Background(), "notifier", "github")
		return c == ids[len(ids)-1]
	})
}

func TestABadTokenSays401AndWhatToCheck(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	s.token = "ghp_revoked"
	var snk sink
	p, _ := s.start(t, &snk)
	eventually(t, "a state saying 401", func() bool { return p.State().Err != nil })
	st := p.State()
	if msg := st.Err.Error(); !strings.Contains(msg, "401 Bad credentials") || !strings.Contains(msg, "Secret team-a/github, key token") || st.Connected || st.RetryAt.IsZero() {
		t.Errorf("state %+v: want 401 Bad credentials naming the token's Secret and key, not connected, a retry", st)
	}
	if len(snk.ids()) != 0 {
		t.Errorf("delivered %v with a bad token", snk.ids())
	}
}

func TestAnExhaustedRateLimitIsWaitedOutUntilItsReset(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	s.gh.SetRateLimit(0, reset)
	var snk sink
	p, _ := s.start(t, &snk)
	eventually(t, "a state saying the rate limit is used up", func() bool { return p.State().Err != nil })
	st := p.State()
	if msg := st.Err.Error(); !strings.Contains(msg, "rate limit") || !strings.Contains(msg, "until "+reset.UTC().Format(time.RFC3339)) {
		t.Errorf("state error %q: want it to say the rate limit is used up until %s", msg, reset.UTC().Format(time.RFC3339))
	}
	if !st.RetryAt.Equal(reset) && st.RetryAt.Before(reset.Add(-time.Second)) {
		t.Errorf("retry at %s, want the reset %s", st.RetryAt, reset)
	}
	eventually(t, "a wait until the reset", func() bool { return s.clock.waited(59 * time.Minute) })
}

func TestASecondaryRateLimitWaitsRetryAfter(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceAll)
	s.gh.Inject(githubfake.Fault{Path: "/repos/*/*/events", Status: 403, Header: map[string]string{"Retry-After": "90"}})
	var snk sink
	s.start(t, &snk)
	eventually(t, "a wait of Retry-After's 90s", func() bool { return s.clock.waited(89 * time.Second) })
	eventually(t, "the events delivered after it", func() bool { return len(snk.ids()) == len(eventIDs(s.gh)) })
}

func TestAGitHubAppPollsWithAnInstallationTokenMadeAgainWhenRefused(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	gh := githubfake.New(t, githubfake.Options{App: &githubfake.App{ID: 1234, InstallationID: 5678, Key: &key.PublicKey}})
	gh.CreateRepo(repo)
	n := gh.OpenIssue(repo, "alice", "App")
	keyRef := v1alpha1.SecretKeySelector{Namespace: "team-a", Name: "github-app", Key: "private-key.pem"}
	s := setup{gh: gh, cursors: openArchive(t, t.TempDir()), clock: &clock{},
		spec: &v1alpha1.GitHubPollSource{Repository: repo, APIURL: gh.URL, Since: v1alpha1.SinceAll,
			App: &v1alpha1.GitHubApp{AppID: 1234, InstallationID: 5678, PrivateKeySecretRef: keyRef}},
		secrets: secrets(map[string]string{"team-a/github-app/private-key.pem": string(pemKey)}),
	}
	var snk sink
	s.start(t, &snk)
	eventually(t, "the events delivered", func() bool { return len(snk.ids()) == 2 })
	if got := gh.InstallationTokens(); got != 1 {
		t.Errorf("%d installation tokens made, want 1, kept across polls", got)
	}
	gh.ExpireInstallationTokens()
	gh.Comment(repo, n, "bob", "after expiry")
	eventually(t, "the comment delivered with a new token", func() bool { return len(snk.ids()) == 3 })
	if got := gh.InstallationTokens(); got != 2 {
		t.Errorf("%d installation tokens made, want 2", got)
	}
}

func TestAWrongAppKeySaysWhatToCheck(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	gh := githubfake.New(t, githubfake.Options{App: &githubfake.App{ID: 1234, InstallationID: 5678, Key: &key.PublicKey}})
	gh.CreateRepo(repo)
	keyRef := v1alpha1.SecretKeySelector{Namespace: "team-a", Name: "github-app", Key: "key"}
	s := setup{gh: gh, cursors: openArchive(t, t.TempDir()), clock: &clock{},
		spec: &v1alpha1.GitHubPollSource{Repository: repo, APIURL: gh.URL,
			App: &v1alpha1.GitHubApp{AppID: 1234, InstallationID: 5678, PrivateKeySecretRef: keyRef}},
		secrets: secrets(map[string]string{"team-a/github-app/key": string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)}))}),
	}
	var snk sink
	p, _ := s.start(t, &snk)
	eventually(t, "a state saying no token is made", func() bool { return p.State().Err != nil })
	if msg := p.State().Err.Error(); !strings.Contains(msg, "401") || !strings.Contains(msg, "private key in Secret team-a/github-app, key key") {
		t.Errorf("state error %q: want the 401 and the private key's Secret to check", msg)
	}
}

func TestWebhookEventNames(t *testing.T) {
	for typ, want := range map[string]string{
		"IssueCommentEvent": "issue_comment", "PullRequestReviewCommentEvent": "pull_request_review_comment",
		"PushEvent": "push", "GollumEvent": "gollum", "SecurityAdvisoryEvent": "security_advisory", "MergeQueueEntryEvent": "merge_queue_entry",
	} {
		if got := ghpoll.WebhookEvent(typ); got != want {
			t.Errorf("WebhookEvent(%s) = %s, want %s", typ, got, want)
		}
	}
}

func TestNewRefusesASpecItCanNeverPoll(t *testing.T) {
	for _, c := range []struct {
		spec v1alpha1.GitHubPollSource
		want string
	}{
		{v1alpha1.GitHubPollSource{TokenSecretRef: &tokenRef}, "exactly one of repository and organization"},
		{v1alpha1.GitHubPollSource{Repository: "nope", TokenSecretRef: &tokenRef}, `"nope" is not owner/name`},
		{v1alpha1.GitHubPollSource{Repository: repo}, "exactly one of tokenSecretRef and app"},
		{v1alpha1.GitHubPollSource{Repository: repo, TokenSecretRef: &tokenRef, APIURL: "ftp://x"}, "not an http(s) URL"},
	} {
		if _, err := ghpoll.New(&c.spec, time.Minute, "op", "gh", nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}

// TestEventIDsCompareAsNumbers: the fake's first event is 9999999997 and
// the next 10000000004, smaller as a string.
func TestEventIDsCompareAsNumbers(t *testing.T) {
	s := newSetup(t, v1alpha1.SinceNow)
	var snk sink
	s.start(t, &snk)
	eventually(t, "the cursor at the repository's creation", func() bool {
		c, _ := s.cursors.Cursor(context.Background(), "notifier", "github")
		return c == "9999999997"
	})
	n := s.gh.OpenIssue(repo, "alice", "Ten digits, then eleven")
	eventually(t, "the issue's event delivered", func() bool { return len(snk.ids()) == 1 })
	if got := snk.ids()[0]; got != eventIDs(s.gh)[1] || n != 1 {
		t.Errorf("delivered %s, want %s", got, eventIDs(s.gh)[1])
	}
}
