package source

// Fuzz targets of the two doors through which a sender's HTTP request
// reaches opkit: a webhook delivery (FuzzWebhookDelivery) and a request
// to a cloudEvents source (FuzzCloudEvents). Each input is a request as
// net/http's server hands it over (a header block and a body, parsed by
// http.ReadRequest; what the server itself answers 400 is skipped), read
// as internal/delivery's Receiver reads it.

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// fuzzBound is the longest one input may take to read.
const fuzzBound = 2 * time.Second

// maxReason bounds a refusal's reason: it is answered to the sender and
// recorded, and quotes the sender's text only clipped.
const maxReason = 1024

// fuzzRequest is the request net/http's server hands a handler for a
// header block (Name: value lines) and a body: a Content-Length is added
// when the block says neither it nor a Transfer-Encoding. It is nil for
// one the server answers itself (400: a malformed request line, header
// name or value).
func fuzzRequest(block string, body []byte) *http.Request {
	var b bytes.Buffer
	b.WriteString("POST /hooks/notifier/github HTTP/1.1\r\nHost: opkit.example\r\n")
	if block = strings.TrimRight(block, "\r\n"); block != "" {
		b.WriteString(block)
		b.WriteString("\r\n")
	}
	if lower := strings.ToLower(block); !strings.Contains(lower, "content-length") && !strings.Contains(lower, "transfer-encoding") {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	r, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil
			}
		}
	}
	return r
}

// checkRefusal fails unless err is a *Refusal of one of statuses whose
// reason is short UTF-8 text holding one of words: what the sender and
// the archive's readers are told. It returns the refusal.
func checkRefusal(t *testing.T, what string, err error, statuses []int, words ...string) Refusal {
	t.Helper()
	var ref *Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("%s: %T %v is not a *Refusal", what, err, err)
	}
	if !slices.Contains(statuses, ref.Status) {
		t.Errorf("%s: status %d, want one of %v (%q)", what, ref.Status, statuses, ref.Reason)
	}
	switch {
	case ref.Reason == "" || ref.Error() != ref.Reason:
		t.Fatalf("%s: refused with the reason %q (Error %q)", what, ref.Reason, ref.Error())
	case !utf8.ValidString(ref.Reason):
		t.Errorf("%s: the reason %q is not UTF-8", what, ref.Reason)
	case len(ref.Reason) > maxReason:
		t.Errorf("%s: a reason of %d bytes (more than %d): %.200q...", what, len(ref.Reason), maxReason, ref.Reason)
	}
	for _, w := range words {
		if strings.Contains(ref.Reason, w) {
			return *ref
		}
	}
	t.Errorf("%s: the reason %q names none of %q", what, ref.Reason, words)
	return *ref
}

// checkReencodes fails unless v, a value as encoding/json decodes it,
// encodes as JSON and decodes back to itself, nesting at most
// jsondepth.Max.
func checkReencodes(t *testing.T, what string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: accepted, and its payload does not encode as JSON: %v", what, err)
	}
	var back any
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("%s: the payload encoded as %.200q decodes as another (%v)", what, data, err)
	}
	if d, _ := fuzzcheck.JSONDepth(data); d > jsondepth.Max {
		t.Fatalf("%s: accepted a payload %d deep", what, d)
	}
}

// checkPayload checks Payload(body) against encoding/json's own reading:
// JSON nested at most jsondepth.Max deep is accepted and re-encodes (but
// for a number past float64's range, refused saying so); anything else
// is a 400 naming what it is.
func checkPayload(t *testing.T, body []byte) {
	t.Helper()
	var payload any
	var err error
	fuzzcheck.Within(t, "Payload", fuzzBound, func() { payload, err = Payload(body) })
	depth, valid := fuzzcheck.JSONDepth(body)
	switch {
	case !valid:
		if err == nil {
			t.Fatalf("Payload accepted %.200q, which is not JSON", body)
		}
		checkRefusal(t, "Payload", err, []int{http.StatusBadRequest}, "the body is not JSON", "the body is nested deeper")
	case depth > jsondepth.Max:
		if err == nil {
			t.Fatalf("Payload accepted JSON %d deep, past the limit of %d", depth, jsondepth.Max)
		}
		checkRefusal(t, "Payload", err, []int{http.StatusBadRequest}, fmt.Sprintf("nested deeper than %d", jsondepth.Max))
	case err != nil:
		ref := checkRefusal(t, "Payload", err, []int{http.StatusBadRequest}, "number")
		if strings.Contains(ref.Reason, "not JSON") {
			t.Errorf("Payload refused valid JSON %.200q saying it is not JSON: %q", body, ref.Reason)
		}
	default:
		checkReencodes(t, "Payload", payload)
	}
}

