package ghpoll

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/source/sourcetest"
)

// fuzzBound is the longest one input may take to read.
const fuzzBound = 2 * time.Second

// fixedClock is a poller's time that stands still.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                       { return c.now }
func (c fixedClock) After(time.Duration) <-chan time.Time { return nil }

// FuzzEventsAnswer: an answer of GitHub's events API to a poll (its
// status, its header block of Name: value lines, and its body), read as
// Poller.get reads it (Poller.read), and each event of the page made a
// message (Poller.message) that the sink decodes. An answer that is not
// a page of events is an error naming the request and what is wrong, or
// a rate limit; a page's events have numeric ids, its next page is on
// GitHub's API host only; each event's message is the webhook's
// delivery of it, with the event's id (at most 200 printable
// characters), its webhook name, and a body that is a JSON object with
// the payload's members, or an error naming the event.
func FuzzEventsAnswer(f *testing.F) {
	watch := `{"id":"22249084947","type":"WatchEvent","actor":{"id":583231,"login":"octocat","display_login":"octocat","gravatar_id":"",` +
		`"url":"https://api.github.com/users/octocat","avatar_url":"https://avatars.githubusercontent.com/u/583231?"},` +
		`"repo":{"id":1296269,"name":"octocat/Hello-World","url":"https://api.github.com/repos/octocat/Hello-World"},` +
		`"payload":{"action":"started"},"public":true,"created_at":"2022-06-09T12:47:28Z"}`
	push := `{"id":"22237752260","type":"PushEvent","actor":{"id":583231,"login":"octocat","url":"https://api.github.com/users/octocat",` +
		`"avatar_url":"https://avatars.githubusercontent.com/u/583231?"},"repo":{"id":1296269,"name":"octocat/Hello-World",` +
		`"url":"https://api.github.com/repos/octocat/Hello-World"},"payload":{"repository_id":1296269,"push_id":10115855396,"size":1,` +
		`"distinct_size":1,"ref":"refs/heads/master","head":"7a8f3ac80e2ad2f6842cb86f576d4bfe2c03e300",` +
		`"before":"883efe034920928c47fe18598c01249d1a9fdabd","commits":[{"sha":"7a8f3ac80e2ad2f6842cb86f576d4bfe2c03e300",` +
		`"author":{"email":"octocat@github.com","name":"Monalisa Octocat"},"message":"commit","distinct":true,` +
		`"url":"https://api.github.com/repos/octocat/Hello-World/commits/7a8f3ac80e2ad2f6842cb86f576d4bfe2c03e300"}]},` +
		`"public":true,"created_at":"2022-06-08T23:29:25Z","org":{"id":9919,"login":"github","gravatar_id":"",` +
		`"url":"https://api.github.com/orgs/github","avatar_url":"https://avatars.githubusercontent.com/u/9919?"}}`
	comment := `{"id":"22237752261","type":"IssueCommentEvent","actor":{"id":1,"login":"ann"},"repo":{"id":7,"name":"packit/deploy-notifier"},` +
		`"payload":{"action":"created","issue":{"number":7,"title":"Deploy"},"comment":{"id":1,"body":"/deploy api 1.4.2","user":{"login":"ann"}}},` +
		`"public":false,"created_at":"2025-01-02T03:04:05Z"}`
	pr := `{"id":"22237752262","type":"PullRequestEvent","actor":{"id":1,"login":"ann"},"repo":{"id":7,"name":"packit/deploy-notifier"},` +
		`"payload":{"action":"opened","number":2,"pull_request":{"id":279147437,"number":2,"state":"open","title":"Update the README",` +
		`"head":{"ref":"changes","sha":"34c5c7793cb3b279e22454cb6750c80560547b3a"},"base":{"ref":"main"}}},"public":false,"created_at":"2025-01-02T03:04:06Z"}`
	ok := "Content-Type: application/json; charset=utf-8\r\nETag: W/\"a18c3bded88eb5dbb5c849a489412bf3\"\r\nX-Poll-Interval: 60\r\n" +
		"X-RateLimit-Limit: 5000\r\nX-RateLimit-Remaining: 4987\r\nX-RateLimit-Reset: 1735787045\r\nX-RateLimit-Used: 13\r\nX-RateLimit-Resource: core\r\n" +
		"X-GitHub-Media-Type: github.v3; format=json\r\nX-GitHub-Request-Id: CF3A:1D5B:2E4F6A:2F1B3C:677612A5\r\n"
	next := "Link: <https://api.github.com/repositories/1296269/events?page=2>; rel=\"next\", <https://api.github.com/repositories/1296269/events?page=10>; rel=\"last\"\r\n"
	for _, c := range []struct {
		status uint16
		block  string
		body   string
	}{
		{200, ok, "[" + watch + "," + push + "," + comment + "," + pr + "]"},
		{200, ok + next, "[" + push + "]"},
		{200, ok + "Link: <https://evil.example/events?page=2>; rel=\"next\"\r\n", "[" + watch + "]"},
		{200, ok, `[]`},
		{200, strings.Replace(ok, "4987", "0", 1) + next, "[" + comment + "]"},
		{304, "ETag: W/\"a18c3bded88eb5dbb5c849a489412bf3\"\r\nX-Poll-Interval: 60\r\n", ``},
		// Errors, as GitHub answers them.
		{401, "Content-Type: application/json\r\n", `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`},
		{403, strings.Replace(ok, "4987", "0", 1), `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}`},
		{403, "Retry-After: 60\r\n", `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`},
		{429, "", `{"message":"too many"}`},
		{429, "Retry-After: 10000000000\r\n", `{"message":"too many"}`},
		{200, "X-Poll-Interval: 10000000000\r\n", `[]`},
		{403, "", `{"message":"` + strings.Repeat("Forbidden by the proxy. ", 100) + `"}`},
		{200, ok, `[{"id":"` + strings.Repeat("22249084947", 100) + `x","type":"WatchEvent"}]`},
		{404, "", `{"message":"Not Found","documentation_url":"https://docs.github.com/rest/activity/events#list-repository-events"}`},
		{502, "", "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		// Odd pages: ids not numbers or too long, payloads that are no
		// objects, deep, huge numbers, duplicate keys, invalid UTF-8.
		{200, ok, `[{"id":"abc","type":"PushEvent"}]`},
		{200, ok, `[{"id":12,"type":"PushEvent"}]`},
		{200, ok, `[{"id":"+12","type":"PushEvent","payload":null}]`},
		{200, ok, `[{"id":"` + strings.Repeat("0", 300) + `1","type":"WatchEvent","payload":{}}]`},
		{200, ok, `[{"id":"13","type":"CreateEvent","payload":[1,2]}]`},
		{200, ok, `[{"id":"14","type":"Some Weird/Type","payload":{"a":` + strings.Repeat("[", 101) + strings.Repeat("]", 101) + `}}]`},
		{200, ok, `[{"id":"15","type":"PushEvent","payload":{"size":1e400,"head":"x","after":"y","after":"z"},"repo":{"name":5},"org":"o"}]`},
		{200, ok, "[{\"id\":\"16\",\"type\":\"\xff\",\"actor\":{\"login\":\"\xfe\"},\"payload\":{\"\xc3\":\"\xff\"},\"created_at\":\"2022-06-09T12:47:28Z\"}]"},
		{200, ok, `[{"id":"17","created_at":"yesterday"}]`},
		{200, ok, `{"message":"not a list"}`},
		{200, ok, ``},
	} {
		f.Add(c.status, c.block, []byte(c.body))
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	p, err := New(&v1alpha1.GitHubPollSource{Repository: "packit/deploy-notifier", Since: v1alpha1.SinceAll,
		TokenSecretRef: &v1alpha1.SecretKeySelector{Namespace: "team-a", Name: "github", Key: "token"}},
		time.Minute, "notifier", "github", nil, nil, WithClock(fixedClock{now}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status uint16, block string, body []byte) {
		code := int(status)
		if code < 200 || code > 599 {
			code = http.StatusOK
		}
		mh, err := textproto.NewReader(bufio.NewReader(strings.NewReader(strings.TrimRight(block, "\r\n") + "\r\n\r\n"))).ReadMIMEHeader()
		if err != nil && block != "" {
			return // no answer the client reads
		}
		if len(body) > maxBody {
			body = body[:maxBody]
		}
		resp := &http.Response{StatusCode: code, Header: http.Header(mh)}
		var pg *page
		fuzzcheck.Within(t, "read", fuzzBound, func() { pg, err = p.read(p.events, resp, body) })

		if err != nil {
			msg := err.Error()
			var limited *rateLimitError
			switch {
			case pg != nil:
				t.Fatalf("both a page and the error %v", err)
			case !utf8.ValidString(msg) || len(msg) > 1024:
				t.Errorf("an error of %d bytes, or not UTF-8: %.300q", len(msg), msg)
			case errors.As(err, &limited):
				if !strings.Contains(msg, "rate limit") || (strings.Contains(msg, "secondary") && limited.until.Before(now)) {
					t.Errorf("rate limited until %s (now %s): %q", limited.until, now, msg)
				}
			case !strings.HasPrefix(msg, "GET "+p.events+": ") || len(msg) == len("GET "+p.events+": "):
				t.Errorf("the error %q does not say which request failed and why", msg)
			case code == http.StatusOK && !strings.Contains(msg, "event"):
				t.Errorf("a 200 answer refused with %q, which does not name the events", msg)
			}
			return
		}
		switch {
		case code != http.StatusOK && code != http.StatusNotModified:
			t.Fatalf("a %d answer read as a page", code)
		case pg.notModified != (code == http.StatusNotModified) || (pg.notModified && len(pg.events) > 0):
			t.Fatalf("a %d answer: not modified %v, %d events", code, pg.notModified, len(pg.events))
		case pg.pollInterval < 0:
			t.Errorf("X-Poll-Interval %q read as %s", resp.Header.Get("X-Poll-Interval"), pg.pollInterval)
		case pg.exhausted != nil && resp.Header.Get("X-RateLimit-Remaining") != "0":
			t.Errorf("rate limited with X-RateLimit-Remaining %q", resp.Header.Get("X-RateLimit-Remaining"))
		}
		if s, err := strconv.Atoi(resp.Header.Get("X-Poll-Interval")); err == nil && s > 0 && s < 1<<20 && pg.pollInterval != time.Duration(s)*time.Second {
			t.Errorf("X-Poll-Interval %d read as %s", s, pg.pollInterval)
		}
		// The token is sent to GitHub's API host only.
		if pg.next != "" {
			req, err := http.NewRequest(http.MethodGet, pg.next, nil)
			if err != nil || req.URL.Scheme != "https" || req.URL.Host != "api.github.com" {
				t.Errorf("the next page %q is not on https://api.github.com (%v)", pg.next, err)
			}
		}
		for _, e := range pg.events {
			if n, err := strconv.ParseInt(e.ID, 10, 64); err != nil || n != e.seq || n < 0 || e.ID != strconv.FormatInt(n, 10) {
				t.Errorf("event id %q read as %d (%v)", e.ID, e.seq, err)
			}
			var m source.Message
			fuzzcheck.Within(t, "message", fuzzBound, func() { m, err = p.message(e) })
			if err != nil {
				if msg := err.Error(); !strings.Contains(msg, "event "+e.ID) || !strings.Contains(msg, "payload") || !utf8.ValidString(msg) || len(msg) > 1024 {
					t.Errorf("event %q refused as %.300q: want a short error naming the event and its payload", e.ID, msg)
				}
				continue
			}
			checkMessage(t, p, e, m)
		}
	})
}

// checkMessage checks the message of an event: the webhook's delivery of
// it, as the package doc says.
func checkMessage(t *testing.T, p *Poller, e event, m source.Message) {
	t.Helper()
	name := WebhookEvent(e.Type)
	switch {
	case m.ID != e.ID || !fuzzcheck.PrintableID(m.ID):
		t.Errorf("event %q: the message's ID %q is not the event's id of 1-200 printable characters", e.ID, m.ID)
	case m.Event != name || m.Headers["x-github-event"] != name || m.Headers["x-github-delivery"] != m.ID || len(m.Headers) != 2:
		t.Errorf("event %q of type %q: event %q, headers %q", e.ID, e.Type, m.Event, m.Headers)
	case !m.Published.Equal(e.CreatedAt):
		t.Errorf("event %q: published %s, created %s", e.ID, m.Published, e.CreatedAt)
	}
	// The body is a JSON object: the payload's members, and the event's
	// repository, actor and organization where the payload has none.
	var body, payload map[string]json.RawMessage
	if len(e.Payload) > 0 && string(e.Payload) != "null" && json.Unmarshal(e.Payload, &payload) != nil {
		// A payload that is not an object is delivered as it came.
		if !bytes.Equal(m.Body, e.Payload) {
			t.Errorf("event %q: a payload not an object, %.100q, delivered as %.100q", e.ID, e.Payload, m.Body)
		}
		return
	}
	if err := json.Unmarshal(m.Body, &body); err != nil || body == nil {
		t.Fatalf("event %q: the body %.200q is not a JSON object: %v", e.ID, m.Body, err)
	}
	_ = json.Unmarshal(e.Payload, &payload)
	for k, v := range payload {
		var want, got bytes.Buffer
		_ = json.Compact(&want, v)
		_ = json.Compact(&got, body[k])
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			t.Errorf("event %q: the payload's %q is %.100q, the body's %.100q", e.ID, k, want.Bytes(), got.Bytes())
		}
	}
	var repo struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(e.Repo, &repo) == nil && repo.Name != "" && payload["repository"] == nil {
		var r struct {
			FullName string `json:"full_name"`
			HTMLURL  string `json:"html_url"`
		}
		if err := json.Unmarshal(body["repository"], &r); err != nil || r.FullName != repo.Name || r.HTMLURL != p.html+"/"+repo.Name {
			t.Errorf("event %q of repository %q: the body's repository is %.200q", e.ID, repo.Name, body["repository"])
		}
	}
	if e.Type == "PushEvent" && payload["head"] != nil && payload["after"] == nil && !bytes.Equal(body["after"], body["head"]) {
		t.Errorf("push %q: after %q, head %q", e.ID, body["after"], body["head"])
	}
	if u, err := url.Parse(p.html); err != nil || u.Host != "github.com" {
		t.Fatalf("the web's URL %q", p.html)
	}
	sourcetest.CheckBody(t, m.Body)
}

// TestAPayloadNotAnObjectIsDeliveredAsItCame: an event whose payload is
// not a JSON object (GitHub's are) is delivered as it came, so that it
// holds back none of the events after it.
func TestAPayloadNotAnObjectIsDeliveredAsItCame(t *testing.T) {
	p, err := New(&v1alpha1.GitHubPollSource{Repository: "packit/deploy-notifier", Since: v1alpha1.SinceAll,
		TokenSecretRef: &v1alpha1.SecretKeySelector{Namespace: "team-a", Name: "github", Key: "token"}},
		time.Minute, "notifier", "github", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{`[1,2]`, `"push"`, `7`} {
		e := event{ID: "41", Type: "PushEvent", Payload: json.RawMessage(payload)}
		m, err := p.message(e)
		if err != nil {
			t.Fatalf("payload %s: %v; want it delivered as it came", payload, err)
		}
		if string(m.Body) != payload || m.ID != "41" || m.Event != "push" {
			t.Errorf("payload %s: delivered as %+v", payload, m)
		}
	}
}
