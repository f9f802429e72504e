package runsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// The runs API's doors to a client: the request's path, its selectors,
// limit and continue token. For any of them, the handler answers within
// a bound, never with a 5xx or a panic; a request refused is a Status
// whose message names what is wrong; a continue token is accepted only
// as this server returned it, for the list that returned it.

const fuzzNS = "opkit-system"

// fuzzPrefix is the path of the API's group version.
var fuzzPrefix = "/apis/" + runsv1alpha1.SchemeGroupVersion.String()

// statusOf checks that err is a Status of a 4xx code with a message, and
// returns it.
func statusOf(t *testing.T, what string, err error) metav1.Status {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("%s: error %T is not a Status: %v", what, err, err)
	}
	s := status.Status()
	if s.Code < 400 || s.Code > 499 || strings.TrimSpace(s.Message) == "" {
		t.Fatalf("%s: Status %d %q; want a 4xx that says what is wrong", what, s.Code, s.Message)
	}
	return s
}

// FuzzParsePath checks the parsing of a request's path: a path refused
// is a 404 or 400 that names it; one accepted names runs or deliveries,
// an object only in a namespace, the log only of a run, and parses the
// same when made again from what was read.
func FuzzParsePath(f *testing.F) {
	for _, p := range []string{
		"/apis", "/apis/runs.opkit.dev", fuzzPrefix, fuzzPrefix + "/runs", fuzzPrefix + "/deliveries",
		fuzzPrefix + "/namespaces/team-a/runs", fuzzPrefix + "/namespaces/team-a/runs/01jd5k3m8q2x7c9vbn",
		fuzzPrefix + "/namespaces/team-a/runs/01jd5k3m8q2x7c9vbn/log", fuzzPrefix + "/namespaces/team-a/deliveries/x/log",
		fuzzPrefix + "/runs/x", fuzzPrefix + "/namespaces//runs", fuzzPrefix + "/namespaces/a", fuzzPrefix + "/pods", fuzzPrefix + "//",
		fuzzPrefix + "/namespaces/a/runs/b/c/d", "/api/v1/pods",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		path = strings.TrimSuffix(path, "/") // as ServeHTTP does
		req, discovery, err := parsePath(path)
		if err != nil {
			s := statusOf(t, fmt.Sprintf("parsePath(%q)", path), err)
			if s.Code != http.StatusNotFound && s.Code != http.StatusBadRequest {
				t.Fatalf("parsePath(%q): %d, want 404 or 400", path, s.Code)
			}
			return
		}
		if discovery {
			if !strings.HasPrefix(path, "/apis") {
				t.Fatalf("parsePath(%q): discovery of a path out of /apis", path)
			}
			return
		}
		switch {
		case req.resource != runsResource && req.resource != deliveriesResource:
			t.Fatalf("parsePath(%q): resource %q", path, req.resource)
		case req.name != "" && req.namespace == "":
			t.Fatalf("parsePath(%q): object %q in no namespace", path, req.name)
		case req.subresource != "" && (req.subresource != logSubresource || req.resource != runsResource || req.name == ""):
			t.Fatalf("parsePath(%q): subresource %q of %s %q", path, req.subresource, req.resource, req.name)
		}
		again := fuzzPrefix
		if req.namespace != "" {
			again += "/namespaces/" + req.namespace
		}
		again += "/" + req.resource
		for _, part := range []string{req.name, req.subresource} {
			if part != "" {
				again += "/" + part
			}
		}
		if again != path {
			t.Fatalf("parsePath(%q) = %+v, which is the path %q", path, req, again)
		}
	})
}

