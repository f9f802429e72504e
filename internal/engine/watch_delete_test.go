package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// oneHandler is an operator's one handler that runs on delete beside
// other triggers, as users write it.
type oneHandler struct {
	name   string // the case's, also the handler's name
	on     string // its triggers, a YAML flow sequence
	fields string // its fields, a YAML flow sequence; "" for none
	update bool   // it runs on update: the test makes one
	// finalizer: a watch's objects carry opkit's finalizer
	// (spec.watch.finalizer), so the handler runs before they go.
	finalizer bool
}

// handlerYAML is h under spec.handlers, its runs recorded to out.
func (h oneHandler) handlerYAML(t *testing.T, out string) string {
	def := fmt.Sprintf("  - name: %s\n    on: %s\n", h.name, h.on)
	if h.fields != "" {
		def += fmt.Sprintf("    fields: %s\n", h.fields)
	}
	return def + "    " + recorderExec(t, out) + "\n"
}

// configMapWatch is a watch operator of the ConfigMaps of namespace
// labelled watched=<h.name>, with h as its one handler.
func configMapWatch(t *testing.T, op, namespace, out string, h oneHandler) string {
	return fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  watch:
    apiVersion: v1
    kind: ConfigMap
    namespaces: [%s]
    selector: {matchLabels: {watched: %s}}
    finalizer: %v
  handlers:
%s`, op, namespace, h.name, h.finalizer, h.handlerYAML(t, out))
}

// objectRuns lists an operator's runs of one object, oldest first, once
// the engine is done with it: none runs, and the archive no longer keeps
// its record (for a watched object; a custom resource has none).
func objectRuns(t *testing.T, store *archive.SQLite, op, name, what string) []archive.Run {
	t.Helper()
	var runs []archive.Run
	eventually(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
		states, err := store.HandlerRecords(ctx, op)
		if err != nil || slices.ContainsFunc(states, func(s archive.HandlerRecord) bool { return s.Name == name }) {
			return false, err
		}
		runs, err = archive.ListAll(ctx, store, archive.Query{Operator: op, Name: name})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Outcome == archive.Running }), nil
	})
	slices.Reverse(runs)
	return runs
}

// waitSucceeded waits until an operator's runs of one object are n
// runs recorded Succeeded, none running: an engine stopped then stops
// none of them.
func waitSucceeded(t *testing.T, store *archive.SQLite, op, name string, n int, what string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
		runs, err := archive.ListAll(ctx, store, archive.Query{Operator: op, Name: name})
		return err == nil && len(runs) == n && !slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Outcome != archive.Succeeded }), err
	})
}

// checkOneDeleteRun checks that runs, an object's, hold exactly one
// delete run, of handler, that succeeded, after the others: its key names
// the object's life (the others' <uid>[.<since>]) and its own generation,
// newer than theirs, so that no run of another trigger shares it. want
// are the other runs' triggers, in order.
func checkOneDeleteRun(t *testing.T, runs []archive.Run, handler string, want ...string) {
	t.Helper()
	var got []string
	for _, r := range runs {
		got = append(got, r.Handler+"/"+r.Trigger+"/"+string(r.Outcome))
	}
	var wantRuns []string
	for _, trigger := range want {
		wantRuns = append(wantRuns, handler+"/"+trigger+"/"+string(archive.Succeeded))
	}
	wantRuns = append(wantRuns, handler+"/delete/"+string(archive.Succeeded))
	if !slices.Equal(got, wantRuns) {
		t.Errorf("runs %v; want %v: the delete run once, after the others", got, wantRuns)
		return
	}
	del, before := runs[len(runs)-1], runs[:len(runs)-1]
	life, _, _ := strings.Cut(before[0].Key, "/")
	if wantKey := fmt.Sprintf("%s/%d/%s", life, del.Generation, handler); del.Key != wantKey {
		t.Errorf("the delete run's key %q; want %q", del.Key, wantKey)
	}
	for _, r := range before {
		if r.Generation >= del.Generation || r.Key == del.Key {
			t.Errorf("the %s run's generation %d and key %q; want an older generation than the delete run's %d (key %q)", r.Trigger, r.Generation, r.Key, del.Generation, del.Key)
		}
	}
}

// TestAWatchedHandlerOnDeleteAndOtherTriggersRunsOnceOnDeletion watches
// labelled ConfigMaps, each operator with one handler that runs on delete
// beside create, update or both (and one with finalizer: true): a
// ConfigMap deleted while the engine runs, and one deleted while no
// engine ran (a second engine starts on the same archive), each get their
// delete run once, with a key of its own, after their create and update
// runs.
func TestAWatchedHandlerOnDeleteAndOtherTriggersRunsOnceOnDeletion(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	id := env.Namespace[len(env.Namespace)-6:]
	cases := []oneHandler{
		{name: "create-delete", on: "[create, delete]"},
		{name: "all-three", on: "[create, update, delete]", fields: "[data]", update: true},
		{name: "update-delete", on: "[update, delete]", update: true},
		{name: "finalizer", on: "[create, update, delete]", update: true, finalizer: true},
	}
	op := func(h oneHandler) string { return h.name + "-" + id }
	apply := func(e *engine.Engine) {
		t.Helper()
		for _, h := range cases {
			if err := e.Apply(ctx, compileYAML(t, configMapWatch(t, op(h), env.Namespace, out, h))); err != nil {
				t.Fatal(err)
			}
		}
	}
	configMap := func(h oneHandler, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name + "-" + h.name, Labels: map[string]string{"watched": h.name}},
			Data:       map[string]string{"k": "1"},
		}
	}
	// want are the runs before the delete run, for h.
	want := func(h oneHandler) []string {
		var w []string
		if strings.Contains(h.on, "create") {
			w = append(w, "create")
		}
		if h.update {
			w = append(w, "update")
		}
		return w
	}
	e, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	apply(e)
	for _, h := range cases {
		for _, name := range []string{"live", "down"} {
			cm := configMap(h, name)
			create(t, env, cm)
			if strings.Contains(h.on, "create") {
				waitSucceeded(t, store, op(h), cm.Name, 1, "the create run of "+cm.Name)
			}
			// Seen by the engine: its change is an update, not the first sight.
			eventually(t, 30*time.Second, "the archive's record of "+cm.Name, func(ctx context.Context) (bool, error) {
				states, err := store.HandlerRecords(ctx, op(h))
				return slices.ContainsFunc(states, func(s archive.HandlerRecord) bool { return s.Name == cm.Name }), err
			})
			if h.update {
				// A patch: opkit's finalizer may have changed the object.
				if err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"2"}}`))); err != nil {
					t.Fatal(err)
				}
				waitSucceeded(t, store, op(h), cm.Name, len(want(h)), "the update run of "+cm.Name)
			}
		}
	}

	// Deleted while the engine runs.
	for _, h := range cases {
		if err := env.Client.Delete(ctx, configMap(h, "live")); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range cases {
		t.Run(h.name+"/engine running", func(t *testing.T) {
			name := configMap(h, "live").Name
			checkOneDeleteRun(t, objectRuns(t, store, op(h), name, "the engine done with "+name), h.name, want(h)...)
		})
	}

	// Deleted while no engine ran.
	stop()
	for _, h := range cases {
		if err := env.Client.Delete(ctx, configMap(h, "down")); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	apply(again)
	for _, h := range cases {
		t.Run(h.name+"/engine down", func(t *testing.T) {
			name := configMap(h, "down").Name
			checkOneDeleteRun(t, objectRuns(t, store, op(h), name, "the new engine done with "+name), h.name, want(h)...)
		})
	}
}

// TestACustomResourcesHandlerOnDeleteAndOtherTriggersRunsOnceOnDeletion
// is the same for a custom resource: one handler on create and delete,
// one on update and delete; a Note deleted while the engine runs, and one
// deleted while no engine ran (held by opkit's finalizer until a second
// engine starts), each get each handler's delete run once, with a key of
// its own.
func TestACustomResourcesHandlerOnDeleteAndOtherTriggersRunsOnceOnDeletion(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	const op = "deletes"
	handlers := []oneHandler{
		{name: "create-delete", on: "[create, delete]"},
		{name: "update-delete", on: "[update, delete]", update: true},
	}
	def := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: ` + op + `}
spec:
  resource:
    group: deletes.example.com
    kind: Note
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  handlers:
`
	for _, h := range handlers {
		def += h.handlerYAML(t, out)
	}
	file := filepath.Join(t.TempDir(), "deletes.yaml")
	writeFile(t, file, def)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpAll(t, env, "deletes.example.com/v1", "Note")
	note := func(name string) *unstructured.Unstructured {
		obj := task(env.Namespace, name, "", "a")
		obj.SetAPIVersion("deletes.example.com/v1")
		obj.SetKind("Note")
		return obj
	}
	for _, name := range []string{"live", "down"} {
		n := note(name)
		create(t, env, n)
		waitSucceeded(t, store, op, name, 1, "the create run of "+name)
		setSpec(t, env, n, "text", "b")
		waitSucceeded(t, store, op, name, 2, "the update run of "+name)
	}
	check := func(name string) {
		t.Helper()
		runs := objectRuns(t, store, op, name, "the runs of "+name+" done")
		for _, h := range handlers {
			t.Run(name+"/"+h.name, func(t *testing.T) {
				var of []archive.Run
				for _, r := range runs {
					if r.Handler == h.name {
						of = append(of, r)
					}
				}
				want := []string{"create"}
				if h.update {
					want = []string{"update"}
				}
				checkOneDeleteRun(t, of, h.name, want...)
			})
		}
	}

	// Deleted while the engine runs.
	if err := env.Client.Delete(ctx, note("live")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, note("live"), 60*time.Second, "the Note deleted while the engine runs gone")
	check("live")

	// Deleted while no engine ran: the finalizer holds it.
	stop()
	if err := env.Client.Delete(ctx, note("down")); err != nil {
		t.Fatal(err)
	}
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpAll(t, env, "deletes.example.com/v1", "Note")
	waitGone(t, env, note("down"), 60*time.Second, "the Note deleted while no engine ran gone")
	check("down")
}

// TestAWatchedObjectWhosePauseEndedOrWhichWentPausedGetsItsDeleteRun
// pauses two watched ConfigMaps while the engine runs; while no engine
// runs, one is resumed, then deleted, and the other deleted still paused.
// The next engine runs each one's delete handler once: a pause held by a
// gone object ends with it (nothing is left to resume it), and each
// object's pause and resume are recorded once, across the restart.
func TestAWatchedObjectWhosePauseEndedOrWhichWentPausedGetsItsDeleteRun(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := newArchive(t)
	h := oneHandler{name: "paused", on: "[create, delete]"}
	op := "paused-" + env.Namespace[len(env.Namespace)-6:]
	start := func() func() {
		e, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
		if err := e.Apply(ctx, compileYAML(t, configMapWatch(t, op, env.Namespace, out, h))); err != nil {
			t.Fatal(err)
		}
		return stop
	}
	pauseRecords := func(name, trigger string) []archive.Run {
		t.Helper()
		runs, err := archive.ListAll(ctx, store, archive.Query{Operator: op, Name: name, Handler: v1alpha1.PauseHandler, Trigger: trigger})
		if err != nil {
			t.Fatal(err)
		}
		return runs
	}
	stop := start()
	names := []string{"resumed", "gone-paused"}
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name, Labels: map[string]string{"watched": h.name}}}
		create(t, env, cm)
		waitSucceeded(t, store, op, name, 1, "the create run of "+name)
		pause := v1alpha1.Pause{By: "jane", Reason: "the registry is down"}.Value()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.PauseAnnotation: pause}}})
		if err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, name+"'s pause recorded", func(context.Context) (bool, error) {
			return len(pauseRecords(name, v1alpha1.TriggerPaused)) == 1, nil
		})
	}
	stop()
	// While no engine runs: one resumed, then both deleted.
	resume, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.PauseAnnotation: nil, v1alpha1.ResumedAnnotation: v1alpha1.Pause{By: "joe"}.Value()}}})
	if err := env.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "resumed"}}, client.RawPatch(types.MergePatchType, resume)); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	start()
	for _, name := range names {
		runs := objectRuns(t, store, op, name, "the new engine done with "+name)
		var got []string
		for _, r := range runs {
			if r.Handler != v1alpha1.PauseHandler {
				got = append(got, r.Trigger+"/"+string(r.Outcome))
			}
		}
		if want := []string{"create/Succeeded", "delete/Succeeded"}; !slices.Equal(got, want) {
			t.Errorf("%s's handler runs %v; want %v: its delete run once, after the restart", name, got, want)
		}
		if n := len(pauseRecords(name, v1alpha1.TriggerPaused)); n != 1 {
			t.Errorf("%s's pause recorded %d times; want once, across the restart", name, n)
		}
		resumed := pauseRecords(name, v1alpha1.TriggerResumed)
		if len(resumed) != 1 || resumed[0].Actor != "opkit" {
			t.Errorf("%s's resume records %+v; want one, by opkit (the object went with its pause)", name, resumed)
		}
	}
}
