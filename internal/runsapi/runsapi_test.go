package runsapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsapi"
)

// engineNS is the namespace the handler serves operator-wide runs in.
const engineNS = "opkit-system"

var runsGVR = schema.GroupVersionResource{Group: runsv1alpha1.Group, Version: runsv1alpha1.Version, Resource: "runs"}

// server is a handler over a real SQLite archive, served by httptest.
type server struct {
	store *archive.SQLite
	cfg   *rest.Config
	dyn   dynamic.Interface
	rest  *rest.RESTClient
}

// serve starts a handler; authorize decides each request (nil: allow
// all). The user is the X-Remote-User header the client sends.
func serve(t *testing.T, authorize runsapi.AuthorizerFunc) *server {
	t.Helper()
	store, err := archive.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if authorize == nil {
		authorize = func(context.Context, runsapi.Attributes) (bool, string, error) { return true, "", nil }
	}
	h, err := runsapi.New(runsapi.Options{
		Archive:   store,
		Namespace: engineNS,
		Authenticator: runsapi.AuthenticatorFunc(func(r *http.Request) (*runsapi.User, bool, error) {
			name := r.Header.Get("X-Remote-User")
			return &runsapi.User{Name: name}, name != "", nil
		}),
		Authorizer:   authorize,
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-Remote-User", "alice")
			return rt.RoundTrip(r)
		})
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rest.CopyConfig(cfg)
	rcfg.APIPath = "/apis"
	rcfg.GroupVersion = &runsv1alpha1.SchemeGroupVersion
	rcfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &server{store: store, cfg: cfg, dyn: dyn, rest: rc}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// base is when the test's runs start: a little before now, so that
// watches (which resume from a recent time) see them as past.
var base = time.Now().Add(-time.Minute).Truncate(time.Millisecond)

// run records a run of handler for the object ns/name (no namespace: an
// operator-wide schedule's run), i seconds after base, ended with
// outcome (Running: not ended).
func (s *server) run(t *testing.T, i int, ns, name, handler string, outcome archive.Outcome) *archive.Run {
	t.Helper()
	start := base.Add(time.Duration(i) * time.Second)
	r := &archive.Run{
		ID: archive.NewID(start), Operator: "printer", Handler: handler, Action: "exec", Trigger: "create",
		APIVersion: "demo.example.com/v1", Kind: "Printer", Namespace: ns, Name: name, UID: "uid-" + name, Generation: 1,
		Key: "uid-" + name + "/1/" + handler, Attempt: 1, StartedAt: start,
	}
	if ns == "" {
		r.APIVersion, r.Kind, r.Trigger = "opkit.dev/v1alpha1", "Operator", "schedule"
	}
	if err := s.store.Insert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if outcome != archive.Running {
		s.finish(t, r, outcome)
	}
	return r
}

func (s *server) finish(t *testing.T, r *archive.Run, outcome archive.Outcome) {
	t.Helper()
	r.Outcome, r.FinishedAt = outcome, r.StartedAt.Add(1500*time.Millisecond)
	if outcome.Failure() {
		r.Error = "exit status 1"
	}
	if err := s.store.Finish(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

// names are the names of a list's items.
func names(l *unstructured.UnstructuredList) []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it.GetName())
	}
	return out
}

