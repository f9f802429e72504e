package archive_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestRedactPayloadReplacesTheValuesOfSecretMembers(t *testing.T) {
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"a GitHub installation token, its URL kept",
			`{"action":"created","installation":{"id":1,"access_tokens_url":"https://api.github.com/app/installations/1/access_tokens"},"token":"ghs_16C7e42F292c6912E7710c838347Ae178B4a","expires_at":"2016-07-11T22:14:10Z"}`,
			`{"action":"created","installation":{"id":1,"access_tokens_url":"https://api.github.com/app/installations/1/access_tokens"},"token":"[redacted]","expires_at":"2016-07-11T22:14:10Z"}`},
		{"values of every type, keys in any case and spelling",
			`{"Authorization":"Bearer x","client_secret":{"a":[1,2,{"b":3}]},"API-Key":42,"privateKey":null,"password":true,"Cookie":["a","b"],"x_hub_signature":"sha256=00","passwd":"p","credentials":{"user":"u"},"auth":"dXNlcjpwYXNz","private_key":"-----BEGIN"}`,
			`{"Authorization":"[redacted]","client_secret":"[redacted]","API-Key":"[redacted]","privateKey":"[redacted]","password":"[redacted]","Cookie":"[redacted]","x_hub_signature":"[redacted]","passwd":"[redacted]","credentials":"[redacted]","auth":"[redacted]","private_key":"[redacted]"}`},
		{"names that only mention a secret",
			`{"token_count":7,"secretCount":2,"tokens_url":"https://example.com/t","author":"alice","authored":true,"keys":["k"],"oauth_app":"x"}`,
			`{"token_count":7,"secretCount":2,"tokens_url":"https://example.com/t","author":"alice","authored":true,"keys":["k"],"oauth_app":"x"}`},
		{"order, numbers and nesting kept",
			`{"z":1,"a":-0.10,"m":{"y":1e400,"b":12345678901234567890123},"l":[[],{},[{"token":"t"}]]}`,
			`{"z":1,"a":-0.10,"m":{"y":1e400,"b":12345678901234567890123},"l":[[],{},[{"token":"[redacted]"}]]}`},
		{"tokens inside strings",
			`{"message":"use ghp_0123456789abcdefghij0123456789abcdef, then github_pat_11ABC_def","clone":"https://x-access-token:ghs_abc@github.com/o/r.git","note":"curl -H 'Authorization: Bearer abc.def' -d password=hunter2"}`,
			`{"message":"use [redacted], then [redacted]","clone":"https://x-access-token:[redacted]@github.com/o/r.git","note":"curl -H 'Authorization: [redacted]' -d password=[redacted]"}`},
		{"a JSON array at the top",
			`[{"token":"a"},{"name":"b","secret":"c"},"Bearer abc.def",3]`,
			`[{"token":"[redacted]"},{"name":"b","secret":"[redacted]"},"Bearer [redacted]",3]`},
		{"a string at the top", `"ghp_abcdefghijklmnopqrstuvwxyz0123456789"`, `"[redacted]"`},
		{"one JSON value a line", "{\"token\":\"a\"}\n{\"b\":1}\n", "{\"token\":\"[redacted]\"}\n{\"b\":1}"},
		{"whitespace dropped", " { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ", `{"a":[1,2],"b":{}}`},
		{"HTML characters as they are", `{"a":"<b>&amp;</b>","b":"\u003cscript\u003e"}`, `{"a":"<b>&amp;</b>","b":"<script>"}`},
		{"control characters escaped", `{"a":"\u001b[31mred"}`, `{"a":"\u001b[31mred"}`},
		{"invalid UTF-8 in strings", "{\"a\":\"\xff\",\"token\":\"\xfe\"}", "{\"a\":\"\uFFFD\",\"token\":\"[redacted]\"}"},

		// Cut short (PayloadTruncated): JSON as far as it goes.
		{"cut in a secret string", `{"action":"created","token":"ghp_abc`, `{"action":"created","token":"[redacted]"`},
		{"cut in a secret object", `{"a":1,"credentials":{"user":"u","pass`, `{"a":1,"credentials":"[redacted]"`},
		{"cut just after a secret's key", `{"a":1,"password":`, `{"a":1,"password":"[redacted]"`},
		{"cut in a string with a token", `{"a":"see ghp_abcdef`, `{"a":"see [redacted]`},
		{"cut in a string with a secret pair", `{"a":"x","body":"password=hunter`, `{"a":"x","body":"password=[redacted]`},
		{"cut in a key", `{"a":1,"tok`, `{"a":1,"tok`},
		{"cut after a key", `{"a" `, `{"a":`},
		{"cut after a comma", `[1, `, `[1`},
		{"cut in a number", `{"a":[1,2`, `{"a":[1,2`},
		{"cut in a literal", `[tr`, `[tr`},
		{"cut in a second value", "{\"a\":1}\n{\"token\":\"x", "{\"a\":1}\n{\"token\":\"[redacted]\""},

		// Not JSON: redacted as text.
		{"a form", `token=abc&name=x&password=hunter2&access_tokens_url=https%3A%2F%2Fexample.com`, `token=[redacted]&name=x&password=[redacted]&access_tokens_url=https%3A%2F%2Fexample.com`},
		{"headers as text", "Authorization: Bearer abc123\nX-Api-Key: k1\nCookie: a=b\nAccept: */*", "Authorization: [redacted]\nX-Api-Key: [redacted]\nCookie: [redacted]\nAccept: */*"},
		{"basic and token schemes", "Authorization: Basic dXNlcjpwYXNz\nauthorization=token ghp_x", "Authorization: [redacted]\nauthorization=[redacted]"},
		{"invalid JSON", `{"token": "abc", "api_key": 'k', oops}`, `{"token": "[redacted]", "api_key": '[redacted]', oops}`},
		{"a log line in brackets", `[INFO] secret=s3 done`, `[INFO] secret=[redacted] done`},
		{"other known tokens", "glpat-abcdefghij xoxb-123-456-abc sk_live_abc AKIAIOSFODNN7EXAMPLE eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
			"[redacted] [redacted] [redacted] [redacted] [redacted]"},
		{"a URL's password", `see https://user:pa55@example.com/x and http://example.com/`, `see https://user:[redacted]@example.com/x and http://example.com/`},
		{"a cut text", "hello password=\"hunt", "hello password=\"[redacted]\""},
		{"invalid UTF-8 in text", "\xff token=abc \xfe", "\xff token=[redacted] \xfe"},
		{"nothing to redact", "plain text, tokens of thanks", "plain text, tokens of thanks"},
		{"empty", "", ""},
		{"only space", " \n", " \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(archive.RedactPayload([]byte(tc.payload)))
			if got != tc.want {
				t.Errorf("RedactPayload(%q)\n = %q\nwant %q", tc.payload, got, tc.want)
			}
			// Redacting again changes nothing.
			if again := string(archive.RedactPayload([]byte(got))); again != got {
				t.Errorf("RedactPayload of its own output %q: %q", got, again)
			}
		})
	}
}

