package source

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
)

func refusal(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if err != nil && !errors.As(err, &r) {
		t.Fatalf("%v is not a *Refusal", err)
	}
	return r
}

func TestVerify(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"action":"created"}`)
	github := &definition.EventSource{Name: "gh", Verify: definition.VerifyGitHub, SignatureHeader: "X-Hub-Signature-256", SignaturePrefix: "sha256="}
	hmacSrc := &definition.EventSource{Name: "h", Verify: definition.VerifyHMAC, SignatureHeader: "X-Signature"}
	bearer := &definition.EventSource{Name: "b", Verify: definition.VerifyBearer}
	good := GitHubSignature(secret, body)
	for _, c := range []struct {
		name   string
		src    *definition.EventSource
		header map[string]string
		body   []byte
		reason string // "" accepts
	}{
		{"github", github, map[string]string{"X-Hub-Signature-256": good}, body, ""},
		{"github, another body", github, map[string]string{"X-Hub-Signature-256": good}, []byte(`{"action":"deleted"}`), "bad signature"},
		{"github, another secret", github, map[string]string{"X-Hub-Signature-256": GitHubSignature([]byte("guess"), body)}, body, "bad signature"},
		{"github, no header", github, nil, body, "bad signature: no X-Hub-Signature-256 header"},
		{"github, sha1 prefix", github, map[string]string{"X-Hub-Signature-256": "sha1=" + strings.TrimPrefix(good, "sha256=")}, body, `does not start with "sha256="`},
		{"github, not hex", github, map[string]string{"X-Hub-Signature-256": "sha256=zz"}, body, "not a hex HMAC-SHA256"},
		{"github, short", github, map[string]string{"X-Hub-Signature-256": good[:20]}, body, "not a hex HMAC-SHA256"},
		{"github, upper-case hex", github, map[string]string{"X-Hub-Signature-256": "sha256=" + strings.ToUpper(strings.TrimPrefix(good, "sha256="))}, body, ""},
		{"hmac without prefix", hmacSrc, map[string]string{"X-Signature": strings.TrimPrefix(good, "sha256=")}, body, ""},
		{"hmac, GitHub's header", hmacSrc, map[string]string{"X-Hub-Signature-256": good}, body, "no X-Signature header"},
		{"bearer", bearer, map[string]string{"Authorization": "Bearer s3cret"}, body, ""},
		{"bearer, wrong token", bearer, map[string]string{"Authorization": "Bearer s3cre"}, body, "bad token"},
		{"bearer, basic", bearer, map[string]string{"Authorization": "Basic czNjcmV0"}, body, "not Bearer <token>"},
		{"bearer, none", bearer, nil, body, "no Authorization header"},
	} {
		h := http.Header{}
		for k, v := range c.header {
			h.Set(k, v)
		}
		err := Verify(c.src, secret, h, c.body)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		r := refusal(t, err)
		if r == nil || r.Status != http.StatusUnauthorized || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: %v, want a 401 refusal saying %q", c.name, err, c.reason)
		}
	}
	// An empty secret verifies nothing, not even an empty signature.
	if err := Verify(bearer, nil, http.Header{"Authorization": {"Bearer "}}, body); !errors.Is(err, ErrNoSecret) {
		t.Errorf("an empty secret: %v, want ErrNoSecret", err)
	}
}

// TestAuthorizeIsWhatVerifyAccepts: a delivery authorized with the secret
// (a trailing newline in it, as a Secret often has) passes Verify for each
// kind of source, and one authorized with another secret does not.
func TestAuthorizeIsWhatVerifyAccepts(t *testing.T) {
	body := []byte(`{"action":"created"}`)
	for _, src := range []*definition.EventSource{
		{Name: "gh", Verify: definition.VerifyGitHub, SignatureHeader: "X-Hub-Signature-256", SignaturePrefix: "sha256="},
		{Name: "h", Verify: definition.VerifyHMAC, SignatureHeader: "X-Signature"},
		{Name: "b", Verify: definition.VerifyBearer},
	} {
		h := http.Header{}
		if err := Authorize(src, []byte("s3cret\n"), body, h); err != nil {
			t.Fatal(err)
		}
		if err := Verify(src, []byte("s3cret"), h, body); err != nil {
			t.Errorf("%s: Verify refused what Authorize set (%v): %v", src.Name, h, err)
		}
		if err := Verify(src, []byte("another"), h, body); err == nil {
			t.Errorf("%s: Verify accepted it with another secret", src.Name)
		}
	}
}

func TestReadBodyAndContentType(t *testing.T) {
	req := func(body string, contentLength int64) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hooks/a/b", strings.NewReader(body))
		r.ContentLength = contentLength
		return r
	}
	if b, err := ReadBody(req("0123456789", 10), 10); err != nil || string(b) != "0123456789" {
		t.Errorf("a body at the limit: %q, %v", b, err)
	}
	// Declared too large: refused unread.
	if b, err := ReadBody(req("0123456789x", 11), 10); refusal(t, err) == nil || refusal(t, err).Status != http.StatusRequestEntityTooLarge || b != nil {
		t.Errorf("a declared body over the limit: %q, %v; want a 413, unread", b, err)
	}
	// Chunked (no length) and too large: refused after limit+1 bytes.
	b, err := ReadBody(req(strings.Repeat("x", 100), -1), 10)
	if r := refusal(t, err); r == nil || r.Status != http.StatusRequestEntityTooLarge || len(b) != 11 || !strings.Contains(r.Reason, "10 B") {
		t.Errorf("a chunked body over the limit: %d bytes, %v; want 11 bytes read and a 413 naming the limit", len(b), err)
	}
	for ct, ok := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "application/vnd.github+json": true,
		"": false, "text/plain": false, "application/x-www-form-urlencoded": false, "application/json; =": false,
	} {
		err := CheckContentType(http.Header{"Content-Type": {ct}})
		if r := refusal(t, err); (err == nil) != ok || (r != nil && r.Status != http.StatusUnsupportedMediaType) {
			t.Errorf("content type %q: %v; accepted should be %v", ct, err, ok)
		}
	}
}

func TestIdentity(t *testing.T) {
	src := &definition.EventSource{DeliveryHeader: "X-GitHub-Delivery", EventHeader: "X-GitHub-Event"}
	h := http.Header{}
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-GitHub-Event", "issue_comment")
	if id, ev, err := Identity(src, h); err != nil || id != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || ev != "issue_comment" {
		t.Errorf("Identity = %q, %q, %v", id, ev, err)
	}
	for name, id := range map[string]string{"none": "", "a slash": "../../etc", "a space": "a b", "control": "a\x1bb", "too long": strings.Repeat("a", 201)} {
		h.Set("X-GitHub-Delivery", id)
		if _, _, err := Identity(src, h); refusal(t, err) == nil || refusal(t, err).Status != http.StatusBadRequest {
			t.Errorf("a delivery id with %s: %v, want a 400", name, err)
		}
	}
	// A source without a delivery header has no ids.
	if id, ev, err := Identity(&definition.EventSource{}, h); err != nil || id != "" || ev != "" {
		t.Errorf("no headers named: %q, %q, %v", id, ev, err)
	}
	if got := Headers(http.Header{"X-Github-Event": {"push", "ping"}, "Content-Type": {"application/json"}}); got["x-github-event"] != "push" || got["content-type"] != "application/json" || len(got) != 2 {
		t.Errorf("Headers = %v", got)
	}
}

func TestPayloadRefusesABodyNestedPastTheLimitWith400(t *testing.T) {
	bomb := []byte(strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000)) // 20 KB: Go's own limit is 10,000
	for _, c := range []struct {
		name   string
		body   []byte
		reason string // "" accepts
	}{
		{"a GitHub-like payload", []byte(`{"action":"created","comment":{"body":"/deploy","user":{"login":"ann"}}}`), ""},
		{"100 levels", []byte(strings.Repeat("[", 100) + strings.Repeat("]", 100)), ""},
		{"101 levels", []byte(strings.Repeat("[", 101) + strings.Repeat("]", 101)), "the body is nested deeper than 100 objects and arrays (at byte 100): opkit reads JSON at most 100 deep"},
		{"the 20 KB depth bomb", bomb, "the body is nested deeper than 100 objects and arrays (at byte 100)"},
		{"brackets in strings", []byte(`{"text":"` + strings.Repeat("[", 500) + `"}`), ""},
		{"not JSON", []byte(`action=created`), "the body is not JSON: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			payload, err := Payload(c.body)
			r := refusal(t, err)
			switch {
			case c.reason == "" && r != nil:
				t.Errorf("refused: %v", r)
			case c.reason == "" && payload == nil:
				t.Error("accepted with no payload")
			case c.reason != "" && r == nil:
				t.Errorf("accepted, want refused with %q", c.reason)
			case c.reason != "" && (r.Status != http.StatusBadRequest || !strings.HasPrefix(r.Reason, c.reason)):
				t.Errorf("refused %d %q, want 400 %q", r.Status, r.Reason, c.reason)
			}
		})
	}
}