func TestListSelectsRunsByLabelsAndFieldsAsKubectlAsks(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	failed1 := s.run(t, 1, "team-a", "printer-1", "announce", archive.Failed)
	s.run(t, 2, "team-a", "printer-1", "announce", archive.Succeeded)
	failed3 := s.run(t, 3, "team-a", "printer-2", "announce", archive.Failed)
	failed2 := s.run(t, 4, "team-a", "printer-1", "cleanup", archive.GaveUp)
	s.run(t, 5, "team-b", "printer-1", "announce", archive.Failed)
	wide := s.run(t, 6, "", "printer", "nightly", archive.Succeeded)
	inEngineNS := s.run(t, 7, engineNS, "printer-9", "announce", archive.Succeeded)

	// kubectl get runs -n team-a -l opkit.dev/object=printer-1 --field-selector status.outcome=Failed
	l, err := s.dyn.Resource(runsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{
		LabelSelector: "opkit.dev/object=printer-1", FieldSelector: "status.outcome=Failed",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l); !slices.Equal(got, []string{failed1.ID}) {
		t.Errorf("Failed runs of team-a/printer-1: %v, want %v", got, []string{failed1.ID})
	}
	item := l.Items[0]
	if ns, _, _ := unstructured.NestedString(item.Object, "spec", "object", "namespace"); ns != "team-a" || item.GetNamespace() != "team-a" ||
		item.GetLabels()[runsv1alpha1.LabelOutcome] != "Failed" || item.GetCreationTimestamp().Unix() != failed1.StartedAt.Unix() {
		t.Errorf("run as served: %v", item.Object)
	}

	// -l with a handler, in every namespace.
	l, err = s.dyn.Resource(runsGVR).List(ctx, metav1.ListOptions{LabelSelector: "opkit.dev/handler in (cleanup)"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l); !slices.Equal(got, []string{failed2.ID}) {
		t.Errorf("cleanup runs: %v, want %v", got, []string{failed2.ID})
	}

	// The engine's namespace has its own runs and the operator-wide ones.
	l, err = s.dyn.Resource(runsGVR).Namespace(engineNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(l), []string{inEngineNS.ID, wide.ID}; !slices.Equal(got, want) {
		t.Errorf("runs of %s: %v, want %v", engineNS, got, want)
	}

	// opkit runs --failed and --kind: status.failed=true is Failed and
	// GaveUp; spec.object.kind is the object's kind.
	l, err = s.dyn.Resource(runsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{FieldSelector: "status.failed=true,spec.object.kind=Printer"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(l), []string{failed2.ID, failed3.ID, failed1.ID}; !slices.Equal(got, want) {
		t.Errorf("failed Printer runs of team-a: %v, want %v", got, want)
	}
	l, err = s.dyn.Resource(runsGVR).List(ctx, metav1.ListOptions{FieldSelector: "spec.object.kind=Operator"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(l), []string{wide.ID}; !slices.Equal(got, want) {
		t.Errorf("runs of kind Operator: %v, want %v", got, want)
	}

	// A label and the field it mirrors that disagree select nothing.
	l, err = s.dyn.Resource(runsGVR).List(ctx, metav1.ListOptions{LabelSelector: "opkit.dev/outcome=Failed", FieldSelector: "status.outcome=Succeeded"})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("contradictory selectors: %v, %v; want none", names(l), err)
	}

	// What the archive cannot select is a 400 that names it.
	for _, c := range []struct {
		opts  metav1.ListOptions
		names string
	}{
		{metav1.ListOptions{LabelSelector: "opkit.dev/outcome!=Failed"}, "!="},
		{metav1.ListOptions{LabelSelector: "opkit.dev/handler in (a,b)"}, "opkit.dev/handler"},
		{metav1.ListOptions{LabelSelector: "team=a"}, "team"},
		{metav1.ListOptions{FieldSelector: "spec.object.apiVersion=demo.example.com/v1"}, "spec.object.apiVersion"},
		{metav1.ListOptions{FieldSelector: "status.failed=false"}, "status.failed"},
	} {
		_, err := s.dyn.Resource(runsGVR).List(ctx, c.opts)
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("list %+v: %v; want a 400 naming %s", c.opts, err, c.names)
		}
	}
}

// TestListSelectsRunsAndDeliveriesStartedSinceATime: kubectl get runs
// --field-selector status.startedSince=T lists the runs started at or
// after T (deliveries: status.receivedSince), in one namespace, in the
// engine's (two queries) and by name, whatever T's zone; a value that is
// not an RFC 3339 time is a 400 that names it.
func TestListSelectsRunsAndDeliveriesStartedSinceATime(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	old := s.run(t, 1, engineNS, "printer-1", "announce", archive.Succeeded)
	s.run(t, 2, "", "printer", "nightly", archive.Succeeded)
	at := s.run(t, 3, engineNS, "printer-1", "announce", archive.Failed)
	wide := s.run(t, 4, "", "printer", "nightly", archive.Succeeded)
	running := s.run(t, 5, engineNS, "printer-2", "announce", archive.Running)
	since := base.Add(3 * time.Second)

	for _, c := range []struct {
		name, selector string
		want           []string
	}{
		{"in UTC", "status.startedSince=" + since.UTC().Format(time.RFC3339Nano), []string{running.ID, wide.ID, at.ID}},
		{"in another zone", "status.startedSince=" + since.In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano), []string{running.ID, wide.ID, at.ID}},
		{"with another field", "spec.handler=announce,status.startedSince=" + since.UTC().Format(time.RFC3339Nano), []string{running.ID, at.ID}},
		{"the later of two", "status.startedSince=" + base.UTC().Format(time.RFC3339Nano) + ",status.startedSince=" + since.UTC().Format(time.RFC3339Nano), []string{running.ID, wide.ID, at.ID}},
		{"by name, started before", "metadata.name=" + old.ID + ",status.startedSince=" + since.UTC().Format(time.RFC3339Nano), nil},
		{"by name, started since", "metadata.name=" + at.ID + ",status.startedSince=" + since.UTC().Format(time.RFC3339Nano), []string{at.ID}},
	} {
		l, err := s.dyn.Resource(runsGVR).Namespace(engineNS).List(ctx, metav1.ListOptions{FieldSelector: c.selector})
		if err != nil {
			t.Errorf("%s: --field-selector %s: %v", c.name, c.selector, err)
			continue
		}
		if got := names(l); !slices.Equal(got, c.want) {
			t.Errorf("%s: --field-selector %s: %v, want %v", c.name, c.selector, got, c.want)
		}
	}

	deliveries := schema.GroupVersionResource{Group: runsv1alpha1.Group, Version: runsv1alpha1.Version, Resource: "deliveries"}
	var delivered []string
	for i := range 2 {
		d := &archive.Delivery{ID: archive.NewID(base.Add(time.Duration(2+i) * time.Second)), Operator: "printer", Source: "github", DeliveryID: fmt.Sprint("d-", i),
			ReceivedAt: base.Add(time.Duration(2+i) * time.Second), Outcome: archive.DeliveryPending, Payload: []byte("{}")}
		if err := s.store.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		delivered = append(delivered, d.ID)
	}
	l, err := s.dyn.Resource(deliveries).Namespace(engineNS).List(ctx, metav1.ListOptions{FieldSelector: "status.receivedSince=" + since.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l); !slices.Equal(got, delivered[1:]) {
		t.Errorf("deliveries received since %s: %v, want %v", since, got, delivered[1:])
	}

	for _, c := range []struct {
		gvr      schema.GroupVersionResource
		selector string
		names    string
	}{
		{runsGVR, "status.startedSince=1h", "status.startedSince=1h"},
		{runsGVR, "status.startedSince=2026-11-27", "status.startedSince=2026-11-27"},
		{runsGVR, "status.startedSince!=2026-11-27T10:00:00Z", "!="},
		{runsGVR, "status.receivedSince=2026-11-27T10:00:00Z", "status.startedSince"},
		{deliveries, "status.receivedSince=yesterday", "status.receivedSince=yesterday"},
	} {
		_, err := s.dyn.Resource(c.gvr).List(ctx, metav1.ListOptions{FieldSelector: c.selector})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("list %s --field-selector %s: %v; want a 400 naming %s", c.gvr.Resource, c.selector, err, c.names)
		}
	}
}

// TestWatchSendsOnlyRunsStartedSinceItsFieldSelectorsTime: kubectl get
// runs -w --field-selector status.startedSince=T sends the runs that start
// at or after T, not those that start before it, though after the watch's
// start.
func TestWatchSendsOnlyRunsStartedSinceItsFieldSelectorsTime(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	now := time.Now()
	since := now.Add(time.Hour)
	w, err := s.dyn.Resource(runsGVR).Namespace("team-a").Watch(ctx, metav1.ListOptions{FieldSelector: "status.startedSince=" + since.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := &archive.Run{ID: archive.NewID(now), Operator: "printer", Handler: "announce", Namespace: "team-a", Name: "p", StartedAt: now}
	after := &archive.Run{ID: archive.NewID(since), Operator: "printer", Handler: "announce", Namespace: "team-a", Name: "p", StartedAt: since}
	for _, r := range []*archive.Run{before, after} {
		if err := s.store.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended")
		}
		if u, _ := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Added || u == nil || u.GetName() != after.ID {
			t.Errorf("first event: %s %v; want ADDED %s (started since), not %s (started before)", ev.Type, ev.Object, after.ID, before.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event in 30s")
	}
}

func TestGetAnswersAStatusForAnUnknownRunAWriteOrAnotherNamespace(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	r := s.run(t, 1, "team-a", "printer-1", "announce", archive.Succeeded)
	got, err := s.dyn.Resource(runsGVR).Namespace("team-a").Get(ctx, r.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if outcome, _, _ := unstructured.NestedString(got.Object, "status", "outcome"); outcome != "Succeeded" || got.GetKind() != "Run" {
		t.Errorf("run as served: %v", got.Object)
	}
	if _, err := s.dyn.Resource(runsGVR).Namespace("team-b").Get(ctx, r.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("run of team-a read in team-b: %v; want 404", err)
	}
	if _, err := s.dyn.Resource(runsGVR).Namespace("team-a").Get(ctx, archive.NewID(time.Now()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("unknown run: %v; want 404", err)
	}
	if err := s.dyn.Resource(runsGVR).Namespace("team-a").Delete(ctx, r.ID, metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("delete: %v; want 405", err)
	}
}

func TestListPagesOverTheArchiveCursor(t *testing.T) {
	s := serve(t, nil)
	var want []string
	for i := range 25 {
		// In the engine's namespace, runs of its objects and operator-wide
		// ones interleaved: one list, two queries merged.
		ns := engineNS
		if i%3 == 0 {
			ns = ""
		}
		want = append(want, s.run(t, i, ns, fmt.Sprintf("printer-%d", i), "announce", archive.Succeeded).ID)
	}
	slices.Reverse(want)
	var got []string
	opts := metav1.ListOptions{Limit: 10}
	for pages := 1; ; pages++ {
		l, err := s.dyn.Resource(runsGVR).Namespace(engineNS).List(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 10 {
			t.Fatalf("page %d has %d runs, limit 10", pages, len(l.Items))
		}
		got = append(got, names(l)...)
		if l.GetContinue() == "" {
			if pages != 3 {
				t.Errorf("%d pages of 10 for 25 runs, want 3", pages)
			}
			break
		}
		opts.Continue = l.GetContinue()
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged runs:\n%v\nwant newest first\n%v", got, want)
	}
}

func TestWatchShowsARunGoFromRunningToSucceeded(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	s.run(t, 1, "team-a", "printer-1", "announce", archive.Succeeded)
	l, err := s.dyn.Resource(runsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.dyn.Resource(runsGVR).Namespace("team-a").Watch(ctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A run of another namespace is not this watch's.
	other := &archive.Run{ID: archive.NewID(time.Now()), Operator: "printer", Handler: "announce", Namespace: "team-b", Name: "p", StartedAt: time.Now()}
	if err := s.store.Insert(ctx, other); err != nil {
		t.Fatal(err)
	}
	r := &archive.Run{ID: archive.NewID(time.Now()), Operator: "printer", Handler: "announce", Trigger: "update", Namespace: "team-a", Name: "printer-1", StartedAt: time.Now(), Attempt: 1}
	if err := s.store.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	next := func() (watch.EventType, string, string) {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended")
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				t.Fatalf("event %s of %T", ev.Type, ev.Object)
			}
			outcome, _, _ := unstructured.NestedString(u.Object, "status", "outcome")
			return ev.Type, u.GetName(), outcome
		case <-time.After(30 * time.Second):
			t.Fatal("no event in 30s")
		}
		return "", "", ""
	}
	if typ, name, outcome := next(); typ != watch.Added || name != r.ID || outcome != "Running" {
		t.Errorf("first event: %s %s %s; want ADDED %s Running", typ, name, outcome, r.ID)
	}
	r.Outcome, r.FinishedAt = archive.Succeeded, time.Now()
	if err := s.store.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	if typ, name, outcome := next(); typ != watch.Modified || name != r.ID || outcome != "Succeeded" {
		t.Errorf("second event: %s %s %s; want MODIFIED %s Succeeded", typ, name, outcome, r.ID)
	}
}

func TestWatchFromAnOldResourceVersionIsExpired(t *testing.T) {
	s := serve(t, nil)
	old := fmt.Sprint(time.Now().Add(-time.Hour).UnixNano())
	_, err := s.dyn.Resource(runsGVR).Watch(t.Context(), metav1.ListOptions{ResourceVersion: old})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("watch from an hour ago: %v; want 410 Expired, for a client to list again", err)
	}
}

func TestTableOutputHasTheColumnsOfOpkitRuns(t *testing.T) {
	s := serve(t, nil)
	r := s.run(t, 1, "team-a", "printer-1", "announce", archive.Failed)
	raw, err := s.rest.Get().Namespace("team-a").Resource("runs").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").Do(t.Context()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	want := []string{"Name", "Operator", "Kind", "Object", "Handler", "Trigger", "Attempt", "Outcome", "Runner", "Started", "Duration", "Error"}
	if table.Kind != "Table" || !slices.Equal(cols, want) {
		t.Fatalf("table %s with columns %v, want %v", table.Kind, cols, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := table.Rows[0].Cells
	if cells[0] != r.ID || cells[3] != "team-a/printer-1" || cells[7] != "Failed" || cells[10] != "1.5s" || cells[11] != "exit status 1" {
		t.Errorf("row: %v", cells)
	}
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(table.Rows[0].Object.Raw, &meta); err != nil || meta.Namespace != "team-a" || meta.Name != r.ID {
		t.Errorf("row's object (kubectl reads its namespace): %s, %v", table.Rows[0].Object.Raw, err)
	}
}

func TestLogFollowStreamsLinesAppendedDuringTheRequest(t *testing.T) {
	s := serve(t, nil)
	ctx := t.Context()
	r := s.run(t, 1, "team-a", "printer-1", "announce", archive.Running)
	if err := s.store.AppendLog(ctx, r.ID, []byte("\x1b[31mstarting\x1b[0m\n")); err != nil {
		t.Fatal(err)
	}
	body, err := s.rest.Get().Namespace("team-a").Resource("runs").Name(r.ID).SubResource("log").Param("follow", "true").Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = body.Close() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	line := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no line in 30s")
		}
		return ""
	}
	if l := line(); l != "starting" {
		t.Errorf("first line %q, want the log's, cleaned: starting", l)
	}
	// Appended while the request streams.
	if err := s.store.AppendLog(ctx, r.ID, []byte("printed 3 pages\n")); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "printed 3 pages" {
		t.Errorf("second line %q, want the one appended", l)
	}
	s.finish(t, r, archive.Succeeded)
	select {
	case l, ok := <-lines:
		if ok {
			t.Errorf("after the run ended: %q; want the stream's end", l)
		}
	case <-time.After(30 * time.Second):
		t.Error("the log's stream goes on after the run ended")
	}
}

func TestDenyingAuthorizerIsForbiddenAndNoUserUnauthorized(t *testing.T) {
	var asked []runsapi.Attributes
	s := serve(t, func(_ context.Context, a runsapi.Attributes) (bool, string, error) {
		asked = append(asked, a)
		return a.Namespace == "team-a", "no RoleBinding grants it", nil
	})
	ctx := t.Context()
	if _, err := s.dyn.Resource(runsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list in team-a, allowed: %v", err)
	}
	_, err := s.dyn.Resource(runsGVR).Namespace("team-b").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no RoleBinding grants it") || !strings.Contains(err.Error(), "alice") {
		t.Errorf("list in team-b: %v; want 403 with the user and the authorizer's reason", err)
	}
	if last := asked[len(asked)-1]; last.Verb != "list" || last.Resource != "runs" || last.Namespace != "team-b" || last.User.Name != "alice" {
		t.Errorf("authorizer asked %+v", last)
	}
	// No user: 401.
	anon, err := dynamic.NewForConfig(&rest.Config{Host: s.cfg.Host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Resource(runsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("list without a user: %v; want 401", err)
	}
}

func TestDiscoveryListsRunsTheirLogAndDeliveries(t *testing.T) {
	s := serve(t, nil)
	dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dc.ServerResourcesForGroupVersion(runsv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list.APIResources {
		got = append(got, r.Name+":"+strings.Join(r.Verbs, ","))
	}
	if want := []string{"runs:get,list,watch", "runs/log:get", "deliveries:get,list,watch"}; !slices.Equal(got, want) {
		t.Errorf("resources %v, want %v", got, want)
	}
}