// hostileInput is a payload built to cost RedactPayload time or stack,
// and what it must give for it.
type hostileInput struct {
	name    string
	payload string
	want    func(got string) bool
}

// TestRedactPayloadOfHostileInput checks what RedactPayload gives for
// each hostile input, and so that it ends: its cost is linear (Go's
// expressions are), which BenchmarkRedactPayloadOfHostileInput measures;
// a cost that grew faster would take minutes, past the package's timeout.
func TestRedactPayloadOfHostileInput(t *testing.T) {
	for _, tc := range hostileInputs() {
		t.Run(tc.name, func(t *testing.T) {
			got := string(archive.RedactPayload([]byte(tc.payload)))
			if !tc.want(got) {
				t.Errorf("RedactPayload gave %q", head(got))
			}
		})
	}
}

// BenchmarkRedactPayloadOfHostileInput measures RedactPayload's time on
// each hostile input (go test -run '^$' -bench HostileInput ./internal/archive).
func BenchmarkRedactPayloadOfHostileInput(b *testing.B) {
	for _, tc := range hostileInputs() {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.payload)))
			payload := []byte(tc.payload)
			for b.Loop() {
				archive.RedactPayload(payload)
			}
		})
	}
}

func hostileInputs() []hostileInput {
	const depth = 200000
	// Text in which a secret may be costs the expressions' time, linear
	// but slow (more so under -race): long is twice the start the engine
	// keeps of a refused payload. Text without one is only searched for
	// words, and can be huge.
	huge := strings.Repeat("a", 8<<20)
	long := strings.Repeat("a", 128<<10)
	return []hostileInput{
		{"deep nesting", strings.Repeat("[", depth) + strings.Repeat("]", depth),
			func(got string) bool { return got == strings.Repeat("[", depth)+strings.Repeat("]", depth) }},
		{"deep nesting, a secret at the bottom", strings.Repeat(`{"a":`, depth) + `{"token":"x"}` + strings.Repeat("}", depth),
			func(got string) bool {
				return strings.HasSuffix(got, `{"token":"[redacted]"}`+strings.Repeat("}", depth)) && !strings.Contains(got, `"x"`)
			}},
		{"deep nesting, cut", strings.Repeat(`[{"token":`, depth),
			func(got string) bool {
				return !strings.Contains(got, `"token":[`) && strings.Count(got, redactedJSON) == 1
			}},
		{"deep nesting under a secret", `{"secret":` + strings.Repeat("[", depth) + `"s"` + strings.Repeat("]", depth) + `,"b":2}`,
			func(got string) bool { return got == `{"secret":"[redacted]","b":2}` }},
		{"a huge string", `{"a":"` + huge + `","token":"` + huge + `"}`,
			func(got string) bool { return got == `{"a":"`+huge+`","token":"[redacted]"}` }},
		{"a huge key", `{"` + huge + `token":1}`,
			func(got string) bool { return got == `{"`+huge+`token":"[redacted]"}` }},
		{"a huge text", huge + " and more",
			func(got string) bool { return got == huge+" and more" }},
		{"a long text with a secret", long + " token=" + long,
			func(got string) bool { return got == long+" token=[redacted]" }},
		{"many pairs", strings.Repeat("password=x&", 20000),
			func(got string) bool { return got == strings.Repeat("password=[redacted]&", 20000) }},
		{"unclosed strings", strings.Repeat(`"token: "`, 10000) + `"`,
			func(got string) bool { return !strings.Contains(got, "panic") }},
		{"binary", string(bytes.Repeat([]byte{0, 0xff, '{', '"', 0x80}, 10000)),
			func(got string) bool { return len(got) == 50000 }},
	}
}

