package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
)

// handlerEnv makes the test binary the Chore operator's handler.
const handlerEnv = "OPKIT_CONSOLE_TEST_HANDLER"

func TestMain(m *testing.M) {
	if os.Getenv(handlerEnv) != "" {
		clustertest.Exit(handler())
	}
	clustertest.Main(m)
}

// handler is the Chore handler: mode fail fails with a message on stderr
// (in color, as a terminal program would write it).
func handler() int {
	in, _ := io.ReadAll(os.Stdin)
	fmt.Fprintf(os.Stderr, "\x1b[1mworking\x1b[0m on %d bytes of context\n", len(in))
	if strings.Contains(string(in), `"mode":"fail"`) {
		fmt.Fprintln(os.Stderr, "\x1b[31mboom: the disk is full\x1b[0m")
		return 1
	}
	fmt.Println(`{"status": {"done": true}}`)
	return 0
}

const choresOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: chores}
spec:
  resource:
    group: console.example.com
    kind: Chore
    versions:
    - name: v1
      schema:
        type: object
        properties:
          mode: {type: string}
          text: {type: string}
      printerColumns:
      - {name: Text, jsonPath: .spec.text, type: string}
  children:
  - id: note
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-note"}
      data: {text: "${self.spec.text}"}
  handlers:
  - name: work
    on: [create, update]
    retry: {maxAttempts: 2, initialDelay: 300ms, maxDelay: 1s, factor: 2, jitter: 0}
    exec:
      command: [%q]
      env: [{name: ` + handlerEnv + `, value: "1"}]
