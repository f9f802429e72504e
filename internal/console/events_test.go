package console_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// hooksOperator runs on webhook deliveries only: its source github
// (GitHub's signature, a filter) runs deploy and build, its source ci (an
// HMAC, a delivery header of its own, a 2 KiB limit) runs build.
const hooksOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: opkit, name: hooks, key: github}}
    filter: event == 'issue_comment' && payload.action == 'created'
  - name: ci
    webhook:
      hmac: {header: X-Signature, prefix: "sha256=", secretRef: {namespace: opkit, name: hooks, key: ci}}
      deliveryHeader: X-Delivery
      maxBodyBytes: 2048
  handlers:
  - name: deploy
    on: [event]
    sources: [github]
    exec: {command: [/bin/true]}
  - name: build
    on: [event]
    exec: {command: [/bin/true]}
`

// deliveries is the hooks operator run beside a console (its definition
// given as the engine's), and its deliveries written straight into the
// fixture's archive as its engine would have, one of each kind.
type deliveries struct {
	base string // the console's URL
	op   string
	// forged was refused for a bad signature; deployed was handled, its
	// run ran; turnedDown was handled, its handler refused it; failed
	// (on ci) failed; pending (on ci) waits; hostile was refused, and
	// every text of it is markup or terminal control.
	forged, deployed, turnedDown, failed, pending, hostile string
	// run is deployed's run, turnedDownRun turnedDown's.
	run, turnedDownRun string
}

// The secrets in the deployed delivery, which no page may show.
const (
	payloadToken = "ghs_0123456789abcdefghijABCDEFGHIJ012345"
	headerToken  = "s3cr3t-bearer"
)

func withDeliveries(t *testing.T, f *fixture) *deliveries {
	t.Helper()
	ev := &deliveries{op: "hooks-" + archive.NewID(time.Now())[12:]}
	src, err := definition.Load("hooks.yaml", fmt.Appendf(nil, hooksOperator, ev.op))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	ev.base = serveWith(t, console.Options{Archive: f.store, Config: f.cfg, Definitions: func() []*definition.Definition { return []*definition.Definition{d} }})

	at := time.Now().Add(-10 * time.Minute)
	received := func(source, event, deliveryID string, payload string) *archive.Delivery {
		at = at.Add(time.Minute)
		return &archive.Delivery{Operator: ev.op, Source: source, Event: event, DeliveryID: deliveryID, ReceivedAt: at,
			Headers: map[string][]string{"Content-Type": {"application/json"}, "X-Hub-Signature-256": {"[redacted]"}}, Payload: []byte(payload)}
	}
	recordDelivery := func(d *archive.Delivery) string {
		t.Helper()
		if err := f.store.RecordDelivery(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	finish := func(d *archive.Delivery, outcome archive.DeliveryOutcome, reason string, runs ...string) {
		t.Helper()
		d.Outcome, d.Reason, d.Runs, d.HandledAt = outcome, reason, runs, d.ReceivedAt.Add(2*time.Second)
		if err := f.store.FinishDelivery(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	eventRun := func(d *archive.Delivery, handler string, outcome archive.Outcome, failure string) string {
		return record(t, f.store, archive.Run{Operator: ev.op, Handler: handler, Action: "exec", Trigger: "event", APIVersion: "opkit.dev/v1alpha1",
			Kind: "Operator", Name: ev.op, UID: d.ID, Key: ev.op + "/event/" + handler + "/" + d.ID, Attempt: 1,
			StartedAt: d.ReceivedAt.Add(time.Second), Outcome: outcome, Error: failure})
	}

	forged := received("github", "issue_comment", "d-forged", `{"action":"created"}`)
	forged.Outcome, forged.Reason = archive.DeliveryRefused, "bad signature"
	ev.forged = recordDelivery(forged)

	deployed := received("github", "issue_comment", "d-deployed",
		`{"action":"created","comment":{"body":"<script>alert('pwned')</script> /deploy"},"installation":{"id":7,"token":"`+payloadToken+`"}}`)
	deployed.Headers["Authorization"] = []string{"Bearer " + headerToken} // as an engine that did not redact would have
	ev.deployed = recordDelivery(deployed)
	ev.run = eventRun(deployed, "deploy", archive.Succeeded, "")
	deployed.Objects = []string{"ConfigMap default/deploy-7"}
	finish(deployed, archive.DeliveryHandled, "", ev.run)

	turnedDown := received("github", "issue_comment", "d-turned-down", `{"action":"created","sender":{"login":"alice"}}`)
	ev.turnedDown = recordDelivery(turnedDown)
	const refusal = "alice is not a member of packit/deployers"
	ev.turnedDownRun = eventRun(turnedDown, "deploy", archive.Skipped, "refused the delivery: "+refusal)
	finish(turnedDown, archive.DeliveryHandled, "refused by handler deploy: "+refusal, ev.turnedDownRun)

	failed := received("ci", "", "ci-1", `{"build":1}`)
	ev.failed = recordDelivery(failed)
	finish(failed, archive.DeliveryFailed, "creating ConfigMap default/build-1: admission webhook \"policy.example.com\" denied the request")

	ev.pending = recordDelivery(received("ci", "", "ci-2", `{"build":2}`))

	hostile := received("github", "<img src=x onerror=alert(1)>", "d-\x1b[31mred\x1b[0m", `<script>alert("payload")</script> token=abc`)
	hostile.Outcome, hostile.Reason = archive.DeliveryRefused, "content type text/html<script>alert(1)</script>; expected application/json"
	hostile.Headers = map[string][]string{"User-Agent": {`"><script>alert("header")</script>`}}
	ev.hostile = recordDelivery(hostile)
	return ev
}

