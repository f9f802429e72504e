package ghpoll

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/opkit-dev/opkit/internal/source"
)

// webhookNames are the webhook's names of the events API's types whose
// snake_case is not theirs, or that are common enough to name.
var webhookNames = map[string]string{
	"IssueCommentEvent":             "issue_comment",
	"PullRequestEvent":              "pull_request",
	"PushEvent":                     "push",
	"CreateEvent":                   "create",
	"DeleteEvent":                   "delete",
	"ReleaseEvent":                  "release",
	"IssuesEvent":                   "issues",
	"PullRequestReviewEvent":        "pull_request_review",
	"PullRequestReviewCommentEvent": "pull_request_review_comment",
	"PullRequestReviewThreadEvent":  "pull_request_review_thread",
	"ForkEvent":                     "fork",
	"WatchEvent":                    "watch",
	"GollumEvent":                   "gollum",
	"MemberEvent":                   "member",
	"PublicEvent":                   "public",
	"CommitCommentEvent":            "commit_comment",
	"DiscussionEvent":               "discussion",
	"SponsorshipEvent":              "sponsorship",
}

// WebhookEvent is the webhook's name (X-GitHub-Event) of an events API
// type: IssueCommentEvent is issue_comment; a type not known is its
// snake_case without "Event".
func WebhookEvent(typ string) string {
	if n, ok := webhookNames[typ]; ok {
		return n
	}
	var b strings.Builder
	for i, r := range strings.TrimSuffix(typ, "Event") {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// message is the sink's message of an event: the webhook's delivery of
// it, as the package doc says.
func (p *Poller) message(e event) (source.Message, error) {
	name := WebhookEvent(e.Type)
	headers := map[string]string{"x-github-event": name, "x-github-delivery": e.ID}
	body := map[string]json.RawMessage{}
	if len(e.Payload) > 0 && string(e.Payload) != "null" {
		if err := json.Unmarshal(e.Payload, &body); err != nil {
			// Not an object, as GitHub's payloads are: the event is
			// delivered as it came, nothing added, for the sink to take
			// or refuse, so that it holds back none of the events after it.
			return source.Message{ID: e.ID, Event: name, Headers: headers, Body: e.Payload, Published: e.CreatedAt}, nil
		}
	}
	var repo struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	var actor struct {
		ID        int64  `json:"id"`
		Login     string `json:"login"`
		AvatarURL string `json:"avatar_url"`
		URL       string `json:"url"`
	}
	_ = json.Unmarshal(e.Repo, &repo)
	_ = json.Unmarshal(e.Actor, &actor)
	add := func(key string, v any) {
		if _, ok := body[key]; ok {
			return
		}
		if data, err := json.Marshal(v); err == nil {
			body[key] = data
		}
	}
	if repo.Name != "" {
		_, short, _ := strings.Cut(repo.Name, "/")
		add("repository", map[string]any{"id": repo.ID, "name": short, "full_name": repo.Name, "html_url": p.html + "/" + repo.Name})
	}
	if actor.Login != "" {
		add("sender", map[string]any{"login": actor.Login, "id": actor.ID, "avatar_url": actor.AvatarURL, "url": actor.URL, "html_url": p.html + "/" + actor.Login})
	}
	if len(e.Org) > 0 && string(e.Org) != "null" {
		if _, ok := body["organization"]; !ok {
			body["organization"] = e.Org
		}
	}
	if e.Type == "PushEvent" {
		if head, ok := body["head"]; ok {
			add("after", head)
		}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return source.Message{}, fmt.Errorf("event %s (%s): %w", e.ID, e.Type, err)
	}
	return source.Message{ID: e.ID, Event: name, Headers: headers, Body: data, Published: e.CreatedAt}, nil
}