`

// fixture is one engine running the Chore operator, its archive, and a
// console without auth, shared by the package's tests.
type fixture struct {
	cfg   *rest.Config
	store *archive.SQLite
	url   string // the console's
}

var shared struct {
	once sync.Once
	f    *fixture
	err  error
}

func start(t *testing.T) *fixture {
	t.Helper()
	cfg := clustertest.Cluster(t).RESTConfig()
	shared.once.Do(func() { shared.f, shared.err = startFixture(cfg) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.f
}

func startFixture(cfg *rest.Config) (*fixture, error) {
	ctx := context.Background() // it lives as long as the test binary
	dir, err := os.MkdirTemp("", "opkit-console-test-")
	if err != nil {
		return nil, err
	}
	store, err := archive.OpenSQLite(ctx, filepath.Join(dir, "runs.db"), archive.Options{})
	if err != nil {
		return nil, err
	}
	srv, err := console.New(console.Options{Archive: store, Config: cfg})
	if err != nil {
		return nil, err
	}
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ctx, ln) }()
	f := &fixture{cfg: cfg, store: store, url: "http://" + ln.Addr().String()}
	// The console is served on its own (no Runs): the engine beside it
	// only links it.
	s, err := stack.Start(ctx, stack.Options{Engine: engine.Options{Config: cfg, ConsoleURL: f.url}, Store: store})
	if err != nil {
		return nil, err
	}
	e := s.Engine
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	src, err := definition.Load("chores.yaml", []byte(fmt.Sprintf(choresOperator, bin)))
	if err != nil {
		return nil, err
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		return nil, err
	}
	return f, e.Apply(ctx, d)
}

func chore(ns, name, mode, text string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "console.example.com/v1", "kind": "Chore",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"mode": mode, "text": text},
	}}
}

func create(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
}

// withChore starts the fixture and a namespace for the test, with a Chore
// whose handler has succeeded.
func withChore(t *testing.T, name, text string) (*fixture, *clustertest.Env) {
	t.Helper()
	f := start(t)
	env := clustertest.New(t)
	create(t, env, chore(env.Namespace, name, "ok", text))
	waitRuns(t, f, env.Namespace, name, archive.Succeeded, 1)
	return f, env
}

// waitRuns waits until the object has a run with the outcome, and returns
// the object's runs, newest first.
func waitRuns(t *testing.T, f *fixture, ns, name string, outcome archive.Outcome, n int) []archive.Run {
	t.Helper()
	var runs []archive.Run
	clustertest.Eventually(t, 60*time.Second, fmt.Sprintf("%d %s runs of %s/%s", n, outcome, ns, name), func(ctx context.Context) (bool, error) {
		page, err := f.store.List(ctx, archive.Query{Namespace: ns, Name: name})
		if err != nil {
			return false, err
		}
		runs = page.Runs
		got := 0
		for _, r := range runs {
			if r.Outcome == outcome {
				got++
			}
		}
		return got >= n, nil
	})
	return runs
}

type response struct {
	status int
	body   string
	header http.Header
}

// do makes a request to the console; headers are name, value pairs.
func do(t *testing.T, method, u string, form url.Values, headers ...string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(data), resp.Header}
}

func get(t *testing.T, u string, headers ...string) string {
	t.Helper()
	r := do(t, http.MethodGet, u, nil, headers...)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, r.status, r.body)
	}
	return r.body
}

func mustContain(t *testing.T, what, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, page)
		}
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestPagesShowOperatorsObjectsRunsAndFailures(t *testing.T) {
	f := start(t)
	env := clustertest.New(t)
	create(t, env, chore(env.Namespace, "tidy", "ok", "tidy the desk"))
	create(t, env, chore(env.Namespace, "flood", "fail", "bail the water"))
	ok := waitRuns(t, f, env.Namespace, "tidy", archive.Succeeded, 1)[0]
	failed := waitRuns(t, f, env.Namespace, "flood", archive.GaveUp, 1)[0]

	overview := get(t, f.url+"/")
	mustContain(t, "the overview", overview, `<a href="/operators/chores">chores</a>`, "Chore", "Runs per minute", "Failure rate")

	// The objects' table: printer columns, conditions, last run.
	clustertest.Eventually(t, 30*time.Second, "the operator page shows flood Stalled", func(context.Context) (bool, error) {
		page := get(t, f.url+"/operators/chores?state=Stalled")
		return strings.Contains(page, ">flood</a>"), nil
	})
	op := get(t, f.url+"/operators/chores")
	mustContain(t, "the operator page", op, "<th scope=\"col\">Text</th>", "tidy the desk", "bail the water",
		"/runs/"+ok.ID, "Stalled", "Ready")

	// An object's timeline: runs with their outcome, children, Events
	// linking their runs, the YAML.
	timeline := get(t, f.url+"/operators/chores/objects/"+env.Namespace+"/flood")
	mustContain(t, "the timeline", timeline, `href="/runs/`+failed.ID+`"`, "Gave up", "exit status 1: boom: the disk is full",
		"ConfigMap", "flood-note", "HandlerGaveUp", "kind: Chore", "Retry now", "Pause handlers")
	if strings.Contains(timeline, "managedFields") {
		t.Errorf("the timeline's YAML shows managedFields")
	}

	// A run: its outcome, error, context and log, control sequences gone.
	run := get(t, f.url+"/runs/"+failed.ID)
	mustContain(t, "the run page", run, "Gave up", "exit status 1", "boom: the disk is full", "working", failed.Key, "Retry now")
	if strings.Contains(run, "\x1b") || strings.Contains(run, "[31m") {
		t.Errorf("the run page shows terminal control sequences")
	}
	search := get(t, f.url+"/runs/"+failed.ID+"?q=DISK")
	mustContain(t, "a log search", search, "Lines matching", "boom: the disk is full")
	if strings.Contains(search, "working") {
		t.Errorf("a search for DISK shows lines without it")
	}
	raw := get(t, f.url+"/runs/"+failed.ID+"/log")
	if !strings.HasPrefix(raw, "working on ") || !strings.Contains(raw, "boom: the disk is full\n") {
		t.Errorf("the raw log: %q", raw)
	}

	// The inbox groups by error, and links the run.
	inbox := get(t, f.url+"/failures")
	mustContain(t, "the failures inbox", inbox, "<code class=\"error\">exit status 1: boom: the disk is full</code>", env.Namespace+"/flood", `href="/runs/`+failed.ID+`"`, "gave up")
	if strings.Contains(inbox, env.Namespace+"/tidy") {
		t.Errorf("the inbox shows an object that never failed")
	}

	// The Events name their runs' console pages (the engine's ConsoleURL).
	clustertest.Eventually(t, 30*time.Second, "an Event links its run's page", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "HandlerGaveUp" && strings.Contains(e.Message, "("+f.url+"/runs/"+failed.ID+")") {
				return true, nil
			}
		}
		return false, nil
	})

	// What is not there says so.
	for path, want := range map[string]int{
		"/runs/0000000000zzzzzzzz": http.StatusNotFound,
		"/runs/not-an-id":          http.StatusNotFound,
		"/operators/nothing":       http.StatusNotFound,
		"/operators/nothing/objects/" + env.Namespace + "/x":         http.StatusNotFound,
		"/live?path=/nowhere":                                        http.StatusNotFound,
		"/operators/chores/objects/" + env.Namespace + "/flood/melt": http.StatusNotFound,
	} {
		if r := do(t, http.MethodGet, f.url+path, nil); r.status != want {
			t.Errorf("GET %s: %d, want %d", path, r.status, want)
		}
	}
}

func TestLogsArePagedFromTheEnd(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	run := &archive.Run{ID: archive.NewID(time.Now()), Operator: "chores", Handler: "work", Action: "exec", Trigger: "create",
		APIVersion: "console.example.com/v1", Kind: "Chore", Namespace: "elsewhere", Name: "long", UID: "u-long", Generation: 1,
		Key: "u-long/1/work", Attempt: 1, StartedAt: time.Now(), Outcome: archive.Running}
	if err := f.store.Insert(ctx, run); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&log, "line %05d of a long log\n", i)
	}
	if err := f.store.AppendLog(ctx, run.ID, []byte(log.String())); err != nil {
		t.Fatal(err)
	}
	page := get(t, f.url+"/runs/"+run.ID)
	mustContain(t, "a long log's page", page, "Page 2 of 2", "line 04999 of a long log", `data-live="/runs/`+run.ID)
	if strings.Contains(page, "line 00000 ") {
		t.Errorf("the last page of the log shows its first line")
	}
	first := get(t, f.url+"/runs/"+run.ID+"?page=1")
	mustContain(t, "the first page", first, "Page 1 of 2", "line 00000 of a long log")
}

