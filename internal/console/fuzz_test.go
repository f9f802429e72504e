package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// The console's doors to a browser: the query strings of its pages (the
// filters and cursors of /events, of a source's page and of a timeline,
// a log's page and search, the failures' window) and the fields of its
// action forms (decide, run again, redeliver, and where an action sends
// its user back). For any of them: no panic, an answer within a bound,
// never a 5xx for what a browser sent; a refusal is a 4xx page whose
// notice says what is wrong; and what is accepted is consistent (a
// filter's links read back as the filter, a form's annotation is one the
// API server takes, a way back stays on the console).

// fuzzBudget is how long one input may take.
const fuzzBudget = 5 * time.Second

func checkTime(t *testing.T, start time.Time, what string) {
	t.Helper()
	if took := time.Since(start); took > fuzzBudget {
		t.Fatalf("%s took %s, over %s", what, took.Round(time.Millisecond), fuzzBudget)
	}
}

// refusal checks that err is an httpError of a 4xx with a message, and
// returns it.
func refusal(t *testing.T, what string, err error) *httpError {
	t.Helper()
	var he *httpError
	if !errors.As(err, &he) {
		t.Fatalf("%s: %T %v; want an httpError (a 4xx that says why)", what, err, err)
	}
	if he.status < 400 || he.status > 499 || strings.TrimSpace(he.msg) == "" {
		t.Fatalf("%s: %d %q; want a 4xx that says why", what, he.status, he.msg)
	}
	return he
}

// FuzzDeliveryFilter reads the query of /events and of a source's page:
// what it refuses is a 400 naming the parameter; what it reads, its
// links (the table's pages, the outcome and refused filters) read back
// as the same filter.
func FuzzDeliveryFilter(f *testing.F) {
	id := archive.NewID(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	for _, q := range []string{
		"", "operator=printer", "operator=printer&source=github&outcome=handled&refused=1&cursor=" + id,
		"outcome=Refused&refused=on", "outcome=nope", "cursor=x", "cursor=" + strings.ToUpper(id), "refused=&outcome=",
		"operator=a%26b&source=%3F%23&cursor=" + id + "&cursor=x", "outcome=PENDING&refused=1", "%zz=1&operator=a;b",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, _ := url.ParseQuery(query) // as r.URL.Query() reads it
		filter, err := readDeliveryFilter(q)
		if err != nil {
			he := refusal(t, fmt.Sprintf("readDeliveryFilter(%q)", query), err)
			if he.status != http.StatusBadRequest || !strings.Contains(he.msg, "outcome") && !strings.Contains(he.msg, "cursor") {
				t.Fatalf("readDeliveryFilter(%q): %d %q; want a 400 naming the parameter", query, he.status, he.msg)
			}
			return
		}
		if filter.Cursor != "" && !archive.ValidID(filter.Cursor) {
			t.Fatalf("readDeliveryFilter(%q): cursor %q", query, filter.Cursor)
		}
		if filter.Outcome != "" && !slices.Contains(deliveryOutcomes, filter.Outcome) {
			t.Fatalf("readDeliveryFilter(%q): outcome %q", query, filter.Outcome)
		}
		_ = filter.conflict()
		if dq := filter.query(); dq.Cursor != filter.Cursor || dq.Operator != filter.Operator || dq.Limit != deliveriesPerPage {
			t.Fatalf("readDeliveryFilter(%q): query %+v", query, dq)
		}
		// Its links read back as itself: the events list's with its
		// operator and source, a source's page's without (its path says).
		for _, all := range []bool{true, false} {
			link := filter.link(filter.Cursor, all)
			back, err := url.ParseQuery(strings.TrimPrefix(link, "?"))
			if err != nil || !strings.HasPrefix(link, "?") {
				t.Fatalf("link %q of %+v: %v", link, filter, err)
			}
			again, err := readDeliveryFilter(back)
			if err != nil {
				t.Fatalf("link %q of %+v, read again: %v", link, filter, err)
			}
			want := filter
			if !all {
				want.Operator, want.Source = "", ""
			}
			if again != want {
				t.Fatalf("link %q of %+v reads as %+v", link, want, again)
			}
		}
	})
}

