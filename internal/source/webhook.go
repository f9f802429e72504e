// Package source checks what comes in from outside the cluster: the
// webhook deliveries and CloudEvents (cloudevents.go) of an operator's
// event sources.
//
// It is the pure part of a delivery's reception: reading the body within
// the source's limit, checking the content type, verifying the signature
// or token, reading the sender's delivery id and event, and decoding the
// body, which may nest at most jsondepth.Max objects and arrays. It does no
// I/O beyond the request's body, keeps no state, and never logs: the
// engine records each outcome in the run archive. Every refusal is a
// *Refusal with the HTTP status to answer and the reason to record.
package source

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// Refusal is a delivery turned away: the status to answer and the reason
// recorded in the archive and sent back to the sender.
type Refusal struct {
	Status int
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

func refuse(status int, format string, args ...any) *Refusal {
	return &Refusal{Status: status, Reason: fmt.Sprintf(format, args...)}
}

// ReadBody reads a request's body up to limit bytes. A longer body is a
// 413 Refusal; the bytes read (limit+1 at most) are returned with it, and
// its size as the sender declared it (Content-Length), or -1.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, refuse(http.StatusRequestEntityTooLarge, "body of %s is larger than the source's limit of %s", Size(r.ContentLength), Size(limit))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return body, refuse(http.StatusBadRequest, "reading the body: %v", err)
	}
	if int64(len(body)) > limit {
		return body, refuse(http.StatusRequestEntityTooLarge, "body larger than the source's limit of %s", Size(limit))
	}
	return body, nil
}

// CheckContentType requires a JSON body: application/json, or any
// application/*+json, with any parameters.
func CheckContentType(h http.Header) error {
	ct := h.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		return refuse(http.StatusUnsupportedMediaType, "no content type; expected application/json (GitHub: set the webhook's content type to application/json)")
	case err != nil:
		return refuse(http.StatusUnsupportedMediaType, "content type %q cannot be read; expected application/json", clip(ct))
	case mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")):
		return nil
	}
	return refuse(http.StatusUnsupportedMediaType, "content type %s; expected application/json (GitHub: set the webhook's content type to application/json)", clip(mt))
}

// Payload decodes a delivery's body. A body that is not JSON, or that
// nests deeper than jsondepth.Max objects and arrays, is a 400 Refusal
// saying so: its handlers, the archive's readers and the handlers' own
// JSON decoders need not survive one 10,000 levels deep. So is JSON
// holding a number past a float64's range (1e400), naming it.
func Payload(body []byte) (any, error) {
	if err := jsondepth.Check(body, jsondepth.Max); err != nil {
		return nil, refuse(http.StatusBadRequest, "the body is %v: opkit reads JSON at most %d deep", err, jsondepth.Max)
	}
	var payload any
	if err := json.Unmarshal(body, &payload); err != nil {
		if n := outOfRange(err); n != "" {
			return nil, refuse(http.StatusBadRequest, "the body holds the number %s, %s", n, numberRange)
		}
		return nil, refuse(http.StatusBadRequest, "the body is not JSON: %v", err)
	}
	return payload, nil
}

// numberRange says why JSON holding a number such as 1e400 is refused:
// it is JSON, but handlers read numbers as float64s.
const numberRange = "past the range of the numbers opkit reads (a float64's, about ±1.8e308)"

// outOfRange is the number, clipped, of encoding/json's err decoding
// valid JSON into an any whose number is past a float64's range; "" for
// any other error.
func outOfRange(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return ""
	}
	if n, ok := strings.CutPrefix(te.Value, "number "); ok {
		return clip(n)
	}
	return ""
}

// ErrNoSecret is a source whose secret is empty: it accepts nothing.
var ErrNoSecret = errors.New("the source's secret is empty")

