package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// browser starts headless Chromium (Debian's chromium package; make test
// installs it) and returns a tab. Without it the test fails under CI=true
// and is skipped elsewhere.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium in PATH: install Debian's chromium package (make test does)")
		}
		t.Skip("no chromium in PATH: install Debian's chromium package, or run make test")
	}
	// Chromium leaves directories of its own in its TMPDIR
	// (org.chromium.Chromium.*): a directory of this browser's, removed
	// after it. Short: its socket's path must fit in 108 bytes, which
	// t.TempDir's long names do not.
	tmp, err := os.MkdirTemp("", "cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900),
		chromedp.Env("TMPDIR="+tmp))
	// On a loaded machine Chromium may fail to fork its helpers at start
	// ("Zygote could not fork"): try again, a few times, before failing.
	for attempt := range 4 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		if err = chromedp.Do(ctx); err == nil { // starts the browser
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return ctx
		}
		cancel()
		cancelAlloc()
	}
	t.Fatalf("starting %s (4 tries): %v", path, err)
	return nil
}

// within runs actions with a timeout of d, scaled (clustertest.Scaled).
func within(ctx context.Context, t *testing.T, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, clustertest.Scaled(d))
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// waitJS waits until a JavaScript expression is true, at most d scaled
// (clustertest.Scaled), and returns how long that took.
func waitJS(ctx context.Context, t *testing.T, d time.Duration, what, expr string) time.Duration {
	t.Helper()
	start := time.Now()
	d = clustertest.Scaled(d)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("after %s, %s is not so (%v); the page says:\n%s", d, what, err, html)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func js(s string) string { return fmt.Sprintf("%q", s) }

// screenshot saves the page under $OPKIT_SCREENSHOTS, when set (see
// docs/console.md).
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("OPKIT_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserFailureToStderrToRetry(t *testing.T) {
	f, env := withChore(t, "steady", "water the plants")
	tab := browser(t)

	// The inbox, open before the failure; the page is marked to show it is
	// never reloaded.
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/failures?since=1h"))
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.opkitTestMark = true`)); err != nil {
		t.Fatal(err)
	}
	object := env.Namespace + "/leak"
	create(t, env, chore(env.Namespace, "leak", "fail", "fix the leak"))
	waitRuns(t, f, env.Namespace, "leak", archive.Failed, 1)
	took := waitJS(tab, t, 10*time.Second, "the failure in the inbox",
		`document.getElementById("live").innerText.includes(`+js(object)+`)`)
	// Shown without a reload (below): the page is live, checked every
	// second; how soon is logged, not bounded, for a loaded machine.
	t.Logf("failure recorded -> shown in the inbox: %s", took)
	waitJS(tab, t, time.Second, "the same page, not reloaded", `window.opkitTestMark === true`)

	// Clicking its run shows the handler's stderr.
	runLink := `//tr[th/a[text()=` + js(object) + `]]//a[@class="run-link"]`
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(runLink)))
	waitJS(tab, t, 10*time.Second, "the run page with the stderr",
		`location.pathname.startsWith("/runs/") && document.querySelector("pre.log").innerText.includes("boom: the disk is full")`)
	waitJS(tab, t, time.Second, "no control sequences", `!document.body.innerText.includes("[31m")`)

	// Retry from the object's timeline makes a new run there.
	var gaveUp string
	for _, r := range waitRuns(t, f, env.Namespace, "leak", archive.GaveUp, 1) {
		if r.Outcome == archive.GaveUp {
			gaveUp = r.ID
		}
	}
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/operators/chores/objects/"+env.Namespace+"/leak"))
	rows := `document.querySelectorAll("section[aria-labelledby=runs] tbody tr").length`
	before, err := chromedp.Run(tab, chromedp.Evaluate[int](rows))
	if err != nil {
		t.Fatal(err)
	}
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`button.retry`)))
	waitJS(tab, t, 30*time.Second, "a new run on the timeline after Retry", fmt.Sprintf(`%s > %d`, rows, before))
	// The handler still fails, so later attempts may follow: the run to
	// check is the first one after the run that gave up.
	page, err := f.store.List(t.Context(), archive.Query{Namespace: env.Namespace, Name: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(page.Runs, func(r archive.Run) bool { return r.ID == gaveUp })
	if i < 1 {
		t.Fatalf("no run after the one that gave up (%s) among %d runs", gaveUp, len(page.Runs))
	}
	if r := page.Runs[i-1]; r.Attempt != 1 {
		t.Errorf("the first run after Retry is attempt %d, want 1 (failed attempts cleared)", r.Attempt)
	}

	// Keyboard: the skip link is the first stop, and takes focus to main.
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.activeElement.blur(), true`)); err != nil {
		t.Fatal(err)
	}
	within(tab, t, 10*time.Second, chromedp.KeyEvent("\t"))
	waitJS(tab, t, 2*time.Second, "the skip link focused first", `document.activeElement.classList.contains("skip")`)

	if os.Getenv("OPKIT_SCREENSHOTS") != "" {
		shoot(tab, t, f, env.Namespace)
	}
}

// shoot takes the screenshots of docs/console.md.
func shoot(tab context.Context, t *testing.T, f *fixture, ns string) {
	page, err := f.store.List(t.Context(), archive.Query{Namespace: ns, Name: "leak", Failed: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"overview": "/",
		"operator": "/operators/chores",
		"timeline": "/operators/chores/objects/" + ns + "/leak",
		"run":      "/runs/" + page.Runs[0].ID,
		"failures": "/failures?since=1h",
	} {
		within(tab, t, 30*time.Second, chromedp.Navigate(f.url+path))
		screenshot(tab, t, name)
	}
}

func TestBrowserActionWithoutAValidTokenIsRefused(t *testing.T) {
	f, env := withChore(t, "vault", "x")
	tab := browser(t)
	const token = "browser-test-token-0123456789"
	base := serve(t, f, console.Auth{Token: token})

	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/operators/chores/objects/"+env.Namespace+"/vault"))
	waitJS(tab, t, 5*time.Second, "a refusal before signing in", `document.title.startsWith("Forbidden")`)
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/login"))
	screenshot(tab, t, "login")
	within(tab, t, 30*time.Second, chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")))
	waitJS(tab, t, 10*time.Second, "the overview after signing in", `location.pathname === "/" && document.body.innerText.includes("Signed in as")`)
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/operators/chores/objects/"+env.Namespace+"/vault"))
	waitJS(tab, t, 5*time.Second, "the timeline", `!!document.querySelector("button.pause")`)

	// The session ends (signed out elsewhere); the form still on screen
	// must not act.
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`fetch("/logout", {method: "POST"}).then(() => true)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`button.pause`)))
	waitJS(tab, t, 10*time.Second, "a 403 page", `document.title.startsWith("Forbidden") && document.body.innerText.includes("valid token")`)
	if _, ok := annotations(t, env, env.Namespace, "vault")[v1alpha1.PauseAnnotation]; ok {
		t.Fatal("an action without a valid token paused the object")
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Errorf("the console is served on %s, not loopback", base)
	}
}

