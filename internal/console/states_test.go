package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// The Database of examples/database, its CRD installed and no engine
// running it: the tests set status.state themselves, as the engine would,
// and see what the console shows and writes. A console beside an engine
// that runs it knows its definition (Options.Definitions).

var databaseCRD struct {
	once sync.Once
	def  *definition.Definition
	err  error
}

// databaseDefinition installs the Database CRD once, and returns the
// example's compiled definition.
func databaseDefinition(t *testing.T, f *fixture) *definition.Definition {
	t.Helper()
	databaseCRD.once.Do(func() {
		data, err := os.ReadFile("../../examples/database/operator.yaml")
		if err != nil {
			databaseCRD.err = err
			return
		}
		srcs, err := definition.Load("operator.yaml", data)
		if err != nil {
			databaseCRD.err = err
			return
		}
		if databaseCRD.def, err = definition.Compile(srcs[0]); err != nil {
			databaseCRD.err = err
			return
		}
		c, err := client.New(f.cfg, client.Options{Scheme: clustertest.Scheme})
		if err != nil {
			databaseCRD.err = err
			return
		}
		if err := c.Create(context.Background(), databaseCRD.def.CRD()); err != nil && !apierrors.IsAlreadyExists(err) {
			databaseCRD.err = err
		}
	})
	if databaseCRD.err != nil {
		t.Fatal(databaseCRD.err)
	}
	env := clustertest.New(t)
	clustertest.Eventually(t, 60*time.Second, "the Database CRD served", func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("demo.example.com/v1")
		list.SetKind("DatabaseList")
		return env.Client.List(ctx, list) == nil, nil
	})
	return databaseCRD.def
}

// databases is a console that knows the Database's definition, and one
// Database in a namespace of the test's own, in the state given.
type databases struct {
	f    *fixture
	env  *clustertest.Env
	def  *definition.Definition
	base string // the console's
	name string
}

func withDatabase(t *testing.T, auth console.Auth, state map[string]any) *databases {
	t.Helper()
	f := start(t)
	def := databaseDefinition(t, f)
	db := &databases{f: f, env: clustertest.New(t), def: def, name: "orders"}
	db.base = serveWith(t, console.Options{Archive: f.store, Config: f.cfg, Auth: auth,
		Definitions: func() []*definition.Definition { return []*definition.Definition{def} }})
	obj := db.object()
	obj.Object["spec"] = map[string]any{"version": "2.0"}
	create(t, db.env, obj)
	db.setState(t, state)
	return db
}

func (db *databases) object() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("demo.example.com/v1")
	obj.SetKind("Database")
	obj.SetNamespace(db.env.Namespace)
	obj.SetName(db.name)
	return obj
}

func (db *databases) path() string {
	return "/operators/database/objects/" + db.env.Namespace + "/" + db.name
}