// selectionRequest is a list's request with the selectors given.
func selectionRequest(labelSelector, fieldSelector string) *http.Request {
	q := url.Values{}
	if labelSelector != "" {
		q.Set("labelSelector", labelSelector)
	}
	if fieldSelector != "" {
		q.Set("fieldSelector", fieldSelector)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL.RawQuery = q.Encode()
	return r
}

// fuzzKinds are the kinds as the handler serves them, over no archive:
// parsing reads none.
var fuzzKinds = []kind{runs{namespace: fuzzNS}, deliveries{namespace: fuzzNS}}

// selectionSeeds are selectors kubectl and opkit runs send, and some no
// client should.
var selectionSeeds = [][2]string{
	{"opkit.dev/operator=printer", ""},
	{"opkit.dev/object=printer-1,opkit.dev/outcome in (Failed)", "status.outcome=Failed"},
	{"opkit.dev/handler==announce", "spec.operator=printer,metadata.namespace=team-a"},
	{"", "status.failed=true,spec.object.kind=Printer"},
	{"", "status.startedSince=2026-11-27T10:00:00Z,status.startedSince=2026-11-27T10:00:00.123456789+02:00"},
	{"", "status.receivedSince=2026-11-27T10:00:00Z,spec.source=github"},
	{"opkit.dev/source=github", "metadata.name=01jd5k3m8q2x7c9vbn"},
	{"opkit.dev/operator!=printer", ""},
	{"opkit.dev/operator in (a,b)", ""},
	{"opkit.dev/operator", "status.outcome!=Failed"},
	{"opkit.dev/operator=", "spec.handler="},
	{"opkit.dev/operator=a,opkit.dev/operator=b", "spec.operator=c"},
	{"x=y", "spec.nosuch=1"},
	{"", `spec.handler=a\,b\=c`},
	{"", "status.failed=false"},
	{"!opkit.dev/operator", "metadata.namespace=a,metadata.namespace=b"},
}

// FuzzSelection checks the parsing of labelSelector and fieldSelector, of
// runs and of deliveries: what is refused is a 400 naming the selector;
// what is accepted selects by known labels and fields, each by a value,
// and selects the same written again as the parsed selectors say it.
func FuzzSelection(f *testing.F) {
	for _, s := range selectionSeeds {
		f.Add(false, "team-a", s[0], s[1])
		f.Add(true, "", s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, delivery bool, namespace, labelSelector, fieldSelector string) {
		k := fuzzKinds[0]
		if delivery {
			k = fuzzKinds[1]
		}
		what := fmt.Sprintf("%s labelSelector=%q fieldSelector=%q", k.resource(), labelSelector, fieldSelector)
		sel, err := k.parse(selectionRequest(labelSelector, fieldSelector), namespace)
		if err != nil {
			s := statusOf(t, what, err)
			if s.Code != http.StatusBadRequest || !strings.Contains(s.Message, "Selector") && !strings.Contains(s.Message, runFailedField) {
				t.Fatalf("%s: %d %q; want a 400 naming the selector", what, s.Code, s.Message)
			}
			return
		}
		keys := runLabels
		fieldKeys := runFields
		if delivery {
			keys, fieldKeys = deliveryLabels, deliveryFields
		}
		known := slices.Collect(maps.Values(keys))
		known = append(known, slices.Collect(maps.Values(fieldKeys))...)
		for key, v := range sel.values {
			if !slices.Contains(known, key) || v == "" {
				t.Fatalf("%s: selects %s=%q", what, key, v)
			}
		}
		// The selection written again: the same.
		fs := sel.fields.String()
		if !sel.since.IsZero() {
			since := runSinceField
			if delivery {
				since = deliverySinceField
			}
			fs = strings.Trim(fs+","+since+"="+sel.since.Format(time.RFC3339Nano), ",")
		}
		again, err := k.parse(selectionRequest(sel.labels.String(), fs), namespace)
		if err != nil {
			t.Fatalf("%s: written again as labelSelector=%q fieldSelector=%q, refused: %v", what, sel.labels.String(), fs, err)
		}
		if !maps.Equal(again.values, sel.values) || again.namespace != sel.namespace || again.none != sel.none || !again.since.Equal(sel.since) {
			t.Fatalf("%s: selects %v in %q (none %t, since %v); written again as labelSelector=%q fieldSelector=%q, %v in %q (none %t, since %v)",
				what, sel.values, sel.namespace, sel.none, sel.since, sel.labels.String(), fs, again.values, again.namespace, again.none, again.since)
		}
		if listDigest(k.resource(), again) != listDigest(k.resource(), sel) {
			t.Fatalf("%s: the same selection written again is another list", what)
		}
	})
}

// FuzzContinueToken checks continue tokens: any token but the one this
// server returns for a list at a position is refused, with a 400 that
// names it; the one it returns is read back as that position, and is
// refused by every other list.
func FuzzContinueToken(f *testing.F) {
	id := archive.NewID(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	for _, s := range selectionSeeds[:7] {
		sel, err := fuzzKinds[0].parse(selectionRequest(s[0], s[1]), "team-a")
		if err != nil {
			continue
		}
		token := continueToken(runsResource, sel, id)
		f.Add(token, false, "team-a", s[0], s[1])
		f.Add(token, true, "team-a", s[0], s[1])
		f.Add(token, false, "team-b", s[0], s[1])
		f.Add(token, false, "team-a", s[0], s[1]+",spec.trigger=create")
	}
	for _, forged := range []string{id, id + ".", id + ".0000000000000000", "x." + strings.Repeat("a", 16), "../../etc", strings.ToUpper(id) + ".abc"} {
		f.Add(forged, false, "", "", "")
	}
	f.Fuzz(func(t *testing.T, token string, delivery bool, namespace, labelSelector, fieldSelector string) {
		k := fuzzKinds[0]
		if delivery {
			k = fuzzKinds[1]
		}
		sel, err := k.parse(selectionRequest(labelSelector, fieldSelector), namespace)
		if err != nil {
			return // FuzzSelection's
		}
		cursor, err := readContinue(token, k.resource(), sel)
		if err != nil {
			s := statusOf(t, fmt.Sprintf("continue %q", token), err)
			if s.Code != http.StatusBadRequest || !strings.Contains(s.Message, "continue") {
				t.Fatalf("continue %q: %d %q; want a 400 that names the token", token, s.Code, s.Message)
			}
			return
		}
		if !archive.ValidID(cursor) || continueToken(k.resource(), sel, cursor) != token {
			t.Fatalf("continue %q accepted as the cursor %q, whose token is %q", token, cursor, continueToken(k.resource(), sel, cursor))
		}
		// Another list refuses it: another resource, namespace or selector.
		other := fuzzKinds[1]
		if delivery {
			other = fuzzKinds[0]
		}
		if _, err := readContinue(token, other.resource(), sel); err == nil {
			t.Fatalf("continue %q of %s taken by %s", token, k.resource(), other.resource())
		}
		moved := *sel
		moved.namespace += "x"
		if _, err := readContinue(token, k.resource(), &moved); err == nil {
			t.Fatalf("continue %q of namespace %q taken in namespace %q", token, sel.namespace, moved.namespace)
		}
		narrowed := *sel
		narrowed.values = maps.Clone(sel.values)
		narrowed.values["outcome"] += "x"
		if _, err := readContinue(token, k.resource(), &narrowed); err == nil {
			t.Fatalf("continue %q of %v taken by %v", token, sel.values, narrowed.values)
		}
	})
}

// fuzzHandler is a Handler over a SQLite archive with runs and
// deliveries of several operators, namespaces and outcomes, for the
// inputs of a fuzz target.
func fuzzHandler(f *testing.F) *Handler {
	f.Helper()
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(f.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = store.Close() })
	if err := fillArchive(ctx, store); err != nil {
		f.Fatal(err)
	}
	h, err := New(Options{
		Archive:   store,
		Namespace: fuzzNS,
		Authenticator: AuthenticatorFunc(func(*http.Request) (*User, bool, error) {
			return &User{Name: "alice"}, true, nil
		}),
		Authorizer: AuthorizerFunc(func(context.Context, Attributes) (bool, string, error) {
			return true, "", nil
		}),
		PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// fillArchive records the runs and deliveries FuzzServe lists.
func fillArchive(ctx context.Context, store *archive.SQLite) error {
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	type run struct {
		ns, name, operator, handler, trigger string
		outcome                              archive.Outcome
	}
	for i, r := range []run{
		{"team-a", "printer-1", "printer", "announce", "create", archive.Succeeded},
		{"team-a", "printer-1", "printer", "announce", "update", archive.Failed},
		{"team-a", "printer-2", "printer", "cleanup", "delete", archive.GaveUp},
		{"team-a", "printer-2", "printer", "announce", "create", archive.Running},
		{"team-b", "printer-1", "printer", "announce", "create", archive.Failed},
		{"team-b", "backup-1", "backup", "dump", "update", archive.Succeeded},
		{fuzzNS, "printer-9", "printer", "announce", "create", archive.Succeeded},
		{"", "printer", "printer", "nightly", "schedule", archive.Succeeded},
		{"", "backup", "backup", "nightly", "schedule", archive.Failed},
		{"team-a", "printer-3", "printer", "announce", "event", archive.Succeeded},
	} {
		start := base.Add(time.Duration(i) * time.Minute)
		rec := &archive.Run{ID: archive.NewID(start), Operator: r.operator, Handler: r.handler, Action: "exec", Trigger: r.trigger,
			APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: r.ns, Name: r.name, UID: "uid-" + r.name, Generation: 1,
			Key: fmt.Sprintf("uid-%s/%d", r.name, i), Attempt: 1, StartedAt: start}
		if r.ns == "" {
			rec.APIVersion, rec.Kind = "opkit.dev/v1alpha1", "Operator"
		}
		if err := store.Insert(ctx, rec); err != nil {
			return err
		}
		if err := store.AppendLog(ctx, rec.ID, []byte("\x1b[1mworking\x1b[0m\nline 2\n")); err != nil {
			return err
		}
		if r.outcome != archive.Running {
			rec.Outcome, rec.FinishedAt = r.outcome, start.Add(time.Second)
			if r.outcome.Failure() {
				rec.Error = "exit status 1"
			}
			if err := store.Finish(ctx, rec); err != nil {
				return err
			}
		}
	}
	for i, src := range []string{"github", "github", "gitlab", "github"} {
		at := base.Add(time.Duration(i)*time.Minute + 30*time.Second)
		d := &archive.Delivery{ID: archive.NewID(at), Operator: "printer", Source: src, DeliveryID: fmt.Sprint("d-", i), ReceivedAt: at,
			Outcome: archive.DeliveryPending, Event: "push", Payload: []byte(`{"token":"x"}`)}
		if i == 2 {
			d.Outcome, d.Reason = archive.DeliveryRefused, "bad signature"
		}
		if err := store.RecordDelivery(ctx, d); err != nil {
			return err
		}
		if i == 1 {
			d.Outcome, d.HandledAt = archive.DeliveryHandled, at.Add(time.Second)
			if err := store.FinishDelivery(ctx, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// response is an answer of the handler.
type response struct {
	code int
	body []byte
}

// serve answers a GET of path?query. A watch and a followed log end
// after a few polls, their client gone: gone says so.
func serve(h *Handler, path, query string) (_ response, gone bool) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL.Path, r.URL.RawQuery = path, query
	r.Header.Set("Accept", "application/json")
	ctx, cancel := context.WithCancel(r.Context())
	if queryBool(r, "watch") || queryBool(r, "follow") {
		ctx, cancel = context.WithTimeout(r.Context(), 50*time.Millisecond)
	}
	defer cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(ctx))
	return response{w.Code, w.Body.Bytes()}, ctx.Err() != nil
}

// listItem is what a check reads of a listed object.
type listItem struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Operator string `json:"operator"`
		Handler  string `json:"handler"`
		Trigger  string `json:"trigger"`
		Source   string `json:"source"`
		Object   struct {
			Kind string `json:"kind"`
		} `json:"object"`
	} `json:"spec"`
	Status struct {
		Outcome string `json:"outcome"`
	} `json:"status"`
}

// fields are the item's fields, as its kind's field selectors read them.
func (it *listItem) fields(resource string) fields.Set {
	set := fields.Set{"metadata.name": it.Metadata.Name, "metadata.namespace": it.Metadata.Namespace, "status.outcome": it.Status.Outcome,
		"spec.operator": it.Spec.Operator}
	if resource == deliveriesResource {
		set["spec.source"] = it.Spec.Source
		return set
	}
	set["spec.handler"], set["spec.trigger"], set["spec.object.kind"] = it.Spec.Handler, it.Spec.Trigger, it.Spec.Object.Kind
	set[runFailedField] = fmt.Sprint(it.Status.Outcome == string(archive.Failed) || it.Status.Outcome == string(archive.GaveUp))
	return set
}

// FuzzServe sends the handler any path under a namespace and any query
// (selectors, limit, continue, watch, resourceVersion, timeoutSeconds,
// follow), and checks the answer: never a 5xx; a refusal is a Status of
// the answer's code that says why; a list holds what its selectors
// select, as Kubernetes reads them, newest first, and its continue token
// gives the next page, older, with this list only.
func FuzzServe(f *testing.F) {
	h := fuzzHandler(f)
	id := archive.NewID(time.Now().Add(-30 * time.Minute))
	for _, seed := range []struct {
		resource uint8
		ns, rest string
		query    string
	}{
		{0, "", "", ""},
		{0, "team-a", "", "limit=2"},
		{0, fuzzNS, "", "limit=1&labelSelector=opkit.dev%2Foperator%3Dprinter"},
		{0, "", "", "limit=3&fieldSelector=status.failed%3Dtrue"},
		{0, "team-a", "", "fieldSelector=status.startedSince%3D2026-01-01T00%3A00%3A00Z&limit=1"},
		{0, "", "", "labelSelector=opkit.dev%2Fobject%3Dprinter-1&fieldSelector=spec.trigger%3Dcreate"},
		{1, "", "", "limit=1"},
		{1, fuzzNS, "", "fieldSelector=spec.source%3Dgithub&limit=1"},
		{0, "team-a", id, ""},
		{0, "team-a", id + "/log", "follow=true"},
		{0, "team-a", "", "watch=true&resourceVersion=0"},
		{0, "team-a", "", "watch=1&resourceVersion=12&timeoutSeconds=1&allowWatchBookmarks=true"},
		{0, "", "", "limit=-1"},
		{0, "", "", "limit=x&continue=y"},
		{0, "", "", "continue=" + id + ".0123456789abcdef"},
		{1, "team-a", "", "labelSelector=opkit.dev%2Fsource%21%3Dgithub"},
		{0, "team-a", "", "labelSelector=opkit.dev%2Foperator%3D&fieldSelector=metadata.name%3D"},
	} {
		f.Add(seed.resource, seed.ns, seed.rest, seed.query)
	}
	f.Fuzz(func(t *testing.T, resource uint8, namespace, rest, query string) {
		start := time.Now()
		res := []string{runsResource, deliveriesResource}[resource%2]
		path := fuzzPrefix
		if namespace != "" {
			path += "/namespaces/" + namespace
		}
		path += "/" + res
		if rest != "" {
			path += "/" + rest
		}
		got, gone := serve(h, path, query)
		what := fmt.Sprintf("GET %s?%s", path, query)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("%s took %s", what, took)
		}
		switch {
		case gone && got.code >= 500:
			return // a watch or a followed log that was still reading: its client went
		case got.code >= 500:
			t.Fatalf("%s: %d %s", what, got.code, got.body)
		case got.code != http.StatusOK:
			var s metav1.Status
			if err := json.Unmarshal(got.body, &s); err != nil || s.Kind != "Status" || int(s.Code) != got.code || strings.TrimSpace(s.Message) == "" {
				t.Fatalf("%s: %d %s; want a Status that says why", what, got.code, got.body)
			}
			return
		}
		q, _ := url.ParseQuery(query)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path, r.URL.RawQuery = path, query
		req, _, err := parsePath(strings.TrimSuffix(path, "/"))
		if err != nil || req.name != "" || queryBool(r, "watch") {
			return // a get, a log or a watch: its parsing is checked above
		}
		checkList(t, h, what, path, req, q, got)
	})
}

// checkList checks a list's answer: what it holds, and its next page.
func checkList(t *testing.T, h *Handler, what, path string, req request, q url.Values, got response) {
	t.Helper()
	var list struct {
		metav1.ListMeta `json:"metadata"`
		Items           []listItem `json:"items"`
	}
	if err := json.Unmarshal(got.body, &list); err != nil {
		t.Fatalf("%s: a list that does not read: %v\n%s", what, err, got.body)
	}
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		t.Fatalf("%s: labelSelector accepted, which Kubernetes refuses: %v", what, err)
	}
	fs, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		t.Fatalf("%s: fieldSelector accepted, which Kubernetes refuses: %v", what, err)
	}
	since := runSinceField
	if req.resource == deliveriesResource {
		since = deliverySinceField
	}
	var from time.Time
	fs, _ = fs.Transform(func(field, value string) (string, string, error) {
		if field == since {
			if t, err := time.Parse(time.RFC3339Nano, value); err == nil && t.After(from) {
				from = t
			}
			return "", "", nil // not a field of the objects
		}
		return field, value, nil
	})
	for i, it := range list.Items {
		began, ok := archive.TimeOfID(it.Metadata.Name)
		switch {
		case !ok:
			t.Fatalf("%s: item %q is not an archive id", what, it.Metadata.Name)
		case req.namespace != "" && it.Metadata.Namespace != req.namespace:
			t.Fatalf("%s: item %s of namespace %q", what, it.Metadata.Name, it.Metadata.Namespace)
		case !ls.Matches(labels.Set(it.Metadata.Labels)):
			t.Fatalf("%s: item %s, labelled %v, does not match the labelSelector", what, it.Metadata.Name, it.Metadata.Labels)
		case !fs.Matches(it.fields(req.resource)):
			t.Fatalf("%s: item %s, of fields %v, does not match the fieldSelector", what, it.Metadata.Name, it.fields(req.resource))
		case !from.IsZero() && began.UnixMilli() < from.UnixMilli():
			t.Fatalf("%s: item %s began at %s, before %s", what, it.Metadata.Name, began, from)
		case i > 0 && it.Metadata.Name >= list.Items[i-1].Metadata.Name:
			t.Fatalf("%s: item %s after %s: not newest first", what, it.Metadata.Name, list.Items[i-1].Metadata.Name)
		}
	}
	if list.Continue == "" {
		return
	}
	if len(list.Items) == 0 {
		t.Fatalf("%s: an empty page, continued", what)
	}
	last := list.Items[len(list.Items)-1].Metadata.Name
	// The next page: older than this one.
	q.Set("continue", list.Continue)
	next, _ := serve(h, path, q.Encode())
	if next.code != http.StatusOK {
		t.Fatalf("%s: its continue token: %d %s", what, next.code, next.body)
	}
	var page struct {
		Items []listItem `json:"items"`
	}
	if err := json.Unmarshal(next.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) > 0 && page.Items[0].Metadata.Name >= last {
		t.Fatalf("%s: the next page starts at %s, not older than %s", what, page.Items[0].Metadata.Name, last)
	}
	// Any other list refuses the token, with a 400 that names it: of
	// the other resource (without selectors, which it may not have), of
	// another namespace, or with one more selector.
	token := url.Values{"continue": {list.Continue}}.Encode()
	otherResource := map[string]string{runsResource: deliveriesResource, deliveriesResource: runsResource}[req.resource]
	others := [][2]string{{fuzzPrefix + "/" + otherResource, token}, {fuzzPrefix + "/namespaces/team-b/" + otherResource, token}}
	if req.namespace == "" {
		others = append(others, [2]string{fuzzPrefix + "/namespaces/team-a/" + req.resource, q.Encode()})
	} else {
		others = append(others, [2]string{fuzzPrefix + "/" + req.resource, q.Encode()})
	}
	narrowed := url.Values{}
	maps.Copy(narrowed, q)
	narrowed.Set("fieldSelector", strings.Trim(q.Get("fieldSelector")+",status.outcome=Failed", ","))
	others = append(others, [2]string{path, narrowed.Encode()})
	digest, _ := digestOf(path, q.Encode())
	for _, other := range others {
		if d, ok := digestOf(other[0], other[1]); ok && d == digest {
			continue // another request of the same list
		}
		got, _ := serve(h, other[0], other[1])
		var s metav1.Status
		if got.code != http.StatusBadRequest || json.Unmarshal(got.body, &s) != nil || !strings.Contains(s.Message, "continue") && !strings.Contains(s.Message, "Selector") {
			t.Fatalf("%s: its continue token, with GET %s?%s: %d %s; want a 400 that names the token", what, other[0], other[1], got.code, got.body)
		}
	}
}

// digestOf is the digest of the list a request of path?query reads, if
// it reads one.
func digestOf(path, query string) (string, bool) {
	req, discovery, err := parsePath(path)
	if err != nil || discovery || req.name != "" {
		return "", false
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL.Path, r.URL.RawQuery = path, query
	k := fuzzKinds[0]
	if req.resource == deliveriesResource {
		k = fuzzKinds[1]
	}
	sel, err := k.parse(r, req.namespace)
	if err != nil {
		return "", false
	}
	return listDigest(k.resource(), sel), true
}