func TestBrowserWatchedObjectsAndSchedulesFromTheInbox(t *testing.T) {
	f := start(t)
	u := withUnowned(t, f)
	tab := browser(t)
	ns := u.env.Namespace

	// The inbox's watched Deployment leads to its timeline: its runs, and
	// why it offers no action.
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/failures"))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(`//tr[th/a[text()=`+js(ns+"/web")+`]]/th/a`)))
	waitJS(tab, t, 10*time.Second, "the watched Deployment's timeline",
		`location.pathname === `+js(u.webURL())+` && !!document.querySelector("section[aria-labelledby=runs] a[href='/runs/`+u.webFailed+`']")`)
	waitJS(tab, t, time.Second, "no action, and why",
		`!document.querySelector("button.retry, button.pause") && document.querySelector(".no-actions").innerText.includes("opkit never writes")`)

	// Its failed run, and back to the object.
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`section[aria-labelledby=runs] a[href="/runs/`+u.webFailed+`"]`)))
	waitJS(tab, t, 10*time.Second, "the watched Deployment's run",
		`location.pathname === "/runs/`+u.webFailed+`" && document.querySelector("pre.log").innerText.includes("no route to the registry")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(`//dd/a[text()=`+js("Deployment "+ns+"/web")+`]`)))
	waitJS(tab, t, 10*time.Second, "the timeline again", `location.pathname === `+js(u.webURL()))

	// The watch operator's page lists the Deployment from its handler record.
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/operators/"+u.watch))
	waitJS(tab, t, 10*time.Second, "the watched objects", `document.querySelector("#live table").innerText.includes("Stalled")`)

	// The schedule's failure leads to its schedule on the calendar's page,
	// and its run back there.
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/failures"))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(`//tr[td[text()=`+js(u.calendar)+`]]/th/a[text()="report"]`)))
	waitJS(tab, t, 10*time.Second, "the calendar's schedule",
		`location.pathname === "/operators/`+u.calendar+`" && location.hash === "#schedule-report" && document.getElementById("schedule-report").innerText.includes("Next slot")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`#schedule-report a[href="/runs/`+u.slotFailed+`"]`)))
	waitJS(tab, t, 10*time.Second, "the schedule's run", `location.pathname === "/runs/`+u.slotFailed+`" && document.body.innerText.includes("the report server said 503")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(`//dd/a[text()="schedule report"]`)))
	waitJS(tab, t, 10*time.Second, "the schedule again", `location.pathname === "/operators/`+u.calendar+`" && location.hash === "#schedule-report"`)
}

func TestBrowserRefusedAndHandledDeliveriesLeadToWhyAndToTheirRuns(t *testing.T) {
	f := start(t)
	ev := withDeliveries(t, f)
	tab := browser(t)
	row := func(id string) string {
		return `document.querySelector("a.delivery-link[href='/events/` + id + `']").closest("tr")`
	}
	shown := func(expr string) string { // an element on screen, not hidden
		return `(function (e) { return !!e && e.getBoundingClientRect().height > 0 && getComputedStyle(e).visibility === "visible"; })(` + expr + `)`
	}

	// The list says why the refused delivery was refused; Refused only
	// leaves out the accepted ones but those a handler refused.
	within(tab, t, 30*time.Second, chromedp.Navigate(ev.base+"/events?operator="+ev.op))
	waitJS(tab, t, 10*time.Second, "the refused delivery's reason in the list",
		shown(row(ev.forged)+`.querySelector("td.reason-cell")`)+` && `+row(ev.forged)+`.querySelector("td.reason-cell").innerText === "bad signature"`)
	screenshot(tab, t, "events")
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`a.refused-only`)))
	waitJS(tab, t, 10*time.Second, "the refused deliveries only",
		`location.search.includes("refused=1") && document.querySelectorAll("a.delivery-link").length === 3 && !!`+row(ev.forged)+` && !!`+row(ev.turnedDown)+
			` && !document.querySelector("a.delivery-link[href='/events/`+ev.deployed+`']")`)

	// Its page says why first.
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`a.delivery-link[href="/events/`+ev.forged+`"]`)))
	waitJS(tab, t, 10*time.Second, "the refused delivery's page with its reason",
		`location.pathname === "/events/`+ev.forged+`" && `+shown(`document.querySelector("p.reason")`)+
			` && document.querySelector("p.reason").innerText === "Why it was refused: bad signature"`)

	// The handled delivery's page links its run, which links back.
	within(tab, t, 30*time.Second, chromedp.Navigate(ev.base+"/events?operator="+ev.op))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`a.delivery-link[href="/events/`+ev.deployed+`"]`)))
	waitJS(tab, t, 10*time.Second, "the handled delivery's page",
		`location.pathname === "/events/`+ev.deployed+`" && `+shown(`document.querySelector("section[aria-labelledby=caused] a.run-link[href='/runs/`+ev.run+`']")`)+
			` && !document.body.innerText.includes(`+js(payloadToken)+`)`)
	screenshot(tab, t, "delivery")
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`section[aria-labelledby=caused] a.run-link[href="/runs/`+ev.run+`"]`)))
	waitJS(tab, t, 10*time.Second, "the run's page",
		`location.pathname === "/runs/`+ev.run+`" && document.title.startsWith("Run `+ev.run+`") && document.body.innerText.includes("deploy (exec) of operator `+ev.op+`")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.Search(`//dd/a[text()=`+js("delivery "+ev.deployed)+`]`)))
	waitJS(tab, t, 10*time.Second, "the delivery again", `location.pathname === "/events/`+ev.deployed+`"`)

	if os.Getenv("OPKIT_SCREENSHOTS") != "" {
		within(tab, t, 30*time.Second, chromedp.Navigate(ev.base+"/operators/"+ev.op+"/sources/github"))
		screenshot(tab, t, "source")
	}
}

