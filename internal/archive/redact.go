package archive

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// Redaction of what a webhook's sender sent, for the readers that show a
// delivery (opkit events show, the console). The archive keeps a
// delivery's payload as received, because its handling reads it, after a
// restart too; its headers are redacted by the engine before they are
// recorded (RedactHeaders). Whatever shows either passes it through these
// functions first.
//
// What counts as a secret:
//   - A JSON object's member whose key names one: the key, lower-cased and
//     stripped of everything but letters and digits, contains token,
//     secret, password, passwd, passphrase, credential, privatekey,
//     apikey, authorization, signature or cookie, or is auth or pwd. Its
//     value, whatever its type (a string, a number, an object, an array),
//     becomes the string "[redacted]". Keys that end in url, uri or count
//     are not secrets but say where one is fetched, or how many there are
//     (GitHub's access_tokens_url, a token_count): their values are kept,
//     and a URL's own credentials are redacted as text is.
//   - In text (a JSON string value, a header value, a payload that is not
//     JSON): tokens of known forms (GitHub's ghp_, gho_, ghu_, ghs_, ghr_
//     and github_pat_, GitLab's glpat-, Slack's xox?-, Stripe's sk_ and
//     rk_ keys, AWS access key ids, JSON Web Tokens), the credential of a
//     "Bearer <token>", the password of a URL (https://user:PASSWORD@host),
//     and the value of a key=value or key: value pair whose key names a
//     secret as above. In text, only such a value up to the next space,
//     &, comma or semicolon (or a quoted one) is redacted: a secret
//     spread over an object or array in text that is not JSON is not.
//
// A redactor can only redact what it recognises: it is a second line, not
// a licence to send secrets in payloads.

// redacted stands for a secret removed.
const redacted = "[redacted]"

// secretWords are the parts of a key's name that mark its value secret;
// secretNames are names that do so whole. Both are matched against the
// key lower-cased with everything but letters and digits removed.
var (
	secretWords = []string{"token", "secret", "password", "passwd", "passphrase", "credential", "privatekey", "apikey", "authorization", "signature", "cookie"}
	secretNames = []string{"auth", "pwd"}
	// notSecretEnds are the ends of names whose values are not secrets
	// though their names mention one: a URL, a count.
	notSecretEnds = []string{"url", "uri", "count"}
)

// secretKey reports whether an object key or a header name names a
// secret.
func secretKey(name string) bool {
	k := normalizeKey(name)
	for _, end := range notSecretEnds {
		if strings.HasSuffix(k, end) {
			return false
		}
	}
	for _, n := range secretNames {
		if k == n {
			return true
		}
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// normalizeKey is a name lower-cased, with only its letters and digits.
func normalizeKey(name string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

var (
	// knownTokens are credentials recognisable by their form alone. A
	// known prefix is redacted with whatever follows it however short, so
	// that a token cut by the end of a text loses what is left of it too.
	knownTokens = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]+|github_pat_[A-Za-z0-9_]+|glpat-[A-Za-z0-9_\-]+|xox[abposr]-[A-Za-z0-9\-]+|[sr]k_(?:live|test)_[A-Za-z0-9]+|(?:AKIA|ASIA)[A-Z0-9]{16}|eyJ[A-Za-z0-9_\-]*\.[A-Za-z0-9_\-]*\.?[A-Za-z0-9_\-]*)`)
	// bearer is an HTTP bearer credential; the scheme is kept.
	bearer = regexp.MustCompile(`(?i)\b(bearer)(\s+)[A-Za-z0-9\-._~+/]+=*`)
	// urlPassword is the password of a URL's user information.
	urlPassword = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@"'<>]*:)[^/\s@"'<>]+@`)
	// keyValue is a key=value or key: value pair, the key perhaps quoted,
	// the value quoted (to its closing quote, or the end of a cut text),
	// a credential after an auth scheme, or a bare word.
	keyValue = regexp.MustCompile(`(?i)([A-Za-z0-9_.\-]*(?:token|secret|password|passwd|passphrase|credential|private[_\-]?key|api[_\-]?key|authorization|signature|cookie)[A-Za-z0-9_.\-]*|\bauth|\bpwd)(["']?\s*[=:]\s*)("(?:[^"\\]|\\.)*(?:"|\\?$)|'[^']*(?:'|$)|(?:(?:basic|bearer|token|digest|negotiate)\s+)?(?:\[redacted\]|[^\s&,;"'<>{}\[\]]+))`)
)

