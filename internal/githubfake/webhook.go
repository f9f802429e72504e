package githubfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// HookID is the X-GitHub-Hook-ID deliveries carry: the webhook's id.
const HookID = "424242"

// Delivery is one webhook delivery, as GitHub sends it.
type Delivery struct {
	// ID is X-GitHub-Delivery. Defaults to a new random UUID; GitHub
	// sends the same one again when a delivery is redelivered.
	ID string
	// Event is X-GitHub-Event, e.g. issue_comment.
	Event string
	// Payload is the body: a []byte or json.RawMessage as it is, anything
	// else encoded as JSON.
	Payload any
	// Secret is the webhook's secret: X-Hub-Signature-256 is
	// Sign(Secret, body). Empty: no signature is sent, as GitHub does for
	// a webhook without a secret.
	Secret string
	// Signature, when set, is sent as X-Hub-Signature-256 in place of the
	// right one: a bad signature, e.g. Sign("another secret", body).
	Signature string
	// ContentType defaults to application/json (GitHub's other choice,
	// application/x-www-form-urlencoded, is not what opkit reads).
	ContentType string
}

// Response is the receiver's answer to a delivery.
type Response struct {
	// ID is the X-GitHub-Delivery sent.
	ID     string
	Status int
	// Body is the answer's body, at most 64 KiB of it.
	Body string
}

// Sign returns the X-Hub-Signature-256 of body with secret: "sha256="
// and the hex HMAC-SHA256.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// NewDeliveryID returns a random (version 4) UUID, as X-GitHub-Delivery
// holds.
func NewDeliveryID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Send posts the delivery to url and returns the answer. An error is a
// delivery that got no answer (the connection failed, ctx ended).
func (d Delivery) Send(ctx context.Context, url string) (Response, error) {
	var body []byte
	switch p := d.Payload.(type) {
	case []byte:
		body = p
	case json.RawMessage:
		body = p
	default:
		var err error
		if body, err = json.Marshal(p); err != nil {
			return Response{}, fmt.Errorf("githubfake: encoding the payload: %w", err)
		}
	}
	if d.ID == "" {
		d.ID = NewDeliveryID()
	}
	if d.ContentType == "" {
		d.ContentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", d.ContentType)
	req.Header.Set("User-Agent", "GitHub-Hookshot/githubfake")
	req.Header.Set("X-GitHub-Event", d.Event)
	req.Header.Set("X-GitHub-Delivery", d.ID)
	req.Header.Set("X-GitHub-Hook-ID", HookID)
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	switch {
	case d.Signature != "":
		req.Header.Set("X-Hub-Signature-256", d.Signature)
	case d.Secret != "":
		req.Header.Set("X-Hub-Signature-256", Sign(d.Secret, body))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{ID: d.ID}, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, io.LimitReader(resp.Body, 64<<10))
	return Response{ID: d.ID, Status: resp.StatusCode, Body: b.String()}, nil
}

// Deliver sends a correctly signed delivery of event with payload to url,
// with a new delivery id, and returns the answer's status.
func Deliver(ctx context.Context, url, secret, event string, payload any) (int, error) {
	resp, err := Delivery{Event: event, Payload: payload, Secret: secret}.Send(ctx, url)
	return resp.Status, err
}

// IssueCommentEvent returns the payload of the issue_comment webhook
// event (action created) GitHub sends for c, with the issue or pull
// request, the repository and the sender as they are now.
func (s *Server) IssueCommentEvent(c Comment) map[string]any {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repoLocked(c.Repo)
	is := rp.issues[c.Issue]
	if is == nil {
		s.t.Fatalf("githubfake: %s has no issue or pull request #%d", c.Repo, c.Issue)
	}
	return map[string]any{
		"action":     "created",
		"issue":      s.issueJSON(rp, is),
		"comment":    s.commentJSON(rp, is, &c),
		"repository": s.repoJSON(rp),
		"sender":     s.userJSON(c.Author),
	}
}
