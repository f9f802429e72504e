package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/finalizer"
)

// teamWatch is a watch operator on the Deployments labelled team=a in two
// namespaces, its handlers recording their runs to OUT.
func teamWatch(t *testing.T, out string, namespaces ...string) string {
	exec := recorderExec(t, out)
	return fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: team-a-%s}
spec:
  watch:
    apiVersion: apps/v1
    kind: Deployment
    namespaces: [%s]
    selector: {matchLabels: {team: a}}
  handlers:
  - name: created
    on: [create]
    %s
  - name: image
    on: [update]
    fields: [spec.template.spec.containers]
    %s
  - name: gone
    on: [delete]
    %s
`, namespaces[0], strings.Join(namespaces, ", "), exec, exec, exec)
}

func labelled(d *appsv1.Deployment, team string) *appsv1.Deployment {
	d.Labels = map[string]string{"team": team}
	return d
}

// triggers lists the runs recorded for an object as handler/trigger.
func triggers(recs []record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Handler+"/"+r.Trigger)
	}
	return out
}

// TestAWatchRunsItsHandlersForTheSelectedDeploymentsOnlyAndWritesNone
// watches the Deployments labelled team=a in two namespaces: creating,
// changing the image of and deleting one each run the right handler once,
// scaling runs none, Deployments without the label or in a third
// namespace run nothing, and opkit writes to no Deployment. Stopped, then
// started again on the same archive, the engine runs nothing again for
// what it handled, and handles once what changed while it was stopped.
func TestAWatchRunsItsHandlersForTheSelectedDeploymentsOnlyAndWritesNone(t *testing.T) {
	// An engine of every namespace, for a watch of two: not in parallel.
	a, b, c := clustertest.New(t), clustertest.New(t), clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	e, stop := runEngineWith(t, engine.Options{Config: a.Config, Archive: store})
	if err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace, b.Namespace))); err != nil {
		t.Fatal(err)
	}
	// Names unique to the test: the handler's records are by name.
	id := a.Namespace[len(a.Namespace)-6:]
	web, api, other, elsewhere := "web-"+id, "api-"+id, "other-"+id, "elsewhere-"+id
	create(t, a, labelled(deployment(a.Namespace, web, "nginx:1"), "a"))
	create(t, b, labelled(deployment(b.Namespace, api, "nginx:1"), "a"))
	create(t, a, labelled(deployment(a.Namespace, other, "nginx:1"), "b"))
	create(t, c, labelled(deployment(c.Namespace, elsewhere, "nginx:1"), "a"))
	waitRecords(t, out, web, 1, "the create run of "+web)
	waitRecords(t, out, api, 1, "the create run of "+api)

	updateDeployment(t, a, web, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	recs := waitRecords(t, out, web, 2, "the image handler's run for the new image")
	if r := recs[1]; r.Handler != "image" || r.Trigger != "update" || !slices.Contains(r.Diff, "change spec.template.spec.containers") {
		t.Errorf("run %+v; want the image handler, on update, with the image's change in its diff", r)
	}
	updateDeployment(t, a, web, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(2)) })
	if err := b.Client.Delete(ctx, deployment(b.Namespace, api, "")); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, out, api, 2, "the delete run of "+api)
	time.Sleep(2 * time.Second) // what scaling might wrongly run
	if got := triggers(records(t, out, web)); !slices.Equal(got, []string{"created/create", "image/update"}) {
		t.Errorf("runs of %s: %v; want created/create, image/update (scaling runs nothing)", web, got)
	}
	if got := triggers(records(t, out, api)); !slices.Equal(got, []string{"created/create", "gone/delete"}) {
		t.Errorf("runs of %s: %v; want created/create, gone/delete", api, got)
	}
	for _, name := range []string{other, elsewhere} {
		if got := records(t, out, name); len(got) > 0 {
			t.Errorf("%s is not watched, yet ran %v", name, triggers(got))
		}
	}

	// Stopped: a new image and a deletion happen meanwhile.
	stop()
	updateDeployment(t, a, web, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:3" })
	if err := a.Client.Delete(ctx, deployment(a.Namespace, web, "")); err != nil {
		t.Fatal(err)
	}
	restarted, _ := runEngineWith(t, engine.Options{Config: a.Config, Archive: store})
	if err := restarted.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace, b.Namespace))); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, out, web, 3, "the delete run of "+web+", deleted while no engine ran")
	time.Sleep(2 * time.Second)
	got := triggers(records(t, out, web))
	if !slices.Equal(got, []string{"created/create", "image/update", "gone/delete"}) {
		t.Errorf("runs of %s after the restart: %v; want created/create, image/update, then gone/delete once", web, got)
	}
	if got := triggers(records(t, out, api)); len(got) != 2 {
		t.Errorf("runs of %s after the restart: %v; want its two runs, none again", api, got)
	}
	states, err := store.HandlerRecords(ctx, "team-a-"+a.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 0 {
		t.Errorf("the archive keeps %d records of deleted Deployments; want none: %+v", len(states), states)
	}

	// opkit wrote to no Deployment.
	for _, env := range []*clustertest.Env{a, b, c} {
		var list appsv1.DeploymentList
		if err := env.Client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, d := range list.Items {
			for _, mf := range d.ManagedFields {
				if mf.Manager == engine.FieldManager {
					t.Errorf("opkit wrote Deployment %s/%s: %+v", d.Namespace, d.Name, mf)
				}
			}
			if len(d.OwnerReferences) > 0 || len(d.Finalizers) > 0 || strings.Contains(fmt.Sprint(d.Annotations), "opkit") {
				t.Errorf("Deployment %s/%s carries opkit's marks: %v %v %v", d.Namespace, d.Name, d.OwnerReferences, d.Finalizers, d.Annotations)
			}
		}
	}
}

// TestAWatchLeavesAnObjectThatStopsMatchingWithoutADeleteRun removes the
// label of a watched Deployment: it is forgotten, its delete handler does
// not run, and labelled again it is new (create runs again).
func TestAWatchLeavesAnObjectThatStopsMatchingWithoutADeleteRun(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Namespace: a.Namespace, Archive: store})
	// Its handlers take 2 s: the label goes while the create run runs.
	def := strings.ReplaceAll(teamWatch(t, out, a.Namespace), `{name: EVENTS_ONLY, value: "1"}`, `{name: EVENTS_ONLY, value: "1"}, {name: SLEEP, value: 2s}`)
	if err := e.Apply(ctx, compileYAML(t, def)); err != nil {
		t.Fatal(err)
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, labelled(deployment(a.Namespace, name, "nginx:1"), "a"))
	waitRecords(t, out, name, 1, "the create run")
	relabel := func(team string) {
		t.Helper()
		updateDeployment(t, a, name, func(d *appsv1.Deployment) { d.Labels["team"] = team })
	}
	relabel("b")
	// The run that was in flight when the object stopped matching is
	// recorded still.
	eventually(t, 30*time.Second, "the create run recorded Succeeded", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Operator: "team-a-" + a.Namespace})
		return err == nil && len(page.Runs) == 1 && page.Runs[0].Outcome == archive.Succeeded, err
	})
	// Level-triggered: a label taken away and given back before the
	// engine looked is no change. Wait until it has forgotten the object.
	eventually(t, 30*time.Second, "the object forgotten", func(ctx context.Context) (bool, error) {
		states, err := store.HandlerRecords(ctx, "team-a-"+a.Namespace)
		return len(states) == 0, err
	})
	relabel("a")
	waitRecords(t, out, name, 2, "the create run when it matches again")
	time.Sleep(time.Second)
	if got := triggers(records(t, out, name)); !slices.Equal(got, []string{"created/create", "created/create"}) {
		t.Errorf("runs: %v; want created/create twice and no delete run", got)
	}
	eventually(t, 10*time.Second, "one record in the archive", func(ctx context.Context) (bool, error) {
		states, err := store.HandlerRecords(ctx, "team-a-"+a.Namespace)
		return len(states) == 1, err
	})
}

// TestAWatchTheEngineMayNotListIsRefusedNamingTheField runs the engine as
// a user who may read Deployments in one namespace only: a watch of two
// namespaces is refused at apply, naming spec.watch, the namespace and the
// rights to grant, while a watch of the allowed namespace runs on.
func TestAWatchTheEngineMayNotListIsRefusedNamingTheField(t *testing.T) {
	a, b := clustertest.New(t), clustertest.New(t)
	ctx := t.Context()
	user := "opkit-restricted-" + a.Namespace[len(a.Namespace)-6:]
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	create(t, a, role)
	t.Cleanup(func() { _ = a.Client.Delete(context.Background(), role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
	}
	create(t, a, binding)
	t.Cleanup(func() { _ = a.Client.Delete(context.Background(), binding) })
	create(t, a, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: "deployments"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}}},
	})
	create(t, a, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: "deployments"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployments"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
	})
	cfg := rest.CopyConfig(a.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	e, _ := runEngineWith(t, engine.Options{Config: cfg})
	out := filepath.Join(t.TempDir(), "records.jsonl")
	if err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace))); err != nil {
		t.Fatalf("a watch of the namespace the engine may read: %v", err)
	}
	err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, b.Namespace, a.Namespace)))
	if err == nil {
		t.Fatal("a watch of a namespace the engine may not read was applied")
	}
	for _, want := range []string{"spec.watch", "may not get deployments.apps in namespace " + b.Namespace, "grant it get, list and watch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, labelled(deployment(a.Namespace, name, "nginx:1"), "a"))
	waitRecords(t, out, name, 1, "the allowed watch's create run, after the refused one")
}

// TestARetryOfAStalledWatchedObjectRunsItAgainWithoutWritingIt makes a
// watched Deployment's handler give up, then asks for a retry as opkit
// retry does, naming who and why: the handler runs again, the retry is
// recorded once in the archive with who asked and why, and the
// annotation, the object owner's, stays where it is (opkit writes nothing
// to the Deployment); the same value asks for nothing more.
func TestARetryOfAStalledWatchedObjectRunsItAgainWithoutWritingIt(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	dir := t.TempDir()
	out, fixed := filepath.Join(dir, "records.jsonl"), filepath.Join(dir, "fixed")
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Namespace: a.Namespace, Archive: store})
	if err := e.Apply(ctx, compileYAML(t, fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: retry-%s}
spec:
  watch: {apiVersion: apps/v1, kind: Deployment, namespaces: [%s]}
  handlers:
  - name: created
    on: [create]
    retry: {maxAttempts: 1}
    %s
`, a.Namespace, a.Namespace, recorderExec(t, out, "FAIL_UNTIL="+fixed)))); err != nil {
		t.Fatal(err)
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, deployment(a.Namespace, name, "nginx:1"))
	waitRecords(t, out, name, 1, "the failing create run")
	time.Sleep(2 * time.Second) // it gave up: no retry comes by itself
	if n := len(records(t, out, name)); n != 1 {
		t.Fatalf("%d runs; want 1 (maxAttempts: 1)", n)
	}
	if err := os.WriteFile(fixed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	value := v1alpha1.RetryRequest{By: "bob", Reason: "the registry is back", At: time.Now().UTC().Format(time.RFC3339Nano)}.Value()
	askRetry(t, a, deployment(a.Namespace, name, ""), value)
	recs := waitRecords(t, out, name, 2, "the run asked for by the retry")
	if recs[1].Key != recs[0].Key || recs[1].Attempt != 1 {
		t.Errorf("runs %+v; want the retry with the same key, its attempts counted afresh", recs)
	}
	var recorded []archive.Run
	eventually(t, 60*time.Second, "the retry recorded in the archive and in an Event", func(ctx context.Context) (bool, error) {
		recorded = retryRecords(t, store, a.Namespace, name)
		return len(recorded) > 0 && hasEvent(ctx, a, name, "RetryRequested", "retry asked by bob: the registry is back"), nil
	})
	if r := recorded[0]; r.Actor != "bob" || r.Trigger != v1alpha1.TriggerRetry || r.Kind != "Deployment" {
		t.Errorf("the retry is recorded as %+v; want actor bob, trigger retry, of the Deployment", r)
	}
	if logs, err := logData(store.Logs(ctx, recorded[0].ID, 0)); err != nil || !strings.Contains(string(logs), "retry asked by bob: the registry is back") {
		t.Errorf("the retry's log %q (%v); want who asked and why", logs, err)
	}
	askRetry(t, a, deployment(a.Namespace, name, ""), value)
	time.Sleep(2 * time.Second)
	if n := len(records(t, out, name)); n != 2 {
		t.Errorf("%d runs; want 2: the same retry value asks for nothing more", n)
	}
	if n := len(retryRecords(t, store, a.Namespace, name)); n != 1 {
		t.Errorf("%d records of one retry, want 1", n)
	}
	dep := &appsv1.Deployment{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	if dep.Annotations[v1alpha1.RetryAnnotation] != value {
		t.Errorf("annotations %v; want the retry annotation left as set", dep.Annotations)
	}
	for _, mf := range dep.ManagedFields {
		if mf.Manager == engine.FieldManager {
			t.Errorf("opkit wrote the Deployment: %+v", mf)
		}
	}
}

// TestAWhenOverAWatchedObjectRunsOncePerTransitionToTrue scales a watched
// Deployment across a when condition: the handler runs once each time it
// becomes true, not while it stays true.
func TestAWhenOverAWatchedObjectRunsOncePerTransitionToTrue(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	e := startEngine(t, a)
	if err := e.Apply(ctx, compileYAML(t, fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: big-%s}
spec:
  watch: {apiVersion: apps/v1, kind: Deployment, namespaces: [%s]}
  handlers:
  - name: big
    on: [when]
    when: "self.spec.replicas > 2"
    %s
`, a.Namespace, a.Namespace, recorderExec(t, out)))); err != nil {
		t.Fatal(err)
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	dep := deployment(a.Namespace, name, "nginx:1")
	dep.Spec.Replicas = ptr.To(int32(0))
	create(t, a, dep)
	scale := func(n int32) {
		t.Helper()
		updateDeployment(t, a, name, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(n) })
		time.Sleep(1500 * time.Millisecond) // seen by the engine
	}
	scale(1)
	scale(3)
	waitRecords(t, out, name, 1, "the when run")
	scale(4)
	scale(1)
	scale(5)
	waitRecords(t, out, name, 2, "the second transition's run")
	time.Sleep(time.Second)
	recs := records(t, out, name)
	if len(recs) != 2 || recs[0].Trigger != "when" || !strings.HasSuffix(recs[0].Key, "/big/when/1") || !strings.HasSuffix(recs[1].Key, "/big/when/2") {
		t.Errorf("runs %+v; want two when runs, keys .../big/when/1 and /2", recs)
	}
}

// TestAWatchWithAFinalizerRunsTheDeleteHandlerBeforeTheObjectIsGone
// watches Deployments with finalizer: true: each gets opkit's finalizer
// (opkit's only write), the delete handler runs while the Deployment still
// exists, then the Deployment goes; one that stops matching has the
// finalizer removed and can be deleted with no engine's help.
func TestAWatchWithAFinalizerRunsTheDeleteHandlerBeforeTheObjectIsGone(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	dir := t.TempDir()
	out := filepath.Join(dir, "records.jsonl")
	op := "fin-" + a.Namespace[len(a.Namespace)-6:]
	e := startEngine(t, a)
	if err := e.Apply(ctx, compileYAML(t, fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  watch:
    apiVersion: apps/v1
    kind: Deployment
    namespaces: [%s]
    selector: {matchLabels: {team: a}}
    finalizer: true
  handlers:
  - name: gone
    on: [delete]
    %s
`, op, a.Namespace, recorderExec(t, out, "SLEEP=3s")))); err != nil {
		t.Fatal(err)
	}
	fin := finalizer.Name(op)
	web, api := "web-"+op, "api-"+op
	create(t, a, labelled(deployment(a.Namespace, web, "nginx:1"), "a"))
	create(t, a, labelled(deployment(a.Namespace, api, "nginx:1"), "a"))
	holds := func(name string) bool {
		dep := &appsv1.Deployment{}
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, dep); err != nil {
			return false
		}
		return slices.Contains(dep.Finalizers, fin)
	}
	for _, name := range []string{web, api} {
		eventually(t, 30*time.Second, name+" holds opkit's finalizer", func(context.Context) (bool, error) { return holds(name), nil })
	}
	if err := a.Client.Delete(ctx, deployment(a.Namespace, web, "")); err != nil {
		t.Fatal(err)
	}
	recs := waitRecords(t, out, web, 1, "the delete run")
	dep := &appsv1.Deployment{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: web}, dep); err != nil || dep.DeletionTimestamp == nil {
		t.Errorf("while its delete handler runs, the Deployment is %v (%v); want it still there, being deleted", dep.DeletionTimestamp, err)
	}
	waitGone(t, a, deployment(a.Namespace, web, ""), 30*time.Second, "the Deployment goes once its delete handler succeeded")
	if len(recs) != 1 || recs[0].Trigger != "delete" {
		t.Errorf("runs %+v; want one delete run", recs)
	}

	// No longer labelled: the finalizer goes, and nothing runs.
	updateDeployment(t, a, api, func(d *appsv1.Deployment) { d.Labels["team"] = "b" })
	eventually(t, 30*time.Second, api+" no longer holds opkit's finalizer", func(context.Context) (bool, error) { return !holds(api), nil })
	if got := records(t, out, api); len(got) > 0 {
		t.Errorf("%s ran %v when it stopped matching; want nothing", api, triggers(got))
	}
}