// RedactText redacts the secrets recognisable in text (see the top of
// redact.go): known token forms, bearer credentials, URL passwords and
// the values of key=value pairs whose key names a secret.
func RedactText(s string) string {
	if s == "" {
		return s
	}
	// Each expression runs only on a text that has what it looks for: most
	// texts have none, and a search for a few words is far cheaper.
	lower := asciiLower(s)
	if containsAny(lower, tokenMarks) {
		s = knownTokens.ReplaceAllString(s, redacted)
	}
	if strings.Contains(lower, "bearer") {
		s = bearer.ReplaceAllString(s, "${1}${2}"+redacted)
	}
	if strings.Contains(lower, "://") && strings.Contains(lower, "@") {
		s = urlPassword.ReplaceAllString(s, "${1}"+redacted+"@")
	}
	if !containsAny(lower, keyMarks) {
		return s
	}
	return keyValue.ReplaceAllStringFunc(s, func(m string) string {
		sub := keyValue.FindStringSubmatch(m)
		if !secretKey(sub[1]) || strings.Trim(sub[3], `"'`) == redacted {
			return m
		}
		value := redacted
		switch sub[3][0] {
		case '"':
			value = `"` + redacted + `"`
		case '\'':
			value = "'" + redacted + "'"
		}
		return sub[1] + sub[2] + value
	})
}

// tokenMarks are in every text knownTokens matches, keyMarks in every
// one keyValue matches; both lower-case.
var (
	tokenMarks = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "k_live_", "k_test_", "akia", "asia", "eyj"}
	keyMarks   = []string{"token", "secret", "pass", "credential", "private", "api", "auth", "signature", "cookie", "pwd"}
)

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// asciiLower is s with its ASCII letters lower-cased, of the same length.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// RedactHeaders returns a copy of a request's headers with the values of
// those that carry credentials replaced by "[redacted]": Authorization,
// Proxy-Authorization, Cookie, Set-Cookie, any header whose name names a
// secret (a signature, token, secret, api-key, password, credential;
// X-Hub-Signature-256, X-Gitlab-Token), and those named in also, in any
// case (a source's own signature header, whatever its name). The other
// headers' values are redacted as text (RedactText). The engine calls it
// before it records a delivery; readers may call it again, to no effect.
// Nil is nil.
func RedactHeaders(h map[string][]string, also ...string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for name, values := range h {
		vs := make([]string, len(values))
		secret := secretKey(name) || slices.ContainsFunc(also, func(a string) bool { return a != "" && strings.EqualFold(a, name) })
		for i, v := range values {
			if secret {
				vs[i] = redacted
			} else {
				vs[i] = RedactText(v)
			}
		}
		out[name] = vs
	}
	return out
}

// RedactPayload returns a delivery's payload with its secrets and tokens
// replaced by "[redacted]" (see the top of redact.go). A JSON payload (or
// a stream of JSON values, one after another) is decoded and encoded
// again: its members keep their order, its numbers their digits and its
// strings their text (invalid UTF-8 in them becomes U+FFFD), its
// whitespace is not kept. A payload cut short of its end (PayloadTruncated)
// is redacted as JSON as far as it goes, and the piece it ends in as text.
// Any other payload is redacted as text. An empty payload is returned as
// it is.
func RedactPayload(payload []byte) []byte {
	out, _ := redactPayload(payload, "")
	return out
}

// ShowPayload is a payload as readers show it: redacted (RedactPayload),
// indented by two spaces when it is JSON (a payload cut short as far as it
// goes, the start of what the whole would read as), and readable text
// (CleanLog). isJSON says whether it reads as JSON. A payload nested
// deeper than jsondepth.Max objects and arrays (stored before deliveries
// were held to it, or refused for it) is not indented, which would take
// a line per level: it is shown on one line, and note says so. note is
// "" for any other payload.
func ShowPayload(payload []byte) (text string, isJSON bool, note string) {
	indent := "  "
	if TooDeep(payload) {
		indent, note = "", fmt.Sprintf("nested deeper than %d objects and arrays: shown as one line, not indented", jsondepth.Max)
	}
	out, kind := redactPayload(payload, indent)
	return CleanLog(out), kind != payloadText, note
}

// TooDeep reports whether a payload nests deeper than jsondepth.Max
// objects and arrays: it is to be shown on one line, and not as JSON
// that a reader's decoder (Go's stops at 10,000 levels) must take.
func TooDeep(payload []byte) bool {
	return jsondepth.Check(payload, jsondepth.Max) != nil
}

// payloadKind is how a payload was read.
type payloadKind int

const (
	payloadText    payloadKind = iota // not JSON: redacted as text
	payloadJSON                       // one JSON value or more, whole
	payloadJSONCut                    // JSON cut short of its end
)

// redactPayload redacts a payload, and says how it read it. A JSON
// payload is encoded again, indented by indent ("" for none).
func redactPayload(payload []byte, indent string) ([]byte, payloadKind) {
	if len(bytes.TrimSpace(payload)) == 0 {
		return payload, payloadText
	}
	if out, kind, ok := redactJSON(payload, indent); ok {
		return out, kind
	}
	return []byte(RedactText(string(payload))), payloadText
}