func TestBrowserARunOnARunnerNamesItsRunnerAndOthersNone(t *testing.T) {
	f := start(t)
	env := clustertest.New(t)
	operator := "parcels-" + env.Namespace[len(env.Namespace)-6:]
	at := time.Now().Add(-time.Minute)
	run := func(name, runner string) string {
		return record(t, f.store, archive.Run{Operator: operator, Handler: "ship", Action: "exec", Trigger: "create", APIVersion: "parcels.example.com/v1",
			Kind: "Parcel", Namespace: env.Namespace, Name: name, UID: "uid-" + name, Generation: 1, Key: "uid-" + name + "/1/ship", Attempt: 1,
			StartedAt: at, Outcome: archive.Succeeded, Runner: runner})
	}
	onRunner := run("p1", "parcels-runner-3f2a9c1e-7d9kq")
	local := run("p2", "")
	tab := browser(t)
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/runs/"+onRunner))
	waitJS(tab, t, 10*time.Second, "the run names its runner",
		`location.pathname === "/runs/`+onRunner+`" && [...document.querySelectorAll("dl.facts dt")].some(dt => dt.innerText === "Runner" && dt.nextElementSibling.innerText.includes("parcels-runner-3f2a9c1e-7d9kq"))`)
	screenshot(tab, t, "run-on-a-runner")
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/runs/"+local))
	waitJS(tab, t, 10*time.Second, "a run not on a runner shows none",
		`location.pathname === "/runs/`+local+`" && document.title.startsWith("Run `+local+`") && ![...document.querySelectorAll("dl.facts dt")].some(dt => dt.innerText === "Runner")`)
}