// TestAWatchOfAnotherKindForgetsTheOldKindsObjects changes a watch from
// Deployments to ConfigMaps: the Deployments it knew are forgotten, with
// no delete run, and the ConfigMaps are new to it.
func TestAWatchOfAnotherKindForgetsTheOldKindsObjects(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Namespace: a.Namespace, Archive: store})
	def := teamWatch(t, out, a.Namespace)
	if err := e.Apply(ctx, compileYAML(t, def)); err != nil {
		t.Fatal(err)
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, labelled(deployment(a.Namespace, name, "nginx:1"), "a"))
	waitRecords(t, out, name, 1, "the Deployment's create run")
	def = strings.Replace(strings.Replace(def, "apiVersion: apps/v1\n    kind: Deployment", "apiVersion: v1\n    kind: ConfigMap", 1), "fields: [spec.template.spec.containers]", "fields: [data]", 1)
	if err := e.Apply(ctx, compileYAML(t, def)); err != nil {
		t.Fatal(err)
	}
	create(t, a, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: "cm-" + name, Labels: map[string]string{"team": "a"}}})
	waitRecords(t, out, "cm-"+name, 1, "the ConfigMap's create run")
	time.Sleep(time.Second)
	if got := triggers(records(t, out, name)); !slices.Equal(got, []string{"created/create"}) {
		t.Errorf("runs of the Deployment: %v; want its create run alone (no delete run when the watch changed kind)", got)
	}
	states, err := store.HandlerRecords(ctx, "team-a-"+a.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Kind != "ConfigMap" {
			t.Errorf("the archive still keeps %s %s", s.Kind, s.Name)
		}
	}
}