func TestActionsNeedTheFormsCSRFToken(t *testing.T) {
	f, env := withChore(t, "guarded", "x")
	obj := chore(env.Namespace, "guarded", "", "")
	objURL := "/operators/chores/objects/" + env.Namespace + "/guarded"
	token := csrfField.FindStringSubmatch(get(t, f.url+objURL))
	if token == nil {
		t.Fatal("the timeline has no CSRF token")
	}
	paused := func() bool {
		t.Helper()
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		_, ok := obj.GetAnnotations()[v1alpha1.PauseAnnotation]
		return ok
	}

	for what, r := range map[string]response{
		"no token":       do(t, http.MethodPost, f.url+objURL+"/pause", url.Values{}),
		"a wrong token":  do(t, http.MethodPost, f.url+objURL+"/pause", url.Values{"csrf": {"forged"}}),
		"another origin": do(t, http.MethodPost, f.url+objURL+"/pause", url.Values{"csrf": {token[1]}}, "Origin", "https://evil.example.com"),
		"a cross-site":   do(t, http.MethodPost, f.url+objURL+"/pause", url.Values{"csrf": {token[1]}}, "Sec-Fetch-Site", "cross-site"),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("pause with %s: %d, want 403", what, r.status)
		}
	}
	if paused() {
		t.Fatal("a refused pause paused the object")
	}

	r := do(t, http.MethodPost, f.url+objURL+"/pause", url.Values{"csrf": {token[1]}, "back": {"https://evil.example.com/"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != objURL {
		t.Fatalf("pause: %d to %q; want 303 to the timeline (never another site)", r.status, r.header.Get("Location"))
	}
	if !paused() {
		t.Fatal("the object is not paused")
	}
	clustertest.Eventually(t, 30*time.Second, "the timeline offers Resume", func(context.Context) (bool, error) {
		page := get(t, f.url+objURL)
		return strings.Contains(page, "Resume handlers") && strings.Contains(page, "Paused"), nil
	})
	if r := do(t, http.MethodPost, f.url+objURL+"/resume", url.Values{"csrf": {token[1]}}); r.status != http.StatusSeeOther {
		t.Fatalf("resume: %d\n%s", r.status, r.body)
	}
	if paused() {
		t.Fatal("resume left the object paused")
	}
}

func TestListenRefusesAnOpenAddressWithoutAuth(t *testing.T) {
	f := start(t)
	srv, err := console.New(console.Options{Archive: f.store, Config: f.cfg})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if ln, err := srv.Listen(addr); err == nil || !strings.Contains(err.Error(), "needs auth") {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("Listen(%q) without auth: %v; want a refusal that says auth is needed", addr, err)
		}
	}
	withToken, err := console.New(console.Options{Archive: f.store, Config: f.cfg, Auth: console.Auth{Token: "a-long-enough-token"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := withToken.Listen("0.0.0.0:0")
	if err != nil {
		t.Fatalf("Listen on every address with a token: %v", err)
	}
	ln.Close()
}

func TestOverviewMarksOperatorsTheEngineBesideItDoesNotRun(t *testing.T) {
	f := start(t)
	// The fixture's console has no engine to ask: it marks nothing.
	if page := get(t, f.url+"/"); strings.Contains(page, "not run by this engine") {
		t.Errorf("a console on its own marked an operator as not run:\n%s", page)
	}
	for _, tc := range []struct {
		runs bool
		want bool
	}{{runs: false, want: true}, {runs: true, want: false}} {
		srv, err := console.New(console.Options{Archive: f.store, Config: f.cfg, Runs: func(string) bool { return tc.runs }})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		page := get(t, "http://"+ln.Addr().String()+"/")
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the console stopped with %v", err)
		}
		mustContain(t, "the overview", page, `href="/operators/chores"`)
		if got := strings.Contains(page, "not run by this engine"); got != tc.want {
			t.Errorf("engine runs chores: %v; the overview marks it as not run: %v, want %v", tc.runs, got, tc.want)
		}
	}
}