// decidingObject is an object whose state asks a person: the decide
// form's checks read it.
func decidingObject() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Database",
		"metadata": map[string]any{"namespace": "team-a", "name": "db", "resourceVersion": "42"},
		"status": map[string]any{"state": map[string]any{
			"name": "NeedsAttention", "seq": int64(3), "since": "2026-11-27T10:00:00Z",
			"question": "Roll back, or accept the new version?", "choices": []any{"RollingBack", "Ready"},
		}},
	}}
	return obj
}

// checkAnnotation checks that the API server takes the annotations of a
// merge patch, as it would the patch's.
func checkAnnotation(t *testing.T, what string, patch []byte) {
	t.Helper()
	var p struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &p); err != nil || len(p.Metadata.Annotations) == 0 {
		t.Fatalf("%s: the patch %s: %v", what, patch, err)
	}
	if errs := validation.ValidateAnnotations(p.Metadata.Annotations, field.NewPath("metadata", "annotations")); len(errs) > 0 {
		t.Fatalf("%s: accepted, but the API server refuses its annotation: %v", what, errs.ToAggregate())
	}
}

// consoleHost is where a fuzzed console is served, for its redirects.
const consoleHost = "console.example:8080"

// landsOn is the host a browser goes to for a Location header from a
// page of consoleHost: it reads the URL as the URL standard says (tabs
// and newlines removed, leading and trailing spaces and controls
// trimmed, a backslash a slash).
func landsOn(location string) string {
	clean := strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\n', '\r':
			return -1
		case '\\':
			return '/'
		}
		return r
	}, location)
	clean = strings.TrimFunc(clean, func(r rune) bool { return r <= ' ' })
	base, _ := url.Parse("http://" + consoleHost + "/operators/printer/objects/team-a/printer-1/retry")
	u, err := url.Parse(clean)
	if err != nil {
		return "(no URL: " + err.Error() + ")"
	}
	return base.ResolveReference(u).Host
}

// FuzzActionForms reads the fields of the action forms as their handlers
// do (a POST's form, any body): a decide form (its seq, state, choice and
// reason, checked against an object that asks), a Run again form, a
// Redeliver form, and the way back of an action. A refusal is a 4xx that
// says why; a decision or re-run accepted makes an annotation the API
// server takes; a way back stays on the console.
func FuzzActionForms(f *testing.F) {
	for _, body := range []string{
		"csrf=x&state=NeedsAttention&seq=3&choose=RollingBack&reason=the+checks+failed",
		"state=NeedsAttention&seq=3&choose=Ready&reason=%20", "seq=x", "seq=99999999999999999999", "seq=-3&state=Ready",
		"state=NeedsAttention&seq=3&choose=Nope&reason=r", "state=NeedsAttention&seq=+3&choose=Ready&reason=r",
		"reason=" + strings.Repeat("a", 1001) + "&seq=3&state=NeedsAttention&choose=Ready",
		"reason=" + strings.Repeat("%C3%A9", 600) + "&sameInput=1",
		"reason=" + strings.Repeat("x", 300<<10) + "&sameInput=1",
		"back=/operators/printer", "back=//evil.example/", "back=/%5Cevil.example", "back=/%09/evil.example", "back=/%0A/evil.example",
		"back=https://evil.example/", "back=/\\evil.example", "back=", "back=/ok?x=1#frag", "back=%2F%2Fevil.example",
		"a=1&a=2;b", "%gg=1",
	} {
		f.Add(body)
	}
	obj := decidingObject()
	fallback := objectURL("printer", "team-a", "printer-1")
	f.Fuzz(func(t *testing.T, body string) {
		start := time.Now()
		defer checkTime(t, start, fmt.Sprintf("the forms of a %d-byte body", len(body)))
		// As a POST's form is read: url.ParseQuery keeps what it reads
		// of a body it also says is malformed.
		form, _ := url.ParseQuery(body)

		d, err := readDecision(form)
		if err != nil {
			he := refusal(t, "readDecision", err)
			if he.status != http.StatusBadRequest || !strings.Contains(he.msg, "seq") {
				t.Fatalf("readDecision(%q): %d %q; want a 400 naming seq", body, he.status, he.msg)
			}
		} else if err := checkDecision(obj, d); err != nil {
			_ = refusal(t, "checkDecision", err)
		} else {
			st, _ := objectState(obj)
			switch {
			case d.State != st.Name || d.Seq != st.Seq || !slices.Contains(st.Choices, d.Choose):
				t.Fatalf("decision %+v accepted on state %s (visit %d), choices %v", d, st.Name, st.Seq, st.Choices)
			case strings.TrimSpace(d.Reason) == "" || len(d.Reason) > maxReason:
				t.Fatalf("decision %+v accepted with a reason of %d bytes", d, len(d.Reason))
			}
			sent := v1alpha1.Decision{State: d.State, Seq: d.Seq, Choose: d.Choose, Reason: d.Reason, By: "console", At: "2026-11-27T10:00:00Z"}
			checkAnnotation(t, "decision", sent.Patch(obj.GetResourceVersion()))
		}

		if sameInput, reason, err := readRerun(form); err != nil {
			he := refusal(t, "readRerun", err)
			if he.status != http.StatusBadRequest || !strings.Contains(he.msg, "reason") {
				t.Fatalf("readRerun(%q): %d %q; want a 400 naming the reason", body, he.status, he.msg)
			}
		} else {
			req := v1alpha1.Rerun{Request: archive.NewID(start), Run: archive.NewID(start), SameInput: sameInput, Reason: reason, By: "console", At: "2026-11-27T10:00:00Z"}
			checkAnnotation(t, "re-run", req.Patch("42"))
		}

		if reason, err := readRedelivery(form); err != nil {
			he := refusal(t, "readRedelivery", err)
			if he.status != http.StatusBadRequest || !strings.Contains(he.msg, "reason") {
				t.Fatalf("readRedelivery(%q): %d %q; want a 400 naming the reason", body, he.status, he.msg)
			}
		} else if utf8.RuneCountInString(reason) > maxRedeliveryReason {
			t.Fatalf("readRedelivery(%q): a reason of %d characters", body, utf8.RuneCountInString(reason))
		}

		back := backTo(form.Get("back"), fallback)
		r := httptest.NewRequest(http.MethodPost, fallback+"/retry", nil)
		r.Host = consoleHost
		w := httptest.NewRecorder()
		http.Redirect(w, r, back, http.StatusSeeOther)
		if loc := w.Header().Get("Location"); landsOn(loc) != consoleHost {
			t.Fatalf("back=%q: sends the browser to %q, at %s", form.Get("back"), loc, landsOn(loc))
		}
	})
}