// deliveryLinks are the deliveries a page's tables link, in order.
var deliveryLink = regexp.MustCompile(`class="delivery-link" href="/events/([0-9a-z]{18})"`)

func deliveryLinks(page string) []string {
	var ids []string
	for _, m := range deliveryLink.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func TestEventsListFiltersByOperatorSourceAndOutcome(t *testing.T) {
	f := start(t)
	ev := withDeliveries(t, f)
	all := []string{ev.hostile, ev.pending, ev.failed, ev.turnedDown, ev.deployed, ev.forged} // newest first
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"operator=" + ev.op, all},
		// Every refusal: by the source's checks, and by a handler.
		{"operator=" + ev.op + "&refused=1", []string{ev.hostile, ev.turnedDown, ev.forged}},
		{"operator=" + ev.op + "&refused=1&outcome=Handled", []string{ev.turnedDown}},
		{"operator=" + ev.op + "&source=ci", []string{ev.pending, ev.failed}},
		{"operator=" + ev.op + "&outcome=Handled", []string{ev.turnedDown, ev.deployed}},
		{"operator=" + ev.op + "&outcome=failed", []string{ev.failed}}, // in any case
		{"operator=" + ev.op + "&outcome=Refused&refused=1", []string{ev.hostile, ev.forged}},
		{"operator=" + ev.op + "&source=github&outcome=Pending", nil},
	} {
		page := get(t, ev.base+"/events?"+tc.query)
		if got := deliveryLinks(page); !slices.Equal(got, tc.want) {
			t.Errorf("/events?%s lists %v, want %v", tc.query, got, tc.want)
		}
	}

	// The list: every column, the runs linked, the reasons said.
	page := get(t, ev.base+"/events?operator="+ev.op)
	mustContain(t, "the events list", page,
		`<a href="/events" aria-current="page">Events</a>`,
		`<th scope="col">Received</th><th scope="col">Operator</th><th scope="col">Source</th><th scope="col">Event</th><th scope="col">Delivery id</th><th scope="col">Outcome</th><th scope="col">Reason</th><th scope="col">Runs</th>`,
		`<a href="/operators/`+ev.op+`/sources/github">github</a>`,
		"bad signature", "refused by handler deploy: alice is not a member of packit/deployers",
		`<a class="run-link" href="/runs/`+ev.run+`">`+ev.run+`</a>`,
		"⊘</span> Refused", "✓</span> Handled", "✗</span> Failed", "…</span> Pending", "<code>d-forged</code>")

	// Filters that select nothing together say so; what cannot be read is
	// a 400 that says why.
	mustContain(t, "conflicting filters", get(t, ev.base+"/events?operator="+ev.op+"&refused=1&outcome=Failed"),
		"Refused only and the outcome Failed select nothing together")
	for query, want := range map[string]string{
		"outcome=Done":      `outcome &#34;Done&#34; is none of Pending, Handled, Failed, Refused`,
		"cursor=not-a-page": `cursor &#34;not-a-page&#34; is not one this console links to`,
	} {
		r := do(t, http.MethodGet, ev.base+"/events?"+query, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, want) {
			t.Errorf("/events?%s: %d, want 400 saying %q:\n%s", query, r.status, want, r.body)
		}
	}
}