// The sources of FuzzWebhookDelivery, as internal/definition compiles a
// webhook source's github, hmac and bearer verifications.
var fuzzWebhookSources = []*definition.EventSource{
	{Name: "github", Kind: definition.KindWebhook, Verify: definition.VerifyGitHub,
		SignatureHeader: definition.GitHubSignatureHeader, SignaturePrefix: "sha256=",
		DeliveryHeader: definition.GitHubDeliveryHeader, EventHeader: definition.GitHubEventHeader},
	{Name: "hmac", Kind: definition.KindWebhook, Verify: definition.VerifyHMAC,
		SignatureHeader: "X-Signature", DeliveryHeader: "X-Delivery-Id", EventHeader: "X-Event-Type"},
	{Name: "bearer", Kind: definition.KindWebhook, Verify: definition.VerifyBearer},
}

var fuzzSecret = []byte("s3cret")

// webhookDelivery is what a webhook source reads of an accepted delivery.
type webhookDelivery struct {
	body      []byte
	id, event string
	payload   any
	headers   map[string]string
}

// receiveWebhook reads a delivery as internal/delivery's Receiver.check
// does: the body within the limit, the content type, the delivery id and
// event, the sender's signature or token, then the payload. step names
// the check that refused it.
func receiveWebhook(src *definition.EventSource, r *http.Request) (d webhookDelivery, step string, err error) {
	body, err := ReadBody(r, src.MaxBodyBytes)
	d.body = body
	if err != nil {
		return d, "read", err
	}
	if err := CheckContentType(r.Header); err != nil {
		return d, "content type", err
	}
	var idErr error
	d.id, d.event, idErr = Identity(src, r.Header)
	if err := Verify(src, fuzzSecret, r.Header, body); err != nil {
		return d, "verify", err
	}
	if idErr != nil {
		return d, "identity", idErr
	}
	if d.payload, err = Payload(body); err != nil {
		return d, "payload", err
	}
	d.headers = Headers(r.Header)
	return d, "", nil
}

