package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// unowned is a watch operator and a calendar in the cluster (Operator
// objects no engine runs), with runs and handler records written straight
// into the fixture's archive, as their engine would have.
type unowned struct {
	env *clustertest.Env
	// watch watches the Deployments labelled team=a in env.Namespace;
	// calendar runs its handler report every hour.
	watch, calendar string
	// web is a Deployment that exists, whose handler announce gave up
	// (failed run webFailed after webOK); old is one deleted while its
	// handler record stays (its delete handler is retrying).
	webUID                  string
	webOK, webFailed, oldID string
	// slot is the calendar's last slot handled; slotOK and slotFailed
	// are its runs.
	slot               time.Time
	slotOK, slotFailed string
}

// installOperatorCRD installs operators.opkit.dev, as opkit run does.
func installOperatorCRD(t *testing.T, env *clustertest.Env) {
	t.Helper()
	crd := v1alpha1.CustomResourceDefinition()
	if err := env.Client.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the Operator CRD established", func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	// Established is not yet served: the API server's discovery, which
	// the client's mapper reads, follows a moment later.
	clustertest.Eventually(t, 30*time.Second, "the Operator kind in discovery", func(context.Context) (bool, error) {
		_, err := env.Client.RESTMapper().RESTMapping(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind).GroupKind(), v1alpha1.SchemeGroupVersion.Version)
		return err == nil, nil
	})
}

// applyOperator creates an Operator from YAML in the cluster until the
// test ends.
func applyOperator(t *testing.T, env *clustertest.Env, manifest string) {
	t.Helper()
	src, err := definition.Load("operator.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	op := src[0].Operator
	if err := env.Client.Create(t.Context(), op); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.Client.Delete(ctx, op)
	})
}

const watchOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  watch:
    apiVersion: apps/v1
    kind: Deployment
    namespaces: [%s]
    selector: {matchLabels: {team: a}}
  handlers:
  - name: announce
    on: [create, update, delete]
    exec: {command: [/bin/true]}
`

const calendarOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  handlers:
  - name: report
    on: [schedule]
    schedule: {every: 1h}
    exec: {command: [/bin/true]}
`

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"team": "a", "app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/web:1"}}},
			},
		},
	}
}