const redactedJSON = `"[redacted]"`

func head(s string) string {
	if len(s) > 300 {
		return s[:150] + "..." + s[len(s)-150:]
	}
	return s
}

func TestShowPayloadIndentsJSONAsJSONIndentDoes(t *testing.T) {
	docs := []string{
		`{}`, `[]`, `{"a":[]}`, `[1,2,{"b":{}}]`, `"s"`, `12`,
		`{"s":"a \"quoted\" {brace}, [bracket]: colon \\","n":-1.5e3,"t":true,"z":null}`,
		" {\n\t\"spaced\" : [ 1 , 2 ] ,\"e\":{ } }",
		string(bigJSON(2000)),
	}
	for _, doc := range docs {
		var whole bytes.Buffer
		if err := json.Indent(&whole, []byte(doc), "", "  "); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSpace(whole.String())
		if got, isJSON, note := archive.ShowPayload([]byte(doc)); got != want || !isJSON || note != "" {
			t.Errorf("%s shows as (JSON %v)\n%s\nwant\n%s", doc, isJSON, got, want)
		}
		// Cut anywhere, it reads as the start of the whole.
		for i := 1; i < len(doc); i++ {
			if strings.TrimSpace(doc[:i]) == "" {
				continue // shown as it is
			}
			got, isJSON, _ := archive.ShowPayload([]byte(doc[:i]))
			if !strings.HasPrefix(want, got) || !isJSON && strings.ContainsAny(doc[:1], "{[") {
				t.Fatalf("%q cut at %d shows as (JSON %v)\n%s\nnot the start of\n%s", doc, i, isJSON, got, want)
			}
		}
	}
}