// fuzzConsole is a console over a SQLite archive with runs and
// deliveries, and a cluster it cannot reach (a closed port): the pages'
// queries are read before the cluster is, and what the cluster would say
// is a notice.
type fuzzConsole struct {
	s                     *Server
	run, event, delivery  string
	failedRun, runningRun string
}

func newFuzzConsole(f *testing.F) *fuzzConsole {
	f.Helper()
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(f.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = store.Close() })
	c := &fuzzConsole{}
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i, r := range []struct {
		ns, name, handler, trigger string
		outcome                    archive.Outcome
		into                       *string
	}{
		{"team-a", "printer-1", "announce", "create", archive.Succeeded, &c.run},
		{"team-a", "printer-1", "announce", "update", archive.Failed, &c.failedRun},
		{"team-a", "printer-1", "announce", "update", archive.Running, &c.runningRun},
		{"", "printer", "nightly", "schedule", archive.Failed, nil},
		{"", "printer", "deploy", v1alpha1.OnEvent, archive.Succeeded, &c.event},
	} {
		start := base.Add(time.Duration(i) * time.Minute)
		rec := &archive.Run{ID: archive.NewID(start), Operator: "printer", Handler: r.handler, Action: "exec", Trigger: r.trigger,
			APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: r.ns, Name: r.name, UID: "uid-" + r.name, Generation: 1,
			Key: fmt.Sprintf("uid-%s/%d", r.name, i), Attempt: 1, StartedAt: start, Input: json.RawMessage(`{"object":{}}`)}
		if r.ns == "" {
			rec.APIVersion, rec.Kind = "opkit.dev/v1alpha1", "Operator"
		}
		if err := store.Insert(ctx, rec); err != nil {
			f.Fatal(err)
		}
		if err := store.AppendLog(ctx, rec.ID, []byte("\x1b[1mworking\x1b[0m\nline 2: disk full\nline 3\n")); err != nil {
			f.Fatal(err)
		}
		if r.outcome != archive.Running {
			rec.Outcome, rec.FinishedAt = r.outcome, start.Add(time.Second)
			if r.outcome.Failure() {
				rec.Error = "exit status 1"
			}
			if err := store.Finish(ctx, rec); err != nil {
				f.Fatal(err)
			}
		}
		if r.into != nil {
			*r.into = rec.ID
		}
	}
	for i, src := range []string{"github", "github", "gitlab"} {
		at := base.Add(time.Duration(i)*time.Minute + 30*time.Second)
		d := &archive.Delivery{ID: archive.NewID(at), Operator: "printer", Source: src, DeliveryID: fmt.Sprint("d-", i), ReceivedAt: at,
			Outcome: archive.DeliveryPending, Event: "push", Headers: map[string][]string{"X-Hub-Signature-256": {"sha256=0"}}, Payload: []byte(`{"token":"x"}`)}
		if i == 2 {
			d.Outcome, d.Reason = archive.DeliveryRefused, "bad signature"
		}
		if err := store.RecordDelivery(ctx, d); err != nil {
			f.Fatal(err)
		}
		c.delivery = d.ID
	}
	// A closed port: the cluster is refused at once, with no client-side
	// rate limit to wait on.
	s, err := New(Options{Archive: store, Config: &rest.Config{Host: "http://127.0.0.1:1", QPS: -1, Timeout: time.Second},
		RedeliveryNamespace: "opkit-system", CacheTTL: time.Minute, LiveInterval: 10 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	c.s = s
	return c
}

// page is a console's answer.
type page struct {
	code   int
	body   string
	header http.Header
}

// notice is the first notice of an error page, unescaped.
func (p page) notice() string {
	_, after, ok := strings.Cut(p.body, `<p class="notice" role="alert"><span aria-hidden="true">⚠</span> `)
	if !ok {
		return ""
	}
	text, _, _ := strings.Cut(after, "</p>")
	return html.UnescapeString(text)
}

// do sends a request to the console; a stream (/live) ends after a few
// of its checks.
func (c *fuzzConsole) do(method, path, rawQuery, body string) page {
	r := httptest.NewRequest(method, "/", strings.NewReader(body))
	r.URL.Path, r.URL.RawQuery = path, rawQuery
	r.Host = consoleHost
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	ctx, cancel := context.WithTimeout(r.Context(), fuzzBudget)
	if path == "/live" {
		ctx, cancel = context.WithTimeout(r.Context(), 50*time.Millisecond)
	}
	defer cancel()
	w := httptest.NewRecorder()
	c.s.ServeHTTP(w, r.WithContext(ctx))
	return page{w.Code, w.Body.String(), w.Header()}
}

// FuzzPages sends the console's pages any query, and checks the answer:
// never a 5xx; a refusal is a 4xx page whose notice says why, the one
// the page's own reading of its query gives (readDeliveryFilter for the
// deliveries' tables, the cursor of a timeline).
func FuzzPages(f *testing.F) {
	c := newFuzzConsole(f)
	paths := []string{
		"/events", "/operators/printer/sources/github", "/operators/printer/objects/team-a/printer-1", "/failures",
		"/runs/" + c.failedRun, "/runs/" + c.runningRun, "/runs/" + c.failedRun + "/log", "/events/" + c.delivery,
		"/operators/printer", "/", "/live", "/operators/printer/objects/_/printer",
	}
	id := archive.NewID(time.Now())
	for i := range paths {
		f.Add(uint8(i), "")
	}
	// Each query to the pages that read it: a seed per page and query
	// would take the fuzzing's time to play.
	for i, qs := range [][]string{
		{"operator=printer&outcome=Refused&refused=1", "outcome=x", "cursor=" + id},
		{"outcome=handled&cursor=nope"},
		{"cursor=nope", "cursor=" + id, "apiVersion=apps/v1&kind=Deployment", "apiVersion=%2F%2F&kind=x"},
		{"since=1h", "since=-5m", "since=99999999h"},
		{"q=disk", "page=-1", "page=99999999999999999999"},
		{"page=2"},
		{},
		{"redelivery=nosuch"},
		{"state=Ready&page=2"},
		{},
		{"path=/events?outcome=x", "path=//evil.example/", "path=/runs/" + id, "path=http://evil.example/", "path=", "path=/live?path=/live"},
	} {
		for _, q := range qs {
			f.Add(uint8(i), q)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		start := time.Now()
		path := paths[int(which)%len(paths)]
		got := c.do(http.MethodGet, path, query, "")
		what := fmt.Sprintf("GET %s?%s", path, query)
		checkTime(t, start, what)
		if got.code >= 500 {
			t.Fatalf("%s: %d %s", what, got.code, got.notice())
		}
		if path == "/live" {
			if got.code != http.StatusOK && strings.TrimSpace(got.body) == "" {
				t.Fatalf("%s: %d without a word", what, got.code)
			}
			return
		}
		if got.code >= 400 && got.notice() == "" {
			t.Fatalf("%s: %d, a page without a notice that says why:\n%s", what, got.code, got.body)
		}
		q, _ := url.ParseQuery(query)
		var want error
		switch path {
		case "/events", "/operators/printer/sources/github":
			_, want = readDeliveryFilter(q)
		case "/operators/printer/objects/team-a/printer-1", "/operators/printer/objects/_/printer":
			if cursor := q.Get("cursor"); cursor != "" && !archive.ValidID(cursor) {
				want = badRequest("cursor %q", cursor)
			}
		}
		var he *httpError
		if errors.As(want, &he) && (got.code != he.status || !strings.Contains(got.notice(), strings.SplitN(he.msg, ":", 2)[0])) {
			t.Fatalf("%s: %d %q; want %d %q", what, got.code, got.notice(), he.status, he.msg)
		}
		if want == nil && got.code == http.StatusBadRequest {
			t.Fatalf("%s: 400 %q for a query the page reads", what, got.notice())
		}
	})
}

// FuzzActionPosts posts any form to the console's actions, with the
// user's CSRF token or without: a form without it is refused (403) before
// anything is read; one the form's reading refuses is that 4xx, with its
// notice, before the archive or the cluster is asked anything.
func FuzzActionPosts(f *testing.F) {
	c := newFuzzConsole(f)
	paths := []string{
		"/runs/" + c.failedRun + "/rerun", "/events/" + c.delivery + "/redeliver",
		"/operators/printer/objects/team-a/printer-1/retry", "/operators/printer/objects/team-a/printer-1/decide",
		"/operators/printer/objects/team-a/printer-1/nosuch", "/runs/nosuch/rerun", "/operators/printer/rollouts/r/continue",
	}
	for i := range paths {
		for _, body := range []string{"", "reason=why", "reason=" + strings.Repeat("a", 2000), "seq=x&state=s", "back=//evil.example"} {
			f.Add(uint8(i), body, true)
		}
		f.Add(uint8(i), "reason=why", false)
	}
	csrf := c.s.auth.csrf(&user{})
	f.Fuzz(func(t *testing.T, which uint8, body string, withToken bool) {
		start := time.Now()
		path := paths[int(which)%len(paths)]
		form, _ := url.ParseQuery(body)
		form.Del("csrf")
		if withToken {
			form.Set("csrf", csrf)
		}
		got := c.do(http.MethodPost, path, "", form.Encode())
		what := fmt.Sprintf("POST %s %s", path, form.Encode())
		checkTime(t, start, what)
		if got.code >= 400 && got.notice() == "" {
			t.Fatalf("%s: %d, a page without a notice that says why:\n%s", what, got.code, got.body)
		}
		if !withToken {
			if got.code != http.StatusForbidden {
				t.Fatalf("%s without the CSRF token: %d %q; want 403", what, got.code, got.notice())
			}
			return
		}
		var want error
		switch {
		case strings.HasSuffix(path, "/rerun") && strings.HasPrefix(path, "/runs/"+c.failedRun):
			_, _, want = readRerun(form)
		case strings.HasSuffix(path, "/redeliver"):
			_, want = readRedelivery(form)
		}
		var he *httpError
		if errors.As(want, &he) && (got.code != he.status || got.notice() != he.msg) {
			t.Fatalf("%s: %d %q; want %d %q", what, got.code, got.notice(), he.status, he.msg)
		}
		// What the cluster would answer is the cluster's: a console that
		// cannot reach it may say so with a 5xx.
		if got.code == http.StatusSeeOther {
			if loc := got.header.Get("Location"); landsOn(loc) != consoleHost {
				t.Fatalf("%s: sends the browser to %q", what, loc)
			}
		}
	})
}