// setState writes status.state, as the engine does.
func (db *databases) setState(t *testing.T, state map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"state": state}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.env.Client.Status().Patch(t.Context(), db.object(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// decision returns the object's DecisionAnnotation, decoded, or nil.
func (db *databases) decision(t *testing.T) *v1alpha1.Decision {
	t.Helper()
	obj := db.object()
	if err := db.env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	raw, ok := obj.GetAnnotations()[v1alpha1.DecisionAnnotation]
	if !ok {
		return nil
	}
	var d v1alpha1.Decision
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("the decision annotation %q: %v", raw, err)
	}
	return &d
}

// takeDecision removes the annotation, as the engine does once it took it.
func (db *databases) takeDecision(t *testing.T) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.DecisionAnnotation + `":null}}}`)
	if err := db.env.Client.Patch(t.Context(), db.object(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// needsAttention is status.state in the example's state that asks a
// person, at its 4th transition.
func needsAttention(run string) map[string]any {
	return map[string]any{"name": "NeedsAttention", "seq": 4, "since": time.Now().Add(-3 * time.Minute).UTC().Format(time.RFC3339),
		"from": "Verifying", "trigger": v1alpha1.TransitionGuard, "reason": "VerificationFailed", "run": run,
		"question": "The new version failed its checks. Roll back to the last good version, or accept the new one?",
		"choices":  []any{"RollingBack", "Ready"}}
}

// transition records a transition run of the object, as the engine does.
func (db *databases) transition(t *testing.T, seq int, from, to, trigger, actor, account string, at time.Time) *archive.Run {
	t.Helper()
	obj := db.object()
	if err := db.env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	run := &archive.Run{ID: archive.NewID(at), Operator: "database", Handler: v1alpha1.TransitionHandler, Action: "state", Trigger: trigger,
		APIVersion: "demo.example.com/v1", Kind: "Database", Namespace: db.env.Namespace, Name: db.name, UID: string(obj.GetUID()),
		Generation: obj.GetGeneration(), Key: fmt.Sprintf("%s/state/%d", obj.GetUID(), seq), Attempt: 1, Actor: actor,
		Diff:      []archive.Change{{Op: "change", Path: "status.state.name", Old: from, New: to}},
		StartedAt: at, FinishedAt: at, Outcome: archive.Succeeded}
	if err := db.f.store.Insert(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if err := db.f.store.AppendLog(t.Context(), run.ID, []byte(account+"\n")); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestObjectPageShowsItsStateAndTakesADecision(t *testing.T) {
	db := withDatabase(t, console.Auth{}, nil)
	t0 := time.Now().Add(-10 * time.Minute)
	db.transition(t, 1, "", "Provisioning", v1alpha1.TransitionInitial, "", "A new Database starts in Provisioning.", t0)
	failed := db.transition(t, 4, "Verifying", "NeedsAttention", v1alpha1.TransitionGuard, "",
		"Verifying -> NeedsAttention: the guard of VerificationFailed held: has(children.verify.status.failed) && children.verify.status.failed > 0", t0.Add(time.Minute))
	db.setState(t, needsAttention(failed.ID))

	page := get(t, db.base+db.path())
	mustContain(t, "the object page", page,
		`<h2 id="lifecycle">Life cycle</h2>`, `<strong class="state-name">NeedsAttention</strong>`, "(visit 4)",
		"from Verifying, its guard held", "reason VerificationFailed", `href="/runs/`+failed.ID+`"`,
		"A person is needed: The new version failed its checks.",
		`value="RollingBack"`, "Choose RollingBack", "run the last good version again", "Choose Ready", "keep the new version as it is",
		`<textarea id="decide-reason" name="reason"`, "required",
		`<svg class="states" role="img"`, `data-state="NeedsAttention" aria-current="true"`, "The states in words",
		// The timeline tells the transitions from handler runs.
		`<tr class="transition">`, "Verifying → <strong>NeedsAttention</strong>", "the guard of VerificationFailed held",
		"(none) → <strong>Provisioning</strong>", "the initial state of a new object")
	if strings.Count(page, `aria-current="true"`) != 2 { // the node, and the state in words
		t.Errorf("the page marks %d things current, want the diagram's node and the list's state", strings.Count(page, `aria-current="true"`))
	}
	run := get(t, db.base+"/runs/"+failed.ID)
	mustContain(t, "a transition's run page", run, "Verifying → <strong>NeedsAttention</strong>", "no handler ran", "its guard held",
		"The engine's account", "the guard of VerificationFailed held")
	if strings.Contains(run, "Binding context") || strings.Contains(run, ">Attempt<") {
		t.Errorf("a transition's run page reads as a handler's:\n%s", run)
	}
	op := get(t, db.base+"/operators/database")
	mustContain(t, "the operator page", op, `<svg class="states" role="img"`, `data-state="Provisioning"`, "the initial state",
		"children.verify.status.succeeded", "after 10m in the state", "refuses changes to <code>spec.version</code>")
	if strings.Contains(op, `class="node current`) || strings.Contains(op, "the current state is") {
		t.Errorf("the operator page marks a current state")
	}

	// A decision without a reason, or for another visit, is refused and
	// writes nothing.
	token := csrfField.FindStringSubmatch(page)
	if token == nil {
		t.Fatal("no CSRF token on the object page")
	}
	decide := func(form url.Values) response {
		form.Set("csrf", token[1])
		return do(t, http.MethodPost, db.base+db.path()+"/decide", form)
	}
	for what, tc := range map[string]struct {
		form   url.Values
		status int
		says   string
	}{
		"no reason":     {url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"Ready"}}, http.StatusBadRequest, "needs a reason"},
		"another visit": {url.Values{"state": {"NeedsAttention"}, "seq": {"3"}, "choose": {"Ready"}, "reason": {"r"}}, http.StatusConflict, "moved since the page was shown"},
		"not a choice":  {url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"Upgrading"}, "reason": {"r"}}, http.StatusConflict, "not a choice"},
	} {
		r := decide(tc.form)
		if r.status != tc.status || !strings.Contains(r.body, tc.says) {
			t.Errorf("a decision with %s: %d, want %d saying %q:\n%s", what, r.status, tc.status, tc.says, r.body)
		}
	}
	if r := do(t, http.MethodPost, db.base+db.path()+"/decide", url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"Ready"}, "reason": {"r"}}); r.status != http.StatusForbidden {
		t.Errorf("a decision without the CSRF token: %d, want 403", r.status)
	}
	if d := db.decision(t); d != nil {
		t.Fatalf("a refused decision wrote %+v", d)
	}

	// A valid one is written for the engine, as the console's user.
	r := decide(url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"RollingBack"}, "reason": {"the checks fail <b>twice</b>"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != db.path() {
		t.Fatalf("decide: %d to %q\n%s", r.status, r.header.Get("Location"), r.body)
	}
	d := db.decision(t)
	if d == nil || d.State != "NeedsAttention" || d.Seq != 4 || d.Choose != "RollingBack" || d.Reason != "the checks fail <b>twice</b>" ||
		!strings.HasPrefix(d.By, "console") || d.At == "" {
		t.Fatalf("the decision written: %+v", d)
	}
	page = get(t, db.base+db.path())
	// No engine runs it: the page does not say it is taken.
	mustContain(t, "the page once decided", page, "Decision sent by "+d.By, "choose <strong>RollingBack</strong>",
		"the checks fail &lt;b&gt;twice&lt;/b&gt;", "No engine has answered it yet")
	if strings.Contains(page, "The engine takes it") {
		t.Errorf("the page says the engine takes a decision no engine answered")
	}
	if strings.Contains(page, `class="choose"`) {
		t.Errorf("the page offers the choices again while a decision is sent")
	}
	if r := decide(url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"Ready"}, "reason": {"r"}}); r.status != http.StatusConflict ||
		!strings.Contains(r.body, "already sent") {
		t.Errorf("a second decision: %d\n%s", r.status, r.body)
	}

	// The engine takes it and moves: the page shows who decided, and why.
	db.takeDecision(t)
	moved := db.transition(t, 5, "NeedsAttention", "RollingBack", v1alpha1.TransitionDecision, d.By, d.By+" chose RollingBack: "+d.Reason, time.Now())
	db.setState(t, map[string]any{"name": "RollingBack", "seq": 5, "since": time.Now().UTC().Format(time.RFC3339), "from": "NeedsAttention",
		"trigger": v1alpha1.TransitionDecision, "reason": "RollBack", "by": d.By, "message": d.Reason, "run": moved.ID, "question": nil, "choices": nil})
	page = get(t, db.base+db.path())
	mustContain(t, "the page once moved", page, `<strong class="state-name">RollingBack</strong>`, "from NeedsAttention, a person decided",
		"Decided by</dt><dd>"+d.By, "the checks fail &lt;b&gt;twice&lt;/b&gt;", `data-state="RollingBack" aria-current="true"`,
		"NeedsAttention → <strong>RollingBack</strong>")
	if strings.Contains(page, "A person is needed") {
		t.Errorf("the page still asks once the state moved on")
	}
	// The stale page's form is refused now.
	if r := decide(url.Values{"state": {"NeedsAttention"}, "seq": {"4"}, "choose": {"Ready"}, "reason": {"r"}}); r.status != http.StatusConflict ||
		!strings.Contains(r.body, "it is in RollingBack (visit 5)") {
		t.Errorf("a decision from the stale page: %d\n%s", r.status, r.body)
	}
	if d := db.decision(t); d != nil {
		t.Fatalf("a stale decision wrote %+v", d)
	}

	// What the status says is escaped: whoever may write it chose it.
	db.setState(t, map[string]any{"name": "NeedsAttention", "seq": 6, "since": time.Now().UTC().Format(time.RFC3339),
		"question": `<script>alert("q")</script>`, "choices": []any{`"><img src=x onerror=alert(1)>`}, "by": "<b>mallory</b>", "message": "<i>why</i>"})
	page = get(t, db.base+db.path())
	for _, raw := range []string{`<script>alert`, `<img src=x`, `<b>mallory`, `<i>why`} {
		if strings.Contains(page, raw) {
			t.Errorf("the page shows %q unescaped", raw)
		}
	}
	mustContain(t, "the page of a hostile status", page, "&lt;script&gt;alert(&#34;q&#34;)&lt;/script&gt;", "&lt;b&gt;mallory&lt;/b&gt;")

	// A paused object's state waits with its handlers: the page says a
	// decision waits too.
	pause := []byte(`{"metadata":{"annotations":{"` + v1alpha1.PauseAnnotation + `":"true"}}}`)
	if err := db.env.Client.Patch(t.Context(), db.object(), client.RawPatch(types.MergePatchType, pause)); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "a paused object's page", get(t, db.base+db.path()), "the engine takes a decision once they are resumed")
}