// record writes a run as the engine would: inserted, then finished.
func record(t *testing.T, store archive.Store, r archive.Run) string {
	t.Helper()
	r.ID = archive.NewID(r.StartedAt)
	outcome, failure, retry := r.Outcome, r.Error, r.NextRetryAt
	r.Outcome, r.Error, r.NextRetryAt = archive.Running, "", time.Time{}
	if err := store.Insert(t.Context(), &r); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendLog(t.Context(), r.ID, []byte("looking at "+r.Name+"\n"+failure+"\n")); err != nil {
		t.Fatal(err)
	}
	r.Outcome, r.Error, r.NextRetryAt, r.FinishedAt = outcome, failure, retry, r.StartedAt.Add(300*time.Millisecond)
	if err := store.Finish(t.Context(), &r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func putState(t *testing.T, store archive.Store, s archive.HandlerRecord, data any) {
	t.Helper()
	var err error
	if s.Data, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	if err := store.PutHandlerRecord(t.Context(), &s); err != nil {
		t.Fatal(err)
	}
}

// withUnowned makes the watch operator and the calendar, their objects,
// runs and handler records, and waits until the console lists them.
func withUnowned(t *testing.T, f *fixture) *unowned {
	t.Helper()
	env := clustertest.New(t)
	installOperatorCRD(t, env)
	suffix := env.Namespace[len(env.Namespace)-6:]
	u := &unowned{env: env, watch: "deploys-" + suffix, calendar: "nightly-" + suffix}
	applyOperator(t, env, fmt.Sprintf(watchOperator, u.watch, env.Namespace))
	applyOperator(t, env, fmt.Sprintf(calendarOperator, u.calendar))

	web := deployment(env.Namespace, "web")
	if err := env.Client.Create(t.Context(), web); err != nil {
		t.Fatal(err)
	}
	u.webUID = string(web.UID)
	now := time.Now().Add(-time.Minute)
	ns := env.Namespace
	watched := func(name, uid, handler, trigger string, at time.Time, outcome archive.Outcome, failure string) archive.Run {
		return archive.Run{Operator: u.watch, Handler: handler, Action: "exec", Trigger: trigger, APIVersion: "apps/v1", Kind: "Deployment",
			Namespace: ns, Name: name, UID: uid, Generation: 1, Key: uid + "/1/" + handler, Attempt: 1, StartedAt: at, Outcome: outcome, Error: failure}
	}
	u.webOK = record(t, f.store, watched("web", u.webUID, "announce", "create", now, archive.Succeeded, ""))
	failed := watched("web", u.webUID, "announce", "update", now.Add(10*time.Second), archive.GaveUp, "exit status 1: no route to the registry")
	failed.Generation, failed.Key, failed.Attempt = 2, u.webUID+"/2/announce", 2
	u.webFailed = record(t, f.store, failed)
	putState(t, f.store, archive.HandlerRecord{Operator: u.watch, Key: u.webUID, APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web", UpdatedAt: now.Add(11 * time.Second)},
		map[string]any{
			"state": map[string]any{
				"handlers": map[string]any{"announce": map[string]any{"generation": 1, "attempt": 2, "target": 2, "stalled": true, "lastError": failed.Error}},
				"lastRun":  map[string]any{"id": u.webFailed, "handler": "announce", "trigger": "update", "outcome": "GaveUp", "attempt": 2},
				"observed": map[string]any{"generation": 2, "hash": "h"},
			},
			"object": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"namespace": ns, "name": "web", "uid": u.webUID}},
		})
	u.oldID = record(t, f.store, watched("old", "uid-old-"+suffix, "announce", "delete", now.Add(5*time.Second), archive.Failed, "exit status 1: the registry is away"))
	putState(t, f.store, archive.HandlerRecord{Operator: u.watch, Key: "uid-old-" + suffix, APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "old", UpdatedAt: now.Add(6 * time.Second)},
		map[string]any{
			"state": map[string]any{"handlers": map[string]any{"announce": map[string]any{"attempt": 1, "target": 1, "lastError": "exit status 1: the registry is away", "nextRetryAt": now.Add(time.Hour).UTC().Format(time.RFC3339)}}},
			"object": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{
				"namespace": ns, "name": "old", "uid": "uid-old-" + suffix, "deletionTimestamp": now.UTC().Format(time.RFC3339), "labels": map[string]any{"team": "a"}}},
		})

	u.slot = time.Now().Truncate(time.Hour).UTC()
	slotRun := func(slot time.Time, outcome archive.Outcome, failure string) archive.Run {
		return archive.Run{Operator: u.calendar, Handler: "report", Action: "exec", Trigger: v1alpha1.OnSchedule, APIVersion: "opkit.dev/v1alpha1", Kind: "Operator",
			Name: u.calendar, Key: fmt.Sprintf("%s/schedule/report/%d", u.calendar, slot.Unix()), Attempt: 1, StartedAt: slot.Add(time.Second), Outcome: outcome, Error: failure}
	}
	u.slotFailed = record(t, f.store, slotRun(u.slot.Add(-time.Hour), archive.GaveUp, "exit status 2: the report server said 503"))
	u.slotOK = record(t, f.store, slotRun(u.slot, archive.Succeeded, ""))
	putState(t, f.store, archive.HandlerRecord{Operator: u.calendar, Key: "schedule/report", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator", Name: u.calendar},
		map[string]any{"slot": u.slot.Format(time.RFC3339)})

	clustertest.Eventually(t, 30*time.Second, "the console lists the watch operator and the calendar", func(context.Context) (bool, error) {
		page := get(t, f.url+"/")
		return strings.Contains(page, `href="/operators/`+u.watch+`"`) && strings.Contains(page, `href="/operators/`+u.calendar+`"`), nil
	})
	return u
}

func (u *unowned) webURL() string {
	return "/operators/" + u.watch + "/objects/" + u.env.Namespace + "/web"
}

func TestWatchOperatorsPagesShowTheirObjectsFromTheArchiveAndOfferNoActions(t *testing.T) {
	f := start(t)
	u := withUnowned(t, f)
	ns := u.env.Namespace

	overview := get(t, f.url+"/")
	mustContain(t, "the overview", overview, "watches Deployment", "Operator-wide schedules", "1 schedule: report")

	// The operator page: what it watches, and its objects from their state
	// records, each linking its timeline.
	op := get(t, f.url+"/operators/"+u.watch)
	mustContain(t, "the watch operator's page", op,
		"Watches Deployment objects (deployments.apps, version v1) in namespace "+ns+", labelled <code>team=a</code>",
		`href="`+u.webURL()+`"`, `href="/operators/`+u.watch+`/objects/`+ns+`/old"`, "(deleted)",
		"Stalled", "handler announce gave up after 2 attempts: exit status 1: no route to the registry",
		"Retrying", `href="/runs/`+u.webFailed+`"`, "Recent runs", `href="/runs/`+u.oldID+`"`, "opkit never writes to an object it watches")
	stalled := get(t, f.url+"/operators/"+u.watch+"?state=Stalled")
	mustContain(t, "the Stalled objects", stalled, ">web</a>")
	if strings.Contains(stalled, ">old</a>") {
		t.Error("the Stalled filter shows an object whose handler is only retrying")
	}

	// The timeline of a watched Deployment: its runs, its handler state
	// from the archive, the live object; no action, and why.
	timeline := get(t, f.url+u.webURL())
	mustContain(t, "the watched object's timeline", timeline,
		`href="/runs/`+u.webOK+`"`, `href="/runs/`+u.webFailed+`"`, "Gave up", "Handler records", "announce",
		"kept in the run archive", "kind: Deployment", "registry.example.com/web:1", "opkit never writes to an object it watches")
	for _, button := range []string{"Retry now", "Pause handlers"} {
		if strings.Contains(timeline, button) {
			t.Errorf("the watched object's timeline offers %q", button)
		}
	}
	gone := get(t, f.url+"/operators/"+u.watch+"/objects/"+ns+"/old")
	mustContain(t, "a deleted watched object's timeline", gone, "Deployment "+ns+"/old does not exist (any more)",
		`href="/runs/`+u.oldID+`"`, "As opkit last saw it", "Retrying")

	// A run links its object's timeline, not a custom resource's.
	run := get(t, f.url+"/runs/"+u.webFailed)
	mustContain(t, "the watched object's run", run, `href="`+u.webURL()+`"`, "Deployment "+ns+"/web", "no route to the registry",
		"opkit never writes to an object it watches")
	if strings.Contains(run, "Retry now") {
		t.Error("a watched object's run offers Retry")
	}

	// An action on it is refused, and writes nothing, even with a valid
	// CSRF token (the watched timeline has no form: it is a Chore's).
	_, cenv := withChore(t, "helper", "x")
	token := csrfField.FindStringSubmatch(get(t, f.url+"/operators/chores/objects/"+cenv.Namespace+"/helper"))
	if token == nil {
		t.Fatal("no CSRF token on a Chore's timeline")
	}
	if csrfField.MatchString(timeline) {
		t.Error("the watched object's timeline has an action's form")
	}
	for _, action := range []string{"retry", "pause"} {
		r := do(t, http.MethodPost, f.url+u.webURL()+"/"+action, url.Values{"csrf": {token[1]}})
		if r.status != http.StatusConflict {
			t.Errorf("%s on a watched object: %d, want 409\n%s", action, r.status, r.body)
		}
	}
	web := &appsv1.Deployment{}
	if err := u.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, web); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{v1alpha1.RetryAnnotation, v1alpha1.PauseAnnotation} {
		if _, ok := web.Annotations[a]; ok {
			t.Errorf("a refused action set %s on the watched Deployment", a)
		}
	}

	// The inbox lists the watched Deployment's failure, linking its
	// timeline, and the schedule's, linking the calendar's page.
	inbox := get(t, f.url+"/failures")
	mustContain(t, "the failures inbox", inbox,
		"<code class=\"error\">exit status 1: no route to the registry</code>", `<a href="`+u.webURL()+`">`+ns+`/web</a> <span class="dim">Deployment</span>`,
		`href="/runs/`+u.webFailed+`"`,
		"<code class=\"error\">exit status 2: the report server said 503</code>", `<a href="/operators/`+u.calendar+`#schedule-report">report</a>`,
		`href="/runs/`+u.slotFailed+`"`)
}