func TestShowPayloadRedactsCleansAndSaysWhetherItIsJSON(t *testing.T) {
	for _, tc := range []struct {
		payload, want string
		isJSON        bool
	}{
		{`{"token":"t","a":[1]}`, "{\n  \"token\": \"[redacted]\",\n  \"a\": [\n    1\n  ]\n}", true},
		{`{"a":"x","secret":{"b`, "{\n  \"a\": \"x\",\n  \"secret\": \"[redacted]\"", true},
		{"{\"a\":1}\n[2]", "{\n  \"a\": 1\n}\n[\n  2\n]", true},
		{"\x1b[31mred\x1b[0m password=p\r\n", "red password=[redacted]\n", false},
		{"[INFO] ok", "[INFO] ok", false},
		{"", "", false},
	} {
		got, isJSON, note := archive.ShowPayload([]byte(tc.payload))
		if got != tc.want || isJSON != tc.isJSON || note != "" {
			t.Errorf("ShowPayload(%q) = %q, JSON %v; want %q, %v", tc.payload, got, isJSON, tc.want, tc.isJSON)
		}
	}
}

func TestShowPayloadOfADepthBombIsOneLineWithANote(t *testing.T) {
	bomb := strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000)
	for _, payload := range []string{
		bomb,
		`{"token":"t","a":` + bomb + `}`,
		bomb[:15_000], // cut, as a refused delivery's payload is kept
	} {
		got, isJSON, note := archive.ShowPayload([]byte(payload))
		if len(got) > len(payload)+32 || strings.Contains(got, "\n") || strings.Contains(got, `"t"`) {
			t.Errorf("a payload of %d bytes nested 10,000 deep shows as %d bytes: %s", len(payload), len(got), head(got))
		}
		if !isJSON || note != "nested deeper than 100 objects and arrays: shown as one line, not indented" {
			t.Errorf("JSON %v, note %q; want JSON, and a note that it is not indented", isJSON, note)
		}
	}
	if got, _, note := archive.ShowPayload([]byte(strings.Repeat("[", 100) + strings.Repeat("]", 100))); note != "" || strings.Count(got, "\n") != 198 {
		t.Errorf("a payload 100 deep shows with the note %q, in %d lines; want it indented, 199 lines", note, strings.Count(got, "\n")+1)
	}
}