// frame is an object or array being written.
type frame struct {
	object bool
	// n is how many members or elements it has so far.
	n int
	// afterKey: a member's key is written, its value not yet.
	afterKey bool
}

// jsonWriter writes JSON tokens again, redacted, compact or indented as
// json.Indent does.
type jsonWriter struct {
	buf    bytes.Buffer
	enc    *json.Encoder // of strings into buf, without HTML escapes
	indent string
	stack  []frame
	values int // top-level values written
}

func (w *jsonWriter) newline(depth int) {
	if w.indent == "" {
		return
	}
	w.buf.WriteByte('\n')
	for range depth {
		w.buf.WriteString(w.indent)
	}
}

// member starts the next member (key != nil) or element or top-level
// value, writing what separates it from the one before.
func (w *jsonWriter) member(key *string) {
	if len(w.stack) == 0 {
		if w.values > 0 {
			w.buf.WriteByte('\n')
		}
		w.values++
		return
	}
	f := &w.stack[len(w.stack)-1]
	if f.afterKey {
		w.buf.WriteByte(':')
		if w.indent != "" {
			w.buf.WriteByte(' ')
		}
		f.afterKey = false
		return
	}
	if f.n > 0 {
		w.buf.WriteByte(',')
	}
	f.n++
	w.newline(len(w.stack))
	if key != nil {
		w.str(*key)
		f.afterKey = true
	}
}

// str writes a JSON string.
func (w *jsonWriter) str(s string) {
	_ = w.enc.Encode(s) // a string always encodes
	w.buf.Truncate(w.buf.Len() - 1)
}

func (w *jsonWriter) open(d json.Delim) {
	w.buf.WriteByte(byte(d))
	w.stack = append(w.stack, frame{object: d == '{'})
}

func (w *jsonWriter) close(d json.Delim) {
	f := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	if f.n > 0 {
		w.newline(len(w.stack))
	}
	w.buf.WriteByte(byte(d))
}

// expectsKey reports whether the next string is a member's key.
func (w *jsonWriter) expectsKey() bool {
	n := len(w.stack)
	return n > 0 && w.stack[n-1].object && !w.stack[n-1].afterKey
}

// redactJSON redacts a stream of JSON values token by token, so that
// nesting costs no stack and a payload cut short is redacted as far as it
// goes. ok is false when the payload is not JSON, or not the start of it.
func redactJSON(payload []byte, indent string) (out []byte, kind payloadKind, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	w := &jsonWriter{indent: indent}
	w.enc = json.NewEncoder(&w.buf)
	w.enc.SetEscapeHTML(false)
	secretNext := false // the next value is a secret member's
	skip := 0           // the depth inside a secret object or array
	for {
		offset := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			started := len(w.stack) > 0 || w.values > 0
			switch {
			case errors.Is(err, io.EOF) && len(w.stack) == 0 && skip == 0 && !secretNext:
				return w.buf.Bytes(), payloadJSON, true
			case !started || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
				return nil, payloadText, false
			}
			// Cut short: what is left is one token's start at most.
			tail := bytes.TrimLeft(payload[offset:], " \t\r\n")
			tail = bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimPrefix(tail, []byte(",")), []byte(":")), " \t\r\n")
			switch {
			case secretNext:
				w.member(nil)
				w.str(redacted)
			case skip > 0:
			case len(tail) > 0 || len(w.stack) > 0 && w.stack[len(w.stack)-1].afterKey:
				// The start of a key or value (a member's value is
				// begun after its key even when nothing of it came).
				w.member(nil)
				w.buf.WriteString(RedactText(string(tail)))
			}
			return w.buf.Bytes(), payloadJSONCut, true
		}
		if skip > 0 {
			switch tok {
			case json.Delim('{'), json.Delim('['):
				skip++
			case json.Delim('}'), json.Delim(']'):
				skip--
			}
			continue
		}
		if s, isString := tok.(string); isString && w.expectsKey() {
			w.member(&s)
			secretNext = secretKey(s)
			continue
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			w.close(d)
			continue
		}
		w.member(nil)
		if secretNext {
			secretNext = false
			w.str(redacted)
			if d, isDelim := tok.(json.Delim); isDelim && (d == '{' || d == '[') {
				skip = 1
			}
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			w.open(v)
		case string:
			w.str(RedactText(v))
		case json.Number:
			w.buf.WriteString(string(v))
		case bool:
			if v {
				w.buf.WriteString("true")
			} else {
				w.buf.WriteString("false")
			}
		case nil:
			w.buf.WriteString("null")
		}
	}
}