// Verify checks that the delivery comes from the holder of secret: its
// HMAC-SHA256 signature of body (github, hmac) or its bearer token, each
// compared in constant time. A delivery that fails is a 401 Refusal.
func Verify(src *definition.EventSource, secret []byte, h http.Header, body []byte) error {
	if len(secret) == 0 {
		return ErrNoSecret
	}
	switch src.Verify {
	case definition.VerifyBearer:
		auth := h.Get("Authorization")
		token, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			if auth == "" {
				return refuse(http.StatusUnauthorized, "bad token: no Authorization header")
			}
			return refuse(http.StatusUnauthorized, "bad token: the Authorization header is not Bearer <token>")
		}
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), secret) != 1 {
			return refuse(http.StatusUnauthorized, "bad token")
		}
		return nil
	case definition.VerifyGitHub, definition.VerifyHMAC:
		sig := h.Get(src.SignatureHeader)
		if sig == "" {
			return refuse(http.StatusUnauthorized, "bad signature: no %s header", src.SignatureHeader)
		}
		digest, ok := strings.CutPrefix(sig, src.SignaturePrefix)
		if !ok {
			return refuse(http.StatusUnauthorized, "bad signature: %s does not start with %q", src.SignatureHeader, src.SignaturePrefix)
		}
		got, err := hex.DecodeString(strings.TrimSpace(digest))
		if err != nil || len(got) != sha256.Size {
			return refuse(http.StatusUnauthorized, "bad signature: %s is not a hex HMAC-SHA256", src.SignatureHeader)
		}
		if !hmac.Equal(got, Sign(secret, body)) {
			return refuse(http.StatusUnauthorized, "bad signature")
		}
		return nil
	}
	return fmt.Errorf("source %s: unknown verification %q", src.Name, src.Verify)
}

// Sign returns the HMAC-SHA256 of body with secret.
func Sign(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// GitHubSignature is the X-Hub-Signature-256 value GitHub sends for body.
func GitHubSignature(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(Sign(secret, body))
}

// Authorize sets on h what proves that a delivery of body comes from the
// holder of secret, as the source verifies it: the bearer token, or the
// signature header with its prefix. It is Verify's counterpart, for tests
// and tools that play the sender.
func Authorize(src *definition.EventSource, secret, body []byte, h http.Header) error {
	secret = []byte(strings.TrimSpace(string(secret)))
	switch src.Verify {
	case definition.VerifyBearer:
		h.Set("Authorization", "Bearer "+string(secret))
	case definition.VerifyGitHub, definition.VerifyHMAC:
		h.Set(src.SignatureHeader, src.SignaturePrefix+hex.EncodeToString(Sign(secret, body)))
	default:
		return fmt.Errorf("source %s: unknown verification %q", src.Name, src.Verify)
	}
	return nil
}

// maxID is the longest delivery id or event name kept.
const maxID = 200

// Identity reads the sender's delivery id and event from the source's
// headers. A delivery id or event that is not short printable text is a
// 400 Refusal: they end up in idempotency keys, file names and pages.
func Identity(src *definition.EventSource, h http.Header) (deliveryID, event string, err error) {
	for _, f := range []struct {
		header string
		out    *string
	}{{src.DeliveryHeader, &deliveryID}, {src.EventHeader, &event}} {
		if f.header == "" {
			continue
		}
		v := h.Get(f.header)
		if v == "" && f.header == src.DeliveryHeader {
			return "", "", refuse(http.StatusBadRequest, "no %s header: the delivery id, by which replays are recognised", f.header)
		}
		if len(v) > maxID || !printable(v) {
			return "", "", refuse(http.StatusBadRequest, "%s is not an id: at most %d printable characters, no spaces or slashes", f.header, maxID)
		}
		*f.out = v
	}
	return deliveryID, event, nil
}

// printable reports whether s is visible ASCII without '/' (ids are used
// in keys and paths).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '/' || c == '\\' {
			return false
		}
	}
	return true
}

// Headers returns the headers as expressions and handlers see them: by
// lower-case name, the first value of each.
func Headers(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			out[strings.ToLower(k)] = vs[0]
		}
	}
	return out
}

// Size formats a byte count: 512 B, 1.0 MiB.
func Size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// clip cuts a sender's text for a reason: 64 bytes of valid UTF-8.
func clip(s string) string { return Clip(s, 64) }

// Clip cuts text a sender wrote for a message: at most n bytes of valid
// UTF-8 (invalid bytes read as "?"), and "..." when it was longer.
func Clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}