// bigJSON is a JSON payload of about size bytes.
func bigJSON(size int) []byte {
	b := []byte(`{"action":"created","commits":[`)
	for i := 0; len(b) < size; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"n":%d,"message":"fix the \"flaky\" test {%d} [again]","added":[]}`, i, i)
	}
	return append(b, "]}"...)
}

func TestRedactHeadersReplacesCredentials(t *testing.T) {
	h := map[string][]string{
		"Authorization":       {"Bearer abc"},
		"Proxy-Authorization": {"Basic dXNlcjpwYXNz"},
		"Cookie":              {"session=1", "other=2"},
		"Set-Cookie":          {"id=a; HttpOnly"},
		"X-Hub-Signature-256": {"sha256=0123"},
		"X-Hub-Signature":     {"sha1=0123"},
		"X-Gitlab-Token":      {"glt"},
		"X-Api-Key":           {"k"},
		"X-Webhook-Secret":    {"s"},
		"x-custom-password":   {"p"},
		"Content-Type":        {"application/json"},
		"X-Github-Event":      {"push"},
		"X-Github-Delivery":   {"72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		"X-Forwarded-Uri":     {"/hooks/ci/github?token=abc&x=1"},
		"User-Agent":          {"GitHub-Hookshot/044aadd"},
		"X-Empty":             {},
	}
	orig := map[string][]string{}
	for k, v := range h {
		orig[k] = slices.Clone(v)
	}
	got := archive.RedactHeaders(h)
	want := map[string][]string{
		"Authorization":       {"[redacted]"},
		"Proxy-Authorization": {"[redacted]"},
		"Cookie":              {"[redacted]", "[redacted]"},
		"Set-Cookie":          {"[redacted]"},
		"X-Hub-Signature-256": {"[redacted]"},
		"X-Hub-Signature":     {"[redacted]"},
		"X-Gitlab-Token":      {"[redacted]"},
		"X-Api-Key":           {"[redacted]"},
		"X-Webhook-Secret":    {"[redacted]"},
		"x-custom-password":   {"[redacted]"},
		"Content-Type":        {"application/json"},
		"X-Github-Event":      {"push"},
		"X-Github-Delivery":   {"72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		"X-Forwarded-Uri":     {"/hooks/ci/github?token=[redacted]&x=1"},
		"User-Agent":          {"GitHub-Hookshot/044aadd"},
		"X-Empty":             {},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("RedactHeaders:\n got %v\nwant %v", got, want)
	}
	if !maps.EqualFunc(h, orig, slices.Equal) {
		t.Errorf("RedactHeaders changed its argument: %v", h)
	}
	got["Content-Type"][0] = "changed"
	if h["Content-Type"][0] != "application/json" {
		t.Error("RedactHeaders's result shares its values with its argument")
	}
	if again := archive.RedactHeaders(want); !maps.EqualFunc(again, want, slices.Equal) {
		t.Errorf("RedactHeaders of redacted headers: %v", again)
	}
	// A source's own signature header, whatever its name.
	custom := archive.RedactHeaders(map[string][]string{"X-Hmac": {"abc"}, "X-Other": {"x"}}, "x-hmac", "")
	if !slices.Equal(custom["X-Hmac"], []string{"[redacted]"}) || !slices.Equal(custom["X-Other"], []string{"x"}) {
		t.Errorf("RedactHeaders with the source's header X-Hmac: %v", custom)
	}
	if archive.RedactHeaders(nil) != nil {
		t.Error("RedactHeaders(nil) is not nil")
	}
}

// FuzzRedactPayload checks that any payload is redacted without a panic,
// and that valid JSON stays valid JSON.
func FuzzRedactPayload(f *testing.F) {
	for _, seed := range []string{`{"token":"x","a":[1,{"b":null}]}`, `[{"secret":{"x":1}}`, "token=a&b=c", "\xff{\"", `"\u00e9"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		got := archive.RedactPayload(payload)
		if json.Valid(payload) && !json.Valid(got) {
			t.Errorf("valid JSON %q redacted as invalid %q", payload, got)
		}
		_, _, _ = archive.ShowPayload(payload)
	})
}

func ExampleRedactPayload() {
	payload := []byte(`{"action":"created","installation":{"id":7,"access_tokens_url":"https://api.github.com/app/installations/7/access_tokens"},` +
		`"token":"ghs_16C7e42F292c6912E7710c838347Ae178B4a","comment":{"body":"deploy with password=hunter2"}}`)
	fmt.Println(string(archive.RedactPayload(payload)))
	// Output:
	// {"action":"created","installation":{"id":7,"access_tokens_url":"https://api.github.com/app/installations/7/access_tokens"},"token":"[redacted]","comment":{"body":"deploy with password=[redacted]"}}
}

func ExampleRedactHeaders() {
	h := archive.RedactHeaders(map[string][]string{"X-Hub-Signature-256": {"sha256=0123"}, "X-Github-Event": {"push"}})
	fmt.Println(h["X-Hub-Signature-256"], h["X-Github-Event"])
	// Output:
	// [[redacted]] [push]
}