// TestBrowserRunAgainFromARunPage: a succeeded run's page offers Run
// again; with a reason, it starts a re-run of the run for its object,
// recorded with who asked (the console without auth: its OS user) and
// why, and both runs' pages link each other.
func TestBrowserRunAgainFromARunPage(t *testing.T) {
	f, env := withChore(t, "dust", "dust the shelves")
	tab := browser(t)
	orig := waitRuns(t, f, env.Namespace, "dust", archive.Succeeded, 1)[0]

	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/runs/"+orig.ID))
	within(tab, t, 30*time.Second,
		chromedp.SendKeys(chromedp.CSS(`#rerun-reason`), "the shelves got dusty again"),
		chromedp.Click(chromedp.CSS(`button.rerun`)))

	var rerun *archive.Run
	clustertest.Eventually(t, 60*time.Second, "the re-run recorded and succeeded", func(ctx context.Context) (bool, error) {
		got, err := f.store.Get(ctx, orig.ID)
		if err != nil || len(got.Reruns) != 1 {
			return false, err
		}
		rerun, err = f.store.Get(ctx, got.Reruns[0])
		return err == nil && rerun.Outcome == archive.Succeeded, err
	})
	if rerun.RerunOf != orig.ID || rerun.Trigger != v1alpha1.TriggerRerun || rerun.Reason != "the shelves got dusty again" || !strings.HasPrefix(rerun.Actor, "console") {
		t.Errorf("the re-run: rerunOf %q trigger %q reason %q actor %q; want %s, rerun, the reason typed, the console's user", rerun.RerunOf, rerun.Trigger, rerun.Reason, rerun.Actor, orig.ID)
	}
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/runs/"+rerun.ID))
	waitJS(tab, t, 10*time.Second, "the re-run's page links the run it repeats, with the reason",
		`!!document.querySelector(`+js(`a[href="/runs/`+orig.ID+`"]`)+`) && document.body.innerText.includes("the shelves got dusty again")`)
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/runs/"+orig.ID))
	waitJS(tab, t, 10*time.Second, "the run's page links its re-run",
		`!!document.querySelector(`+js(`a[href="/runs/`+rerun.ID+`"]`)+`)`)

	// The object's timeline: the re-run's row says it re-runs the run,
	// who asked and why.
	within(tab, t, 30*time.Second, chromedp.Navigate(f.url+"/operators/chores/objects/"+env.Namespace+"/dust"))
	row := `[...document.querySelectorAll("#runs ~ table tr")].find(tr => tr.querySelector(` + js(`th a[href="/runs/`+rerun.ID+`"]`) + `))`
	waitJS(tab, t, 10*time.Second, "the timeline's row of the re-run names the run it repeats, who asked and why",
		row+` && `+row+`.querySelector(`+js(`.asked a[href="/runs/`+orig.ID+`"]`)+`) && `+
			row+`.innerText.includes("re-run of run `+orig.ID+`, asked by `+rerun.Actor+`: the shelves got dusty again")`)
}
