package githubfake_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

type listedEvent struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Actor   map[string]any `json:"actor"`
	Repo    map[string]any `json:"repo"`
	Org     map[string]any `json:"org"`
	Payload map[string]any `json:"payload"`
	Public  bool           `json:"public"`
	Created string         `json:"created_at"`
}

func getEvents(t *testing.T, gh *githubfake.Server, url, etag string) (int, http.Header, []listedEvent) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gh.Token())
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []listedEvent
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, resp.Header, out
}

func TestEventsAreListedNewestFirstWithTheWebhooksPayload(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateOrg("packit")
	gh.CreateRepo(repo)
	n := gh.OpenIssue(repo, "alice", "It breaks")
	gh.Comment(repo, n, "bob", "/deploy")
	status, h, got := getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", "")
	if status != http.StatusOK || len(got) != 3 {
		t.Fatalf("status %d, %d events; want 200 and 3 (create, issue, comment)", status, len(got))
	}
	if types := []string{got[0].Type, got[1].Type, got[2].Type}; !reflect.DeepEqual(types, []string{"IssueCommentEvent", "IssuesEvent", "CreateEvent"}) {
		t.Errorf("types %v, want newest first", types)
	}
	a, _ := strconv.ParseInt(got[1].ID, 10, 64)
	b, _ := strconv.ParseInt(got[0].ID, 10, 64)
	if b <= a {
		t.Errorf("ids %s then %s: a newer event has a larger id", got[1].ID, got[0].ID)
	}
	c := got[0]
	if c.Actor["login"] != "bob" || c.Repo["name"] != repo || c.Org["login"] != "packit" || !c.Public || c.Created == "" {
		t.Errorf("comment event %+v: want actor bob, repo %s, org packit, public, created_at", c, repo)
	}
	if h.Get("X-Poll-Interval") != "60" || h.Get("ETag") == "" {
		t.Errorf("X-Poll-Interval %q, ETag %q; want 60 and an ETag", h.Get("X-Poll-Interval"), h.Get("ETag"))
	}
	// The webhook's issue_comment payload is the event's payload with the
	// repository, the sender and the organization.
	events := gh.Events(repo)
	name, hook := gh.Webhook(events[0])
	if name != "issue_comment" {
		t.Errorf("webhook event %q, want issue_comment", name)
	}
	want := gh.IssueCommentEvent(gh.Comments(repo, n)[0])
	for _, k := range []string{"action", "comment", "issue", "repository", "sender"} {
		wj, _ := json.Marshal(want[k])
		gj, _ := json.Marshal(hook[k])
		if string(wj) != string(gj) {
			t.Errorf("webhook payload's %s: %s, want %s (IssueCommentEvent's)", k, gj, wj)
		}
	}
	for _, k := range []string{"repository", "sender", "organization"} {
		if _, ok := c.Payload[k]; ok {
			t.Errorf("the event's payload has %s; GitHub's has it at the top only", k)
		}
	}
	if _, _, org := getEvents(t, gh, gh.URL+"/orgs/packit/events", ""); len(org) != 3 {
		t.Errorf("the organization lists %d events, want 3", len(org))
	}
}

func TestEventsPaginateUpTo300AndAnUnchangedPageIs304ForFree(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	n := gh.OpenIssue(repo, "alice", "Many")
	for i := range 320 {
		gh.AddEvent(repo, "WatchEvent", "fan"+strconv.Itoa(i), map[string]any{"action": "started"})
	}
	gh.Comment(repo, n, "bob", "newest")
	url := gh.URL + "/repos/" + repo + "/events"
	var all []listedEvent
	for pages := 0; url != ""; pages++ {
		if pages > 20 {
			t.Fatal("more than 20 pages")
		}
		status, h, got := getEvents(t, gh, url, "")
		if status != http.StatusOK || len(got) > 30 {
			t.Fatalf("status %d, %d events on a page; want 200 and at most 30", status, len(got))
		}
		all = append(all, got...)
		url = ""
		for _, l := range strings.Split(h.Get("Link"), ",") {
			if strings.Contains(l, `rel="next"`) {
				url = strings.Trim(strings.TrimSpace(strings.Split(l, ";")[0]), "<>")
			}
		}
	}
	if len(all) != 300 || all[0].Type != "IssueCommentEvent" {
		t.Fatalf("%d events listed, the first %s; want the 300 newest, the comment first", len(all), all[0].Type)
	}
	_, h, _ := getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", "")
	before := gh.RateRemaining()
	status, h2, _ := getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", h.Get("ETag"))
	if status != http.StatusNotModified || gh.RateRemaining() != before || h2.Get("X-RateLimit-Remaining") != strconv.Itoa(before) {
		t.Errorf("conditional request: %d, remaining %d -> %d (header %s); want 304 and no request counted", status, before, gh.RateRemaining(), h2.Get("X-RateLimit-Remaining"))
	}
	gh.Comment(repo, n, "bob", "another")
	if status, _, _ := getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", h.Get("ETag")); status != http.StatusOK {
		t.Errorf("conditional request after a new event: %d, want 200", status)
	}
}

func TestAnExhaustedRateLimitIs403UntilReset(t *testing.T) {
	gh := githubfake.New(t, githubfake.Options{})
	gh.CreateRepo(repo)
	reset := time.Now().Add(2 * time.Second)
	gh.SetRateLimit(0, reset)
	status, h, _ := getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", "")
	if status != http.StatusForbidden || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset") != strconv.FormatInt(reset.Unix(), 10) {
		t.Fatalf("status %d, remaining %q, reset %q; want 403, 0, %d", status, h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), reset.Unix())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, _, _ = getEvents(t, gh, gh.URL+"/repos/"+repo+"/events", ""); status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d 30s after the reset", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