func TestEventsListIsPagedWithTheArchivesCursor(t *testing.T) {
	f := start(t)
	op := "flood-" + archive.NewID(time.Now())[12:]
	base := time.Now().Add(-time.Hour)
	var ids []string
	for i := range 60 {
		d := &archive.Delivery{Operator: op, Source: "github", Event: "push", DeliveryID: fmt.Sprintf("d-%02d", i), ReceivedAt: base.Add(time.Duration(i) * time.Second),
			Outcome: archive.DeliveryRefused, Reason: "bad signature"}
		if err := f.store.RecordDelivery(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		ids = append([]string{d.ID}, ids...) // newest first
	}
	first := get(t, f.url+"/events?operator="+op)
	if got := deliveryLinks(first); !slices.Equal(got, ids[:50]) {
		t.Fatalf("the first page lists %d deliveries, want the newest 50", len(got))
	}
	next := regexp.MustCompile(`<a href="(\?[^"]*)" rel="next">Older deliveries →</a>`).FindStringSubmatch(first)
	if next == nil {
		t.Fatalf("the first page has no link to older deliveries:\n%s", first)
	}
	second := get(t, f.url+"/events"+strings.ReplaceAll(next[1], "&amp;", "&"))
	if got := deliveryLinks(second); !slices.Equal(got, ids[50:]) {
		t.Errorf("the second page lists %v, want the oldest 10 %v", got, ids[50:])
	}
	mustContain(t, "the second page", second, `>← Newest</a>`)
	if strings.Contains(second, "Older deliveries") {
		t.Error("the last page links an older one")
	}
	// The source's page pages the same way, and keeps its filters.
	src := get(t, f.url+"/operators/"+op+"/sources/github?refused=1")
	if got := deliveryLinks(src); !slices.Equal(got, ids[:50]) {
		t.Errorf("the source's page lists %d deliveries, want the newest 50", len(got))
	}
	mustContain(t, "the source's page", src, `refused=1" rel="next">Older deliveries →</a>`)
}

func TestDeliveryPageShowsWhatItCausedRedactedAndEscaped(t *testing.T) {
	f := start(t)
	ev := withDeliveries(t, f)

	page := get(t, ev.base+"/events/"+ev.deployed)
	mustContain(t, "the handled delivery's page", page,
		"<title>Delivery "+ev.deployed+" · opkit</title>",
		`<a href="/operators/`+ev.op+`/sources/github">source github</a>`,
		"✓</span> Handled", "<code>issue_comment</code>", "<code>d-deployed</code>",
		`<a class="run-link" href="/runs/`+ev.run+`">`+ev.run+`</a>`, "deploy <span class=\"dim\">exec</span>", "✓</span> Succeeded",
		"ConfigMap default/deploy-7",
		`<th scope="row"><code>Authorization</code></th><td><code>[redacted]</code></td>`,
		`<th scope="row"><code>X-Hub-Signature-256</code></th><td><code>[redacted]</code></td>`,
		`&#34;token&#34;: &#34;[redacted]&#34;`,
		`&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; /deploy`,
		"of JSON, indented")
	for _, secret := range []string{payloadToken, headerToken, "<script>alert"} {
		if strings.Contains(page, secret) {
			t.Errorf("the delivery's page shows %q", secret)
		}
	}
	if strings.Contains(page, "Why ") {
		t.Error("a delivery handled without a reason shows one")
	}

	// Its run links back to it.
	run := get(t, ev.base+"/runs/"+ev.run)
	mustContain(t, "its run's page", run, `<a href="/events/`+ev.deployed+`">delivery `+ev.deployed+`</a>`,
		`<a href="/events/`+ev.deployed+`">delivery `+ev.deployed+`</a></li><li aria-current="page">Run `+ev.run)
	if strings.Contains(run, "#schedule-") {
		t.Error("a run on a delivery is shown as a schedule's")
	}

	// The reason of a refused, failed or turned down one is the first
	// thing said.
	for id, want := range map[string]string{
		ev.forged:     `<p class="reason bad"><strong>Why it was refused:</strong> <span class="reason-text">bad signature</span></p>`,
		ev.turnedDown: `<p class="reason warn"><strong>Why nothing was done:</strong> <span class="reason-text">refused by handler deploy: alice is not a member of packit/deployers</span></p>`,
		ev.failed:     `<p class="reason bad"><strong>Why its handling failed:</strong>`,
	} {
		mustContain(t, "delivery "+id, get(t, ev.base+"/events/"+id), want)
	}
	mustContain(t, "the refused delivery", get(t, ev.base+"/events/"+ev.forged), "Nothing: a refused delivery is never handled.")
	mustContain(t, "the pending delivery", get(t, ev.base+"/events/"+ev.pending), "Nothing yet", `data-live="/events/`+ev.pending+`"`)
	// Its handler failed once and is retried: its runs so far are shown,
	// not "nothing yet".
	retried := record(t, f.store, archive.Run{Operator: ev.op, Handler: "deploy", Action: "exec", Trigger: "event", APIVersion: "opkit.dev/v1alpha1",
		Kind: "Operator", Name: ev.op, UID: ev.pending, Key: ev.op + "/event/deploy/" + ev.pending, Attempt: 1,
		StartedAt: time.Now(), Outcome: archive.Failed, Error: "exit status 1"})
	pending := get(t, ev.base+"/events/"+ev.pending)
	mustContain(t, "the pending delivery with a failed run", pending, "not yet: being handled, its runs so far below",
		"Runs so far: it is being handled", `<a class="run-link" href="/runs/`+retried+`">`+retried+`</a>`)
	if strings.Contains(pending, "Nothing yet") {
		t.Error("a Pending delivery with a run says it caused nothing yet")
	}

	// What the sender chose is escaped, and cleaned of terminal control.
	hostile := get(t, ev.base+"/events/"+ev.hostile)
	mustContain(t, "the hostile delivery", hostile, "&lt;img src=x onerror=alert(1)&gt;", "<code>d-red</code>",
		"content type text/html&lt;script&gt;alert(1)&lt;/script&gt;; expected application/json",
		"&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt; token=[redacted]",
		"&#34;&gt;&lt;script&gt;alert(&#34;header&#34;)&lt;/script&gt;")
	list := get(t, ev.base+"/events?operator="+ev.op)
	for what, page := range map[string]string{"its page": hostile, "the list": list} {
		if strings.Contains(page, "<script>") || strings.Contains(page, "<img") || strings.Contains(page, "\x1b") {
			t.Errorf("%s shows the sender's markup or terminal control unescaped", what)
		}
	}
	mustContain(t, "the list", list, "&lt;img src=x onerror=alert(1)&gt;", "<code>d-red</code>")

	// A payload 10,000 deep, accepted before deliveries were held to a
	// depth (Go's encoding/json takes it), shows on one line, said so.
	deep := &archive.Delivery{Operator: ev.op, Source: "github", Event: "issue_comment", DeliveryID: "d-deep",
		Payload: []byte(strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000))}
	if err := f.store.RecordDelivery(t.Context(), deep); err != nil {
		t.Fatal(err)
	}
	page = get(t, ev.base+"/events/"+deep.ID)
	mustContain(t, "the deep delivery's page", page, "19.5 KiB of JSON.",
		`<strong>Deep:</strong> nested deeper than 100 objects and arrays: shown as one line, not indented.`,
		"<code>"+strings.Repeat("[", 10_000)+strings.Repeat("]", 10_000)+"</code>")
	if len(page) > 60_000 {
		t.Errorf("the deep delivery's page is %d bytes", len(page))
	}
}