// FuzzWebhookDelivery: a webhook delivery, its header block and body as
// the sender wrote them, to a github, hmac or bearer source (kind) of a
// limit (0: 1 MiB), signed with the source's secret when sign is set. A
// delivery is refused with a *Refusal naming what is wrong, or accepted
// with its delivery id, event, a payload that re-encodes as JSON nested
// at most jsondepth.Max, and a signature or token made with the secret.
func FuzzWebhookDelivery(f *testing.F) {
	push := `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"76ae82c7b1a177c8d03f9e96e0adf2466113728f",` +
		`"repository":{"id":186853002,"node_id":"MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=","name":"deploy-notifier","full_name":"packit/deploy-notifier","private":false,` +
		`"owner":{"name":"packit","login":"packit","id":21031067,"type":"Organization"},"html_url":"https://github.com/packit/deploy-notifier","default_branch":"main"},` +
		`"pusher":{"name":"ann","email":"ann@example.com"},"sender":{"login":"ann","id":1,"type":"User","site_admin":false},` +
		`"created":false,"deleted":false,"forced":false,"base_ref":null,"compare":"https://github.com/packit/deploy-notifier/compare/6113728f27ae...76ae82c7b1a1",` +
		`"commits":[{"id":"76ae82c7b1a177c8d03f9e96e0adf2466113728f","tree_id":"f9d2a07e9488b91af2641b26b9407fe22a451433","distinct":true,` +
		`"message":"Deploy api:1.4.2\n\nSigned-off-by: Ann <ann@example.com>","timestamp":"2025-01-02T03:04:05+01:00",` +
		`"author":{"name":"Ann","email":"ann@example.com","username":"ann"},"added":[],"removed":[],"modified":["deploy/api.yaml"]}],` +
		`"head_commit":{"id":"76ae82c7b1a177c8d03f9e96e0adf2466113728f","message":"Deploy api:1.4.2","timestamp":"2025-01-02T03:04:05+01:00"}}`
	pullRequest := `{"action":"opened","number":2,"pull_request":{"url":"https://api.github.com/repos/packit/deploy-notifier/pulls/2","id":279147437,` +
		`"number":2,"state":"open","locked":false,"title":"Update the README with new information.","user":{"login":"ann","id":1},` +
		`"body":"This is a pretty simple change that we need to pull into main.","created_at":"2025-01-02T03:04:05Z","merged_at":null,` +
		`"head":{"label":"ann:changes","ref":"changes","sha":"34c5c7793cb3b279e22454cb6750c80560547b3a"},` +
		`"base":{"label":"packit:main","ref":"main","sha":"a10867b14bb761a232cd80139fbd4c0d33264240"},"draft":false,"labels":[{"id":208045946,"name":"bug","default":true}],` +
		`"additions":1,"deletions":1,"changed_files":1},"repository":{"id":186853002,"full_name":"packit/deploy-notifier"},"sender":{"login":"ann","id":1}}`
	issueComment := `{"action":"created","issue":{"number":7,"title":"Deploy","labels":[]},"comment":{"id":1,"body":"/deploy api 1.4.2","user":{"login":"ann"}},` +
		`"repository":{"full_name":"packit/deploy-notifier"},"sender":{"login":"ann"}}`
	ping := `{"zen":"Design for failure.","hook_id":292430182,"hook":{"type":"Repository","id":292430182,"name":"web","active":true,` +
		`"events":["push","pull_request"],"config":{"content_type":"json","insecure_ssl":"0","url":"https://hooks.example.com/hooks/notifier/github"}},` +
		`"repository":{"full_name":"packit/deploy-notifier"},"sender":{"login":"ann"}}`
	github := func(event, delivery, body string, signed bool) string {
		h := "Accept: */*\r\nContent-Type: application/json\r\nUser-Agent: GitHub-Hookshot/044aadd\r\n" +
			"X-GitHub-Delivery: " + delivery + "\r\nX-GitHub-Event: " + event + "\r\nX-GitHub-Hook-ID: 292430182\r\n" +
			"X-GitHub-Hook-Installation-Target-ID: 186853002\r\nX-GitHub-Hook-Installation-Target-Type: repository\r\n"
		if signed {
			h += "X-Hub-Signature-256: " + GitHubSignature(fuzzSecret, []byte(body)) + "\r\n"
		}
		return h
	}
	for _, c := range []struct {
		kind  uint8
		block string
		body  string
		sign  bool
		limit uint16
	}{
		// GitHub's deliveries, signed in their headers, or signed by
		// the target.
		{0, github("push", "72d3162e-cc78-11e3-81ab-4c9367dc0958", push, true), push, false, 0},
		{0, github("pull_request", "d1f3c2a0-4b5e-11ef-8a1b-0242ac120002", pullRequest, false), pullRequest, true, 0},
		{0, github("issue_comment", "9a1c7e40-4b5e-11ef-9f6a-7c1e5212a3f1", issueComment, true), issueComment, false, 0},
		{0, github("ping", "c0ffee00-0000-11ef-8000-000000000001", ping, false), ping, true, 0},
		// Forged: another body under the signature, a signature of sha1.
		{0, github("push", "72d3162e-cc78-11e3-81ab-4c9367dc0958", issueComment, true), push, false, 0},
		{0, github("push", "72d3162e", push, false) + "X-Hub-Signature: sha1=2fd4e1c67a2d28fced849ee1bb76e7391b93eb12\r\n", push, false, 0},
		// GitHub's other content type, and none.
		{0, strings.Replace(github("push", "72d3162e", "", false), "application/json", "application/x-www-form-urlencoded", 1), "payload=" + url.QueryEscape(push), true, 0},
		{0, "X-GitHub-Delivery: 72d3162e\r\nX-GitHub-Event: push\r\n", push, true, 0},
		// Delivery ids that are no ids; no delivery id.
		{0, github("push", "../../etc/passwd", push, false), push, true, 0},
		{0, "Content-Type: application/json\r\nX-GitHub-Event: push\r\n", push, true, 0},
		{0, github("push", strings.Repeat("7", 201), push, false), push, true, 0},
		// Bodies: too large (declared, or read), empty, not JSON, deep,
		// huge numbers, duplicate keys, invalid UTF-8.
		{0, github("push", "72d3162e", "", false), push, true, 64},
		{0, github("push", "72d3162e", "", false) + "Content-Length: 100000000\r\n", push, true, 0},
		{0, github("push", "72d3162e", "", false) + "Transfer-Encoding: chunked\r\n", "5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n", true, 0},
		{0, github("push", "72d3162e", "", false) + "Transfer-Encoding: chunked\r\n", push, true, 0},
		{0, github("push", "72d3162e", "", false), "", true, 0},
		{0, github("push", "72d3162e", "", false), "action=created", true, 0},
		{0, github("push", "72d3162e", "", false), strings.Repeat("[", 100) + strings.Repeat("]", 100), true, 0},
		{0, github("push", "72d3162e", "", false), strings.Repeat(`{"a":`, 101) + "1" + strings.Repeat("}", 101), true, 0},
		{0, github("push", "72d3162e", "", false), strings.Repeat("[", 10_001), true, 0},
		{0, github("push", "72d3162e", "", false), `{"text":"` + strings.Repeat("[", 500) + `\"]"}`, true, 0},
		{0, github("push", "72d3162e", "", false), `{"size":1e400,"n":-123456789012345678901234567890}`, true, 0},
		{0, github("push", "72d3162e", "", false), `{"ref":"a","ref":"b","ref":{"c":[]}}`, true, 0},
		{0, github("push", "72d3162e", "", false), "{\"body\":\"caf\xe9 \xff\xfe\",\"\xc3\":1}", true, 0},
		{0, github("push", "72d3162e", "", false), "\xef\xbb\xbf{}", true, 0},
		// hmac and bearer sources.
		{1, "Content-Type: application/vnd.acme+json; charset=utf-8\r\nX-Delivery-Id: 0b6f0d62\r\nX-Event-Type: deploy.finished\r\n",
			`{"service":"api","version":"1.4.2","status":"ok"}`, true, 0},
		{1, "Content-Type: application/json\r\nX-Delivery-Id: 0b6f0d62\r\nX-Signature: " + hex.EncodeToString(Sign(fuzzSecret, []byte(`{}`))) + "\r\n", `{}`, false, 0},
		{2, "Content-Type: application/json\r\nAuthorization: Bearer s3cret\r\n", `{"alert":"HighErrorRate","severity":"page"}`, false, 0},
		{2, "Content-Type: application/json\r\nAuthorization: Basic czNjcmV0\r\n", `{}`, false, 0},
		{2, "Content-Type: application/json\r\nAuthorization: Bearer  s3cret \r\n", `[]`, false, 0},
	} {
		f.Add(c.kind, c.block, []byte(c.body), c.sign, c.limit)
	}
	f.Fuzz(func(t *testing.T, kind uint8, block string, body []byte, sign bool, limit uint16) {
		src := *fuzzWebhookSources[int(kind)%len(fuzzWebhookSources)]
		src.MaxBodyBytes = v1alpha1.DefaultWebhookBody
		if limit > 0 {
			src.MaxBodyBytes = int64(limit)
		}
		r := fuzzRequest(block, body)
		if r == nil {
			return // answered 400 by net/http
		}
		if sign {
			if err := Authorize(&src, fuzzSecret, body, r.Header); err != nil {
				t.Fatal(err)
			}
		}
		h := r.Header.Clone()
		var d webhookDelivery
		var step string
		var err error
		fuzzcheck.Within(t, "reading the delivery", fuzzBound, func() { d, step, err = receiveWebhook(&src, r) })
		checkPayload(t, body)

		if err != nil {
			statuses := []int{http.StatusBadRequest}
			var words []string
			switch step {
			case "read":
				statuses, words = []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, []string{"body"}
			case "content type":
				statuses, words = []int{http.StatusUnsupportedMediaType}, []string{"content type"}
			case "identity":
				words = []string{src.DeliveryHeader, src.EventHeader}
			case "verify":
				statuses, words = []int{http.StatusUnauthorized}, []string{"bad signature", "bad token"}
			case "payload":
				words = []string{"the body"}
			}
			checkRefusal(t, step, err, statuses, words...)
			return
		}

		// Accepted: a body within the limit, of JSON's content type, ...
		if int64(len(d.body)) > src.MaxBodyBytes {
			t.Errorf("accepted a body of %d bytes, past the limit of %d", len(d.body), src.MaxBodyBytes)
		}
		if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			t.Errorf("accepted a delivery of content type %q", h.Get("Content-Type"))
		}
		// ... its delivery id and event as the sender's headers say, ...
		if src.DeliveryHeader != "" && (d.id != h.Get(src.DeliveryHeader) || !fuzzcheck.PrintableID(d.id)) {
			t.Errorf("accepted with the delivery id %q (header %s %q): want 1-200 printable characters", d.id, src.DeliveryHeader, h.Get(src.DeliveryHeader))
		}
		if src.EventHeader != "" && (d.event != h.Get(src.EventHeader) || (d.event != "" && !fuzzcheck.PrintableID(d.event))) {
			t.Errorf("accepted with the event %q (header %s %q)", d.event, src.EventHeader, h.Get(src.EventHeader))
		}
		// ... made by the holder of the secret, ...
		switch src.Verify {
		case definition.VerifyBearer:
			if tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); !ok || strings.TrimSpace(tok) != string(fuzzSecret) {
				t.Errorf("accepted with Authorization %q, not the secret", h.Get("Authorization"))
			}
		default:
			sig, ok := strings.CutPrefix(h.Get(src.SignatureHeader), src.SignaturePrefix)
			mac, err := hex.DecodeString(strings.TrimSpace(sig))
			if !ok || err != nil || !hmac.Equal(mac, Sign(fuzzSecret, d.body)) {
				t.Errorf("accepted with %s %q, not the body's signature", src.SignatureHeader, h.Get(src.SignatureHeader))
			}
		}
		// ... its payload JSON, and its headers by lower-case name.
		checkReencodes(t, "the delivery", d.payload)
		for k, v := range d.headers {
			if k != strings.ToLower(k) || v != h.Get(k) {
				t.Errorf("header %q: %q, want the lower-case name and the first value (%q)", k, v, h.Get(k))
			}
		}
		if len(d.headers) != len(h) {
			t.Errorf("%d headers of %d", len(d.headers), len(h))
		}
	})
}