func TestCalendarsPageShowsEachScheduleWithItsSlotsAndRuns(t *testing.T) {
	f := start(t)
	u := withUnowned(t, f)

	page := get(t, f.url+"/operators/"+u.calendar)
	// The next slot is the hour after now (which may have just begun).
	next := u.slot.Add(time.Hour)
	if !strings.Contains(page, next.Format(time.RFC3339)) {
		next = next.Add(time.Hour)
	}
	mustContain(t, "the calendar's page", page,
		`<section id="schedule-report"`, "Schedule report", "Every", "1h", "Catch-up", "Once",
		"Last slot handled", u.slot.Format(time.RFC3339), "Next slot", `<time datetime="`+next.Format(time.RFC3339)+`">`,
		`href="/runs/`+u.slotOK+`"`, `href="/runs/`+u.slotFailed+`"`, "Gave up", "the report server said 503",
		"An operator-wide schedule has no object to retry or pause",
		`href="/operators/`+u.calendar+`/objects/_/`+u.calendar+`"`)

	// A schedule's run names its slot and links the schedule.
	run := get(t, f.url+"/runs/"+u.slotFailed)
	mustContain(t, "a schedule's run", run, `href="/operators/`+u.calendar+`#schedule-report"`, "schedule report",
		u.slot.Add(-time.Hour).Format(time.RFC3339), "An operator-wide schedule has no object to retry or pause")
	if strings.Contains(run, "Retry now") {
		t.Error("a schedule's run offers Retry")
	}

	// The Operator's own timeline: every run of its schedules, and the
	// Operator as the cluster has it.
	operator := get(t, f.url+"/operators/"+u.calendar+"/objects/_/"+u.calendar)
	mustContain(t, "the Operator's timeline", operator, `href="/runs/`+u.slotOK+`"`, `href="/runs/`+u.slotFailed+`"`, "kind: Operator")
	if strings.Contains(operator, "Pause handlers") {
		t.Error("the calendar's timeline offers Pause")
	}

	// Paused as a whole (opkit pause --operator OP --all), its page says
	// by whom and why.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.PauseAnnotation: v1alpha1.Pause{By: "jane", Reason: "the report server moves", At: "2025-01-02T08:00:00Z"}.Value()}}})
	if err := u.env.Client.Patch(t.Context(), &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: u.calendar}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "the paused calendar's page", get(t, f.url+"/operators/"+u.calendar),
		"Paused as a whole by jane at 2025-01-02T08:00:00Z: the report server moves", "opkit resume --operator "+u.calendar+" --all")
}