func TestSourcePageSaysWhatTheSourceIsAndListsItsDeliveries(t *testing.T) {
	f := start(t)
	ev := withDeliveries(t, f)

	github := get(t, ev.base+"/operators/"+ev.op+"/sources/github")
	mustContain(t, "the github source's page", github,
		"<title>Source github · opkit</title>",
		`<a href="/operators/`+ev.op+`">`+ev.op+`</a>`,
		"<code>POST /hooks/"+ev.op+"/github</code>",
		"X-Hub-Signature-256", "header <code>X-GitHub-Delivery</code>", "header <code>X-GitHub-Event</code>", "1.0 MiB",
		"<code>event == &#39;issue_comment&#39; &amp;&amp; payload.action == &#39;created&#39;</code>",
		`deploy <span class="dim">(exec)</span>, build <span class="dim">(exec)</span>`,
		"key <code>github</code> of Secret <code>opkit/hooks</code>",
		"bad signature")
	if got, want := deliveryLinks(github), []string{ev.hostile, ev.turnedDown, ev.deployed, ev.forged}; !slices.Equal(got, want) {
		t.Errorf("the github source lists %v, want %v", got, want)
	}
	if strings.Contains(github, `<th scope="col">Operator</th>`) {
		t.Error("a source's table has an operator column")
	}
	ci := get(t, ev.base+"/operators/"+ev.op+"/sources/ci?outcome=Failed")
	mustContain(t, "the ci source's page", ci, "X-Signature", `after &#34;sha256=&#34;`, "header <code>X-Delivery</code>", "2.0 KiB",
		"none: every verified delivery is accepted", `build <span class="dim">(exec)</span>`)
	if got := deliveryLinks(ci); !slices.Equal(got, []string{ev.failed}) {
		t.Errorf("the ci source's failed deliveries: %v", got)
	}

	// The operator's page lists its sources, with the last day's counts.
	op := get(t, ev.base+"/operators/"+ev.op)
	mustContain(t, "the operator's page", op, `<h2 id="sources">Event sources</h2>`,
		`<a href="/operators/`+ev.op+`/sources/github">github</a>`, `<a href="/operators/`+ev.op+`/sources/ci">ci</a>`,
		`<a href="/operators/`+ev.op+`/sources/github?refused=1">2 refused</a>`, `<a href="/operators/`+ev.op+`/sources/ci?outcome=Failed">1 failed</a>`,
		"once per webhook delivery of its event sources")
	if strings.Contains(op, "No schedule.") {
		t.Error("an operator on events only is shown as a calendar without schedules")
	}

	// A console without the definition knows the source from its
	// deliveries; a source of neither is not there.
	mustContain(t, "the source from the archive", get(t, f.url+"/operators/"+ev.op+"/sources/github"),
		"Its settings are not known here", "<code>POST /hooks/"+ev.op+"/github</code>")
	for path, want := range map[string]string{
		ev.base + "/operators/" + ev.op + "/sources/gitlab": "operator " + ev.op + " has no event source gitlab (its sources: github, ci)",
		f.url + "/operators/" + ev.op + "/sources/gitlab":   "no event source gitlab of operator " + ev.op + " is known here",
		f.url + "/operators/nobody-here/sources/github":     "no event source github of operator nobody-here",
		ev.base + "/events/not-an-id":                       "&#34;not-an-id&#34; is not a delivery id",
		ev.base + "/events/" + archive.NewID(time.Now()):    "retention pruned it; /events lists the deliveries it keeps",
		ev.base + "/events/" + ev.run:                       ev.run + " is a run, not a delivery: its page is /runs/" + ev.run,
	} {
		r := do(t, http.MethodGet, path, nil)
		if r.status != http.StatusNotFound || !strings.Contains(r.body, want) {
			t.Errorf("GET %s: %d, want 404 saying %q:\n%s", path, r.status, want, r.body)
		}
	}
}