// TestAWatchForgetsWhatItNoLongerWatchesOrNeverSawHere narrows a watch to
// one of its two namespaces: the objects of the other are forgotten, with
// no delete run. A record of another cluster's object, left in the
// archive, runs nothing either.
func TestAWatchForgetsWhatItNoLongerWatchesOrNeverSawHere(t *testing.T) {
	// An engine of every namespace, for a watch of two: not in parallel.
	a, b := clustertest.New(t), clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	op := "team-a-" + a.Namespace
	elsewhere := []byte(`{"state": {"observed": {"generation": 1, "hash": "x", "since": "1"}, "handlers": {"created": {"generation": 1}}}, "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "far", "namespace": "` + a.Namespace + `", "uid": "u-far"}}, "cluster": "another-cluster"}`)
	if err := store.PutHandlerRecord(ctx, &archive.HandlerRecord{Operator: op, Key: "u-far", APIVersion: "apps/v1", Kind: "Deployment", Namespace: a.Namespace, Name: "far", Data: elsewhere}); err != nil {
		t.Fatal(err)
	}
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Archive: store})
	if err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace, b.Namespace))); err != nil {
		t.Fatal(err)
	}
	id := a.Namespace[len(a.Namespace)-6:]
	create(t, a, labelled(deployment(a.Namespace, "web-"+id, "nginx:1"), "a"))
	create(t, b, labelled(deployment(b.Namespace, "api-"+id, "nginx:1"), "a"))
	waitRecords(t, out, "web-"+id, 1, "web's create run")
	waitRecords(t, out, "api-"+id, 1, "api's create run")
	if err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace))); err != nil {
		t.Fatal(err)
	}
	updateDeployment(t, a, "web-"+id, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	waitRecords(t, out, "web-"+id, 2, "web's update run, the watch narrowed")
	time.Sleep(time.Second)
	if got := triggers(records(t, out, "api-"+id)); !slices.Equal(got, []string{"created/create"}) {
		t.Errorf("runs of api, in the namespace no longer watched: %v; want its create run alone", got)
	}
	if got := records(t, out, "far"); len(got) > 0 {
		t.Errorf("another cluster's object ran %v", triggers(got))
	}
	states, err := store.HandlerRecords(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range states {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if want := []string{"far", "web-" + id}; !slices.Equal(names, want) {
		t.Errorf("the archive keeps %v; want %v (another cluster's record left as it was)", names, want)
	}
}

// TestAWatchOfAClusterScopedKindNeedsItsJobsNamespace refuses a watch of
// Namespaces whose job handler names no namespace, at apply.
func TestAWatchOfAClusterScopedKindNeedsItsJobsNamespace(t *testing.T) {
	a := clustertest.New(t)
	// An engine of every namespace: one of a namespace refuses any watch
	// of a cluster-scoped kind.
	e, _ := runEngineWith(t, engine.Options{Config: a.Config})
	err := e.Apply(t.Context(), compileYAML(t, `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: namespaces}
spec:
  watch: {apiVersion: v1, kind: Namespace}
  handlers:
  - name: welcome
    on: [create]
    job: {image: busybox}
`))
	if err == nil || !strings.Contains(err.Error(), "spec.handlers[0].job.namespace: required") || !strings.Contains(err.Error(), "Namespace is cluster-scoped") {
		t.Errorf("error %v; want spec.handlers[0].job.namespace required, the kind being cluster-scoped", err)
	}
}