func TestOperatorsRunFromFilesAreShownFromTheEnginesDefinitions(t *testing.T) {
	f := start(t)
	env := clustertest.New(t)
	suffix := env.Namespace[len(env.Namespace)-6:]
	name := "files-" + suffix
	src, err := definition.Load("watch.yaml", fmt.Appendf(nil, watchOperator, name, env.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	base := serveWith(t, console.Options{Archive: f.store, Config: f.cfg, Definitions: func() []*definition.Definition { return []*definition.Definition{d} }})
	mustContain(t, "the overview", get(t, base+"/"), `href="/operators/`+name+`"`, "watches Deployment")
	mustContain(t, "its page", get(t, base+"/operators/"+name), "Watches Deployment objects", "labelled <code>team=a</code>", "It is run from <code>watch.yaml</code>")

	// A console without the engine knows it from the archive alone.
	putState(t, f.store, archive.HandlerRecord{Operator: name, Key: "uid-x-" + suffix, APIVersion: "apps/v1", Kind: "Deployment", Namespace: env.Namespace, Name: "x"},
		map[string]any{"state": map[string]any{}})
	mustContain(t, "its page from the archive", get(t, f.url+"/operators/"+name), "as the run archive's records show", ">x</a>")
}

func TestKubernetesAuthChecksTheWatchedKindAndTheOperator(t *testing.T) {
	f := start(t)
	u := withUnowned(t, f)
	ns := u.env.Namespace
	base := serve(t, f, console.Auth{Kubernetes: true})

	// A viewer may get Deployments in the watched namespace; a stranger
	// may get nothing.
	viewer := serviceAccount(t, u.env, "viewer", []string{"apps"}, []string{"deployments"})
	stranger := serviceAccount(t, u.env, "stranger", []string{"console.example.com"}, []string{"chores"})

	mustContain(t, "the viewer's timeline", get(t, base+u.webURL(), "Authorization", viewer), `href="/runs/`+u.webFailed+`"`)
	mustContain(t, "the viewer's run", get(t, base+"/runs/"+u.webFailed, "Authorization", viewer), "no route to the registry")
	mustContain(t, "the viewer's operator page", get(t, base+"/operators/"+u.watch, "Authorization", viewer), `href="`+u.webURL()+`"`)
	overview := get(t, base+"/", "Authorization", viewer)
	mustContain(t, "the viewer's overview", overview, `href="/operators/`+u.watch+`"`)
	if strings.Contains(overview, `href="/operators/`+u.calendar+`"`) {
		t.Error("the overview shows a calendar whose Operator the viewer may not get")
	}
	// A run of an object the operator watched under an earlier spec, in a
	// namespace beyond the viewer, is not listed to it.
	beyond := record(t, f.store, archive.Run{Operator: u.watch, Handler: "announce", Action: "exec", Trigger: "update", APIVersion: "apps/v1", Kind: "Deployment",
		Namespace: "kube-system", Name: "elsewhere", UID: "uid-elsewhere-" + ns, Generation: 1, Key: "uid-elsewhere-" + ns + "/1/announce", Attempt: 1,
		StartedAt: time.Now(), Outcome: archive.Failed, Error: "exit status 1: elsewhere"})
	if page := get(t, base+"/operators/"+u.watch, "Authorization", viewer); strings.Contains(page, beyond) {
		t.Error("the viewer's operator page lists a run in a namespace beyond it")
	}
	if page := get(t, f.url+"/operators/"+u.watch); !strings.Contains(page, beyond) {
		t.Error("without auth, the operator page does not list the run in kube-system")
	}
	inbox := get(t, base+"/failures", "Authorization", viewer)
	mustContain(t, "the viewer's inbox", inbox, `href="/runs/`+u.webFailed+`"`)
	if strings.Contains(inbox, beyond) {
		t.Error("the viewer's inbox lists a run in a namespace beyond it")
	}
	if strings.Contains(inbox, `href="/runs/`+u.slotFailed+`"`) {
		t.Error("the inbox shows the viewer a schedule's run of an Operator it may not get")
	}

	for what, r := range map[string]response{
		"the stranger's timeline":        do(t, http.MethodGet, base+u.webURL(), nil, "Authorization", stranger),
		"the stranger's run":             do(t, http.MethodGet, base+"/runs/"+u.webFailed, nil, "Authorization", stranger),
		"the stranger's log":             do(t, http.MethodGet, base+"/runs/"+u.webFailed+"/log", nil, "Authorization", stranger),
		"the stranger's operator page":   do(t, http.MethodGet, base+"/operators/"+u.watch, nil, "Authorization", stranger),
		"another namespace's Deployment": do(t, http.MethodGet, base+"/operators/"+u.watch+"/objects/kube-system/web", nil, "Authorization", viewer),
		"the viewer's calendar":          do(t, http.MethodGet, base+"/operators/"+u.calendar, nil, "Authorization", viewer),
		"the viewer's schedule run":      do(t, http.MethodGet, base+"/runs/"+u.slotFailed, nil, "Authorization", viewer),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", what, r.status)
		}
	}
	r := do(t, http.MethodGet, base+u.webURL(), nil, "Authorization", stranger)
	mustContain(t, "the refusal", r.body, "may not get deployments.apps in namespace "+ns)
	r = do(t, http.MethodGet, base+"/operators/"+u.calendar, nil, "Authorization", viewer)
	mustContain(t, "the refusal", r.body, "may not get operators.opkit.dev "+u.calendar)
}

func TestWatchAndCalendarPagesAreAccessible(t *testing.T) {
	f := start(t)
	u := withUnowned(t, f)
	for _, path := range []string{
		"/",
		"/operators/" + u.watch,
		u.webURL(),
		"/operators/" + u.watch + "/objects/" + u.env.Namespace + "/old",
		"/runs/" + u.webFailed,
		"/operators/" + u.calendar,
		"/operators/" + u.calendar + "/objects/_/" + u.calendar,
		"/runs/" + u.slotFailed,
		"/failures",
	} {
		assertAccessible(t, f.url, path)
	}
}