func TestKubernetesAuthShowsDeliveriesToWhoMayReadTheirOperator(t *testing.T) {
	f := start(t)
	env := clustertest.New(t)
	suffix := env.Namespace[len(env.Namespace)-6:]
	refused := func(op string) string {
		d := &archive.Delivery{Operator: op, Source: "github", Event: "push", DeliveryID: "d-" + suffix, Outcome: archive.DeliveryRefused, Reason: "bad signature"}
		if err := f.store.RecordDelivery(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	chores, ghost := refused("chores"), refused("ghost-"+suffix)
	base := serve(t, f, console.Auth{Kubernetes: true})

	// The reader may get chores in every namespace, as the chores
	// operator's page needs; the stranger in its own namespace only.
	reader := clusterReader(t, env, "reader-"+suffix, "console.example.com", "chores")
	stranger := serviceAccount(t, env, "stranger", []string{"console.example.com"}, []string{"chores"})

	mustContain(t, "the reader's delivery", get(t, base+"/events/"+chores, "Authorization", reader), "bad signature")
	mustContain(t, "the reader's source", get(t, base+"/operators/chores/sources/github", "Authorization", reader), `href="/events/`+chores+`"`)
	if got := deliveryLinks(get(t, base+"/events?operator=chores", "Authorization", reader)); !slices.Contains(got, chores) {
		t.Errorf("the reader's list of chores's deliveries lacks %s: %v", chores, got)
	}
	// The whole list leaves out what the reader may not read: an operator
	// the console does not know cannot be checked.
	all := get(t, base+"/events", "Authorization", reader)
	if got := deliveryLinks(all); !slices.Contains(got, chores) || slices.Contains(got, ghost) {
		t.Errorf("the reader's list: %v; want %s and not %s", got, chores, ghost)
	}
	mustContain(t, "the reader's list", all, "of operators you may not read, and not shown")
	if got := deliveryLinks(get(t, base+"/events", "Authorization", stranger)); slices.Contains(got, chores) {
		t.Error("the stranger's list shows a delivery of chores")
	}
	for what, r := range map[string]response{
		"the stranger's delivery":  do(t, http.MethodGet, base+"/events/"+chores, nil, "Authorization", stranger),
		"the stranger's list":      do(t, http.MethodGet, base+"/events?operator=chores", nil, "Authorization", stranger),
		"the stranger's source":    do(t, http.MethodGet, base+"/operators/chores/sources/github", nil, "Authorization", stranger),
		"a ghost's delivery":       do(t, http.MethodGet, base+"/events/"+ghost, nil, "Authorization", reader),
		"no token":                 do(t, http.MethodGet, base+"/events/"+chores, nil),
		"no token, the whole list": do(t, http.MethodGet, base+"/events", nil),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", what, r.status)
		}
	}
	r := do(t, http.MethodGet, base+"/events/"+chores, nil, "Authorization", stranger)
	mustContain(t, "the refusal", r.body, "may not get chores.console.example.com in every namespace")
}

// clusterReader makes a ServiceAccount in env's namespace that may get and
// list a resource in every namespace, until the test ends, and returns its
// bearer token as an Authorization header's value.
func clusterReader(t *testing.T, env *clustertest.Env, name, group, resource string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: env.Namespace}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, role)
	})
	clustertest.Eventually(t, 30*time.Second, name+"'s ClusterRole in effect", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + env.Namespace + ":" + name,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: group, Resource: resource, Verb: "get"},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	tr, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().ServiceAccounts(env.Namespace).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tr.Status.Token
}