// TestBrowserPersonWhoMayPatchDecidesAndOneWhoMayNotCannot: under
// Kubernetes auth, a user who may patch the Database sees the question's
// buttons, chooses one with a reason, and the Database gets the decision
// in their name; the page shows the state move without a reload. A user
// who may only get it sees no button, and a decision posted anyway is
// refused and writes nothing.
func TestBrowserPersonWhoMayPatchDecidesAndOneWhoMayNotCannot(t *testing.T) {
	db := withDatabase(t, console.Auth{Kubernetes: true}, nil)
	ns := db.env.Namespace
	failed := db.transition(t, 4, "Verifying", "NeedsAttention", v1alpha1.TransitionGuard, "", "Verifying -> NeedsAttention: VerificationFailed", time.Now())
	db.setState(t, needsAttention(failed.ID))
	group, resource := []string{"demo.example.com"}, []string{"databases"}
	deployer := serviceAccountMay(t, db.env, "deployer", group, resource, "get", "list", "patch")
	auditor := serviceAccountMay(t, db.env, "auditor", group, resource, "get", "list")

	// The auditor may read, not decide.
	page := get(t, db.base+db.path(), "Authorization", auditor)
	mustContain(t, "the auditor's page", page, "A person is needed", "You cannot decide here", "may not patch databases.demo.example.com",
		"run the last good version again")
	if strings.Contains(page, `class="choose"`) || strings.Contains(page, "decide-reason") {
		t.Errorf("the auditor is offered the choices")
	}
	csrf := csrfField.FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the auditor's page")
	}
	r := do(t, http.MethodPost, db.base+db.path()+"/decide", url.Values{"csrf": {csrf[1]}, "state": {"NeedsAttention"}, "seq": {"4"},
		"choose": {"Ready"}, "reason": {"looks fine to me"}}, "Authorization", auditor)
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "may not patch databases.demo.example.com") {
		t.Errorf("a decision by the auditor: %d, want 403 naming patch\n%s", r.status, r.body)
	}
	if d := db.decision(t); d != nil {
		t.Fatalf("the auditor's refused decision wrote %+v", d)
	}

	// The deployer decides in a browser.
	tab := browser(t)
	within(tab, t, 30*time.Second, chromedp.Navigate(db.base+"/login"))
	within(tab, t, 30*time.Second, chromedp.SetValue(chromedp.ID("token"), strings.TrimPrefix(deployer, "Bearer ")), chromedp.Submit(chromedp.ID("token")))
	waitJS(tab, t, 30*time.Second, "signed in", `document.body.innerText.includes("Signed in as system:serviceaccount:`+ns+`:deployer")`)
	within(tab, t, 30*time.Second, chromedp.Navigate(db.base+db.path()))
	current := `document.querySelectorAll("svg.states g.node.current")`
	waitJS(tab, t, 30*time.Second, "the diagram's current state is NeedsAttention",
		current+`.length === 1 && `+current+`[0].dataset.state === "NeedsAttention" && `+current+`[0].getAttribute("aria-current") === "true"`+
			` && `+current+`[0].querySelector("text.note").textContent.includes("current")`)
	screenshot(tab, t, "states")
	within(tab, t, 30*time.Second, chromedp.SendKeys(chromedp.ID("decide-reason"), "the verification failed twice; back to the last good one"))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`button.choose[value="RollingBack"]`)))
	waitJS(tab, t, 30*time.Second, "the page says the decision is sent",
		`!!document.querySelector(".decision-sent") && document.querySelector(".decision-sent").innerText.includes("Decision sent by system:serviceaccount:`+ns+`:deployer")`)
	d := db.decision(t)
	if d == nil || d.By != "system:serviceaccount:"+ns+":deployer" || d.Choose != "RollingBack" || d.State != "NeedsAttention" || d.Seq != 4 ||
		d.Reason != "the verification failed twice; back to the last good one" {
		t.Fatalf("the decision written: %+v", d)
	}

	// The engine takes it: the page shows the new state without a reload.
	// A keyboard user reading the diagram keeps it focused across the update.
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.opkitTestMark = true, document.getElementById("diagram").focus(), true`)); err != nil {
		t.Fatal(err)
	}
	db.takeDecision(t)
	db.setState(t, map[string]any{"name": "RollingBack", "seq": 5, "since": time.Now().UTC().Format(time.RFC3339), "from": "NeedsAttention",
		"trigger": v1alpha1.TransitionDecision, "reason": "RollBack", "by": d.By, "message": d.Reason, "question": nil, "choices": nil})
	waitJS(tab, t, 30*time.Second, "the diagram's current state is RollingBack, on the same page",
		`window.opkitTestMark === true && `+current+`.length === 1 && `+current+`[0].dataset.state === "RollingBack" && !document.querySelector(".decide")`)
	waitJS(tab, t, time.Second, "the diagram still focused", `document.activeElement.id === "diagram"`)

	// The engine's record of the transition: the timeline shows who
	// decided, and the engine's account with the reason.
	db.transition(t, 5, "NeedsAttention", "RollingBack", v1alpha1.TransitionDecision, d.By,
		"NeedsAttention -> RollingBack: decided by "+d.By+": "+d.Reason, time.Now())
	waitJS(tab, t, 30*time.Second, "the timeline shows the decision, by whom and why",
		`[...document.querySelectorAll("#runs ~ table tr.transition")].some(tr => tr.innerText.includes("RollingBack") && `+
			`tr.innerText.includes("a person decided, by system:serviceaccount:`+ns+`:deployer") && tr.innerText.includes("back to the last good one"))`)
}

// engineEvent posts an Event about the Database, as the engine does.
func (db *databases) engineEvent(t *testing.T, kind, reason, message string) {
	t.Helper()
	obj := db.object()
	if err := db.env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: db.env.Namespace, GenerateName: db.name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: "demo.example.com/v1", Kind: "Database", Namespace: db.env.Namespace, Name: db.name, UID: obj.GetUID()},
		Type:           kind, Reason: reason, Message: message, FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "opkit"}}
	if err := db.env.Client.Create(t.Context(), e); err != nil {
		t.Fatal(err)
	}
}

// TestObjectPageSaysTheEnginesAnswerToADecision: the page of an object
// with a decision sent says what the engine answered, in its words, as
// opkit decide does: what the decision waits for, or why it was refused;
// a decision on an object being deleted is refused before it is sent.
func TestObjectPageSaysTheEnginesAnswerToADecision(t *testing.T) {
	db := withDatabase(t, console.Auth{}, nil)
	db.setState(t, needsAttention(""))
	page := get(t, db.base+db.path())
	token := csrfField.FindStringSubmatch(page)
	if token == nil {
		t.Fatal("no CSRF token on the object page")
	}
	decide := func(choose string) response {
		return do(t, http.MethodPost, db.base+db.path()+"/decide", url.Values{"csrf": {token[1]}, "state": {"NeedsAttention"}, "seq": {"4"}, "choose": {choose}, "reason": {"it failed twice"}})
	}
	if r := decide("RollingBack"); r.status != http.StatusSeeOther {
		t.Fatalf("decide: %d\n%s", r.status, r.body)
	}
	d := db.decision(t)
	if d == nil {
		t.Fatal("no decision written")
	}

	// The engine says it waits for the state's enter handler.
	ref := statemachine.Ref(*d)
	db.engineEvent(t, corev1.EventTypeNormal, statemachine.EventDecisionWaits, ref+" waits: the handlers of this visit of NeedsAttention have not finished: page (on entering NeedsAttention)")
	page = get(t, db.base+db.path())
	mustContain(t, "the page of a decision that waits", page, "Decision sent by "+d.By, "Not taken yet.",
		"waits: the handlers of this visit of NeedsAttention have not finished: page (on entering NeedsAttention).")

	// The engine refuses it, and removes it: the page says why, and asks
	// again.
	db.takeDecision(t)
	db.engineEvent(t, corev1.EventTypeWarning, statemachine.EventDecisionRefused, ref+" is refused: the object is being deleted: its state does not move any more")
	page = get(t, db.base+db.path())
	mustContain(t, "the page of a refused decision", page, `<p class="notice decision-refused" role="status"><span aria-hidden="true">✗</span> The decision of `+d.By,
		"is refused: the object is being deleted: its state does not move any more.", `class="choose"`)

	// Being deleted: refused before it is sent.
	hold := []byte(`{"metadata":{"finalizers":["test.opkit.dev/hold"]}}`)
	if err := db.env.Client.Patch(t.Context(), db.object(), client.RawPatch(types.MergePatchType, hold)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = db.env.Client.Patch(context.Background(), db.object(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := db.env.Client.Delete(t.Context(), db.object()); err != nil {
		t.Fatal(err)
	}
	if r := decide("Ready"); r.status != http.StatusConflict || !strings.Contains(r.body, "is being deleted: its state does not move any more; nothing was sent") {
		t.Errorf("a decision on an object being deleted: %d\n%s", r.status, r.body)
	}
	if d := db.decision(t); d != nil {
		t.Errorf("a decision on an object being deleted was written: %+v", d)
	}
}