// FuzzCloudEvents: a request to a cloudEvents source, its header block and
// body as the sender wrote them, the source's batch Split or Refuse: in
// binary mode (ce-* headers), structured (application/cloudevents+json)
// or a batch (application/cloudevents-batch+json). It is refused with a
// *Refusal naming what is wrong, or read as events that each have an id,
// source and type, a delivery id made of them, attributes of text, and a
// payload of JSON nested at most jsondepth.Max deep.
func FuzzCloudEvents(f *testing.F) {
	structured := `{"specversion":"1.0","type":"com.github.pull_request.opened","source":"https://github.com/cloudevents/spec/pull",` +
		`"subject":"123","id":"A234-1234-1234","time":"2018-04-05T17:31:00Z","comexampleextension1":"value","comexampleothervalue":5,` +
		`"datacontenttype":"text/xml","data":"<much wow=\"xml\"/>"}`
	structuredJSON := `{"specversion":"1.0","id":"42","source":"/ci/builds","type":"dev.ci.build.finished","subject":"main",` +
		`"time":"2025-01-02T03:04:05.123456789+01:00","datacontenttype":"application/json","attempt":3,"retried":false,` +
		`"data":{"status":"ok","image":"api:1.4.2","durations":[1.5,2,3e2]}}`
	b64 := `{"specversion":"1.0","id":"7","source":"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66","type":"com.example.object.deleted.v2",` +
		`"datacontenttype":"application/json","data_base64":"eyJrZXkiOiJ2YWx1ZSJ9"}`
	binary := "Ce-Specversion: 1.0\r\nCe-Type: com.example.someevent\r\nCe-Time: 2018-04-05T03:56:24Z\r\nCe-Id: 1234-1234-1234\r\n" +
		"Ce-Source: %2Fmycontext%2Fsubcontext\r\nCe-Subject: caf%C3%A9\r\nCe-Traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
	for _, c := range []struct {
		block string
		body  string
		split bool
	}{
		// Binary mode, as the HTTP binding's examples.
		{"Content-Type: application/json; charset=utf-8\r\n" + binary, `{"much":"wow"}`, false},
		{"Content-Type: text/xml; charset=utf-8\r\n" + binary, `<much wow="xml"/>`, false},
		{binary, "", false},
		{"Content-Type: application/octet-stream\r\n" + binary, "\x89PNG\r\n\x1a\n\x00\x00", false},
		{"Content-Type: application/json\r\n" + binary + "Ce-Exampleext: a%ZZ\r\n", `{}`, false},
		{"Content-Type: application/json\r\nCe-Specversion: 0.3\r\nCe-Id: 1\r\nCe-Source: /x\r\nCe-Type: t\r\n", `{}`, false},
		{"Content-Type: application/json\r\nCe-Specversion: 1.0\r\nCe-Id: 1\r\nCe-Source: /x\r\nCe-Type: t\r\nCe-Time: yesterday\r\n", `{}`, false},
		{"Content-Type: application/json\r\n", `{"much":"wow"}`, false},
		// Structured mode.
		{"Content-Type: application/cloudevents+json; charset=UTF-8\r\n", structured, false},
		{"Content-Type: application/cloudevents+json\r\nCe-Subject: forged\r\n", structuredJSON, false},
		{"Content-Type: application/cloudevents+json\r\n", b64, false},
		{"Content-Type: application/cloudevents+json\r\n", `{"specversion":"1.0","id":"1","source":"/x","type":"t","data":{},"data_base64":"e30="}`, false},
		{"Content-Type: application/cloudevents+json\r\n", `{"specversion":"1.0","id":"1","source":"/x","type":"t","ext":{"nested":true}}`, false},
		{"Content-Type: application/cloudevents+json\r\n", `{"specversion":"1.0","id":"1","id":"2","source":"/x","type":"t","data":1e400}`, false},
		{"Content-Type: application/cloudevents+json\r\n", `{"specversion":"1.0","id":"1","source":"/x","type":"t","data":` + strings.Repeat("[", 101) + strings.Repeat("]", 101) + `}`, false},
		{"Content-Type: application/cloudevents+json\r\n", "{\"specversion\":\"1.0\",\"id\":\"\xff\",\"source\":\"/x\",\"type\":\"t\\u0007\"}", false},
		{"Content-Type: application/cloudevents+json\r\n", `{"specversion":"1.0","id":"1","source":"/x","type":"t","` + strings.Repeat("ext", 700) + `":[]}`, false},
		{"Content-Type: application/cloudevents+json\r\n", `null`, false},
		{"Content-Type: application/cloudevents+json\r\n", ``, false},
		{"Content-Type: application/cloudevents+protobuf\r\n", structured, false},
		// Batches.
		{"Content-Type: application/cloudevents-batch+json\r\n", "[" + structured + "," + structuredJSON + "," + b64 + "]", true},
		{"Content-Type: application/cloudevents-batch+json\r\n", "[" + structured + "]", false},
		{"Content-Type: application/cloudevents-batch+json\r\n", `[]`, true},
		{"Content-Type: application/cloudevents-batch+json\r\n", `[` + structuredJSON + `,{"specversion":"1.0"}]`, true},
		{"Content-Type: application/cloudevents-batch+json\r\n", strings.Repeat("[", 10_001), true},
	} {
		f.Add(c.block, []byte(c.body), c.split)
	}
	f.Fuzz(func(t *testing.T, block string, body []byte, split bool) {
		r := fuzzRequest(block, body)
		if r == nil {
			return // answered 400 by net/http
		}
		h := r.Header
		var events []CloudEvent
		var batch bool
		var err error
		fuzzcheck.Within(t, "reading the events", fuzzBound, func() {
			if body, err = ReadBody(r, v1alpha1.DefaultWebhookBody); err != nil {
				return
			}
			if _, err = CloudEventsMode(h, split); err != nil {
				return
			}
			events, batch, err = CloudEvents(h, body, split)
		})

		ct := h.Get("Content-Type")
		mt, _, ctErr := mime.ParseMediaType(ct)
		structuredMode := ctErr == nil && mt == ContentTypeCloudEvent
		batchMode := ctErr == nil && mt == ContentTypeCloudEventBatch
		if err != nil {
			ref := checkRefusal(t, "CloudEvents", err, []int{http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusRequestEntityTooLarge},
				"content type", "batch", "header", "attribute", "the body", "data", "the event")
			if ct != "" && ctErr != nil && ref.Status != http.StatusUnsupportedMediaType {
				t.Errorf("content type %q, which cannot be read: %d %q, want a 415", ct, ref.Status, ref.Reason)
			}
			return
		}
		switch {
		case ct != "" && ctErr != nil:
			t.Fatalf("accepted a request of content type %q, which cannot be read", ct)
		case batchMode && !split:
			t.Fatalf("a source that refuses batches accepted one")
		case batch != batchMode:
			t.Fatalf("batch %v for content type %q", batch, ct)
		case len(events) == 0 || (!batch && len(events) != 1):
			t.Fatalf("accepted as %d events (batch %v)", len(events), batch)
		case !structuredMode && !batchMode && strings.HasPrefix(mt, "application/cloudevents"):
			t.Fatalf("accepted an event format other than JSON: %q", ct)
		}
		if d, ok := fuzzcheck.JSONDepth(body); (structuredMode || batchMode) && (!ok || d > jsondepth.Max) {
			t.Fatalf("accepted a body that is not JSON at most %d deep (%d, valid %v): %.200q", jsondepth.Max, d, ok, body)
		}
		for i, ev := range events {
			what := fmt.Sprintf("event %d", i+1)
			a := ev.Attributes
			switch {
			case ev.ID == "" || ev.Source == "" || ev.Type == "":
				t.Fatalf("%s: id %q, source %q, type %q: all are required", what, ev.ID, ev.Source, ev.Type)
			case a["id"] != ev.ID || a["source"] != ev.Source || a["type"] != ev.Type || a["specversion"] != CloudEventsSpecVersion:
				t.Fatalf("%s: attributes %q disagree with id %q, source %q, type %q", what, a, ev.ID, ev.Source, ev.Type)
			case len(ev.Type) > 200:
				t.Fatalf("%s: a type of %d bytes", what, len(ev.Type))
			case !fuzzcheck.PrintableID(ev.DeliveryID):
				t.Fatalf("%s: the delivery id %q is not 1-200 printable characters", what, ev.DeliveryID)
			}
			// The delivery id is the source and id, or their hash.
			if !strings.HasPrefix(ev.DeliveryID, "sha256:") {
				id, src, _ := strings.Cut(ev.DeliveryID, "@")
				id, err1 := url.PathUnescape(id)
				src, err2 := url.PathUnescape(src)
				if err1 != nil || err2 != nil || id != ev.ID || src != ev.Source {
					t.Fatalf("%s: the delivery id %q is not of id %q and source %q", what, ev.DeliveryID, ev.ID, ev.Source)
				}
			}
			for name, v := range a {
				if !attributeName(name) || !utf8.ValidString(v) || control(v) {
					t.Errorf("%s: attribute %q = %q: want a name of lower-case letters and digits, UTF-8 text without control characters", what, name, v)
				}
			}
			if tm, ok := a["time"]; ok {
				if _, err := time.Parse(time.RFC3339Nano, tm); err != nil {
					t.Errorf("%s: time %q: %v", what, tm, err)
				}
			}
			// Its payload is JSON, the Data handlers read.
			var data any
			if err := json.Unmarshal(ev.Payload, &data); err != nil || !reflect.DeepEqual(data, ev.Data) {
				t.Fatalf("%s: the payload %.200q is not JSON of its data %v: %v", what, ev.Payload, ev.Data, err)
			}
			if d, _ := fuzzcheck.JSONDepth(ev.Payload); d > jsondepth.Max {
				t.Fatalf("%s: a payload %d deep", what, d)
			}
			checkReencodes(t, what, ev.Data)
			// Its headers: the request's, the ce-* ones its attributes.
			eh := ev.Headers(h)
			for k, vs := range eh {
				if !isCEHeader(k) {
					continue
				}
				if name := strings.ToLower(k[len("ce-"):]); len(vs) != 1 || vs[0] != a[name] {
					t.Errorf("%s: header %s %q, attribute %s %q", what, k, vs, name, a[name])
				}
			}
			if n := len(Headers(eh)); n < len(a) {
				t.Errorf("%s: %d headers for %d attributes", what, n, len(a))
			}
		}
	})
}
