package cause

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// deploy is a watched Deployment, uid d-1, as the API server gives it:
// no generation of opkit's, status written by its controller.
type deploy struct {
	rv          string // resourceVersion
	image       string
	replicas    int64
	labels      map[string]any
	annotations map[string]any
	ready       int64 // status.readyReplicas
}

func (d deploy) object() *unstructured.Unstructured {
	md := map[string]any{"name": "web", "namespace": "team", "uid": "d-1", "resourceVersion": d.rv, "generation": int64(7)}
	if d.labels != nil {
		md["labels"] = d.labels
	}
	if d.annotations != nil {
		md["annotations"] = d.annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": md,
		"spec": map[string]any{
			"replicas": d.replicas,
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": d.image}}}},
		},
		"status": map[string]any{"readyReplicas": d.ready, "replicas": d.replicas},
	}}
}

// v1 is the Deployment first seen; the others change one thing of it.
var v1 = deploy{rv: "100", image: "nginx:1", replicas: 2, labels: map[string]any{"app": "web"}, annotations: map[string]any{"note": "a"}, ready: 1}

func (d deploy) with(f func(*deploy)) deploy {
	d.labels, d.annotations = maps.Clone(d.labels), maps.Clone(d.annotations)
	f(&d)
	return d
}

// watcher decides for a watched object as the engine does: its
// projection, its observed generation (its deletion counted) on a view of
// it, Decide with the projection as the subject; a run it decides
// succeeds.
type watcher struct {
	handlers []*definition.Handler
	st       *State
	at       time.Time // when it first sees the object
}

func newWatcher(hs ...*definition.Handler) *watcher {
	return &watcher{handlers: hs, st: state(0, nil, nil), at: now}
}

// life is the key prefix of the Deployment first seen at now.
var life = "d-1." + strconv.FormatInt(now.UnixMilli(), 10)

// decide returns the decision for obj and the generation it was seen at.
func (w *watcher) decide(obj *unstructured.Unstructured) (Decision, int64) {
	subject := Projection(obj.Object, w.handlers)
	g := Observe(w.st, subject, obj.GetDeletionTimestamp() != nil, w.at)
	view := obj.DeepCopy()
	view.SetGeneration(g)
	return apply(Input{Handlers: w.handlers, Object: view, State: w.st, Now: now, Subject: subject}), g
}

// settle decides for obj until nothing is due, each run succeeding, and
// returns the runs as "handler trigger key".
func (w *watcher) settle(obj *unstructured.Unstructured) []string {
	var runs []string
	for range 10 {
		d, g := w.decide(obj)
		if d.Cause == nil {
			if obj.GetDeletionTimestamp() == nil {
				w.st.AdvanceHandled(w.handlers, g, Projection(obj.Object, w.handlers))
			}
			return runs
		}
		runs = append(runs, d.Cause.Handler.Name+" "+d.Cause.Trigger+" "+d.Cause.Key)
		w.st.Succeeded(w.handlers, d.Cause, Projection(obj.Object, w.handlers), 0, now)
	}
	panic("a run is decided again and again")
}

func gone(obj *unstructured.Unstructured) *unstructured.Unstructured {
	t := metav1.NewTime(now)
	obj.SetDeletionTimestamp(&t)
	return obj
}

func TestProjection(t *testing.T) {
	cm := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata":   map[string]any{"name": "c", "uid": "c-1", "resourceVersion": "9", "labels": map[string]any{"app": "web"}, "annotations": map[string]any{"note": "a"}},
		"data":       map[string]any{"k": "v"},
		"binaryData": map[string]any{"b": "AAE="},
	}
	for _, tc := range []struct {
		name   string
		obj    map[string]any
		fields []string // of one update handler
		want   string   // the projection as JSON
	}{
		{"a Deployment: its spec and labels", v1.object().Object, nil,
			`{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1","name":"web"}]}}}}`},
		{"a ConfigMap: its data, whatever the top-level field", cm, nil,
			`{"binaryData":{"b":"AAE="},"data":{"k":"v"},"metadata":{"labels":{"app":"web"}}}`},
		{"no labels: no metadata", deploy{rv: "1", image: "x"}.object().Object, nil,
			`{"spec":{"replicas":0,"template":{"spec":{"containers":[{"image":"x","name":"web"}]}}}}`},
		{"a status field a handler names, that one alone", v1.object().Object, []string{"status.readyReplicas"},
			`{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1","name":"web"}]}}},"status":{"readyReplicas":1}}`},
		{"the whole status, named", v1.object().Object, []string{"status"},
			`{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1","name":"web"}]}}},"status":{"readyReplicas":1,"replicas":2}}`},
		{"annotations, named", v1.object().Object, []string{"metadata.annotations"},
			`{"metadata":{"annotations":{"note":"a"},"labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1","name":"web"}]}}}}`},
		{"one annotation named: the annotations", cm, []string{"metadata.annotations.note"},
			`{"binaryData":{"b":"AAE="},"data":{"k":"v"},"metadata":{"annotations":{"note":"a"},"labels":{"app":"web"}}}`},
		{"a named field the object lacks: nothing", cm, []string{"status.readyReplicas", "metadata.finalizers"},
			`{"binaryData":{"b":"AAE="},"data":{"k":"v"},"metadata":{"labels":{"app":"web"}}}`},
		{"spec fields named: the spec as always", v1.object().Object, []string{"spec.template"},
			`{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1","name":"web"}]}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := json.Marshal(tc.obj)
			hs := []*definition.Handler{withFields(handler("h", v1alpha1.OnUpdate), tc.fields...)}
			got, err := json.Marshal(Projection(tc.obj, hs))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("Projection =\n%s\nwant\n%s", got, tc.want)
			}
			if after, _ := json.Marshal(tc.obj); string(after) != string(before) {
				t.Errorf("Projection changed the object:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	hs := []*definition.Handler{handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate)}
	st := state(0, nil, nil)
	first := strconv.FormatInt(now.UnixMilli(), 10)
	for i, tc := range []struct {
		name    string
		obj     deploy
		deleted bool
		gen     int64
		since   string
	}{
		{"first sight: 1, since then", v1, false, 1, first},
		{"seen again: the same", v1, false, 1, first},
		{"status and annotations written: not a change", v1.with(func(d *deploy) { d.rv, d.ready, d.annotations["note"] = "101", 2, "b" }), false, 1, first},
		{"the spec changed: one more", v1.with(func(d *deploy) { d.rv, d.image = "102", "nginx:2" }), false, 2, first},
		{"a label changed: one more", v1.with(func(d *deploy) { d.rv, d.image, d.labels["tier"] = "103", "nginx:2", "front" }), false, 3, first},
		{"changed back: a change too", v1.with(func(d *deploy) { d.rv = "104" }), false, 4, first},
		{"deleted: one more, as the API server counts a custom resource's deletion", v1.with(func(d *deploy) { d.rv = "105" }), true, 5, first},
		{"seen deleted again: the same", v1.with(func(d *deploy) { d.rv = "105" }), true, 5, first},
		{"changed while deleted (behind a finalizer): one more", v1.with(func(d *deploy) { d.rv, d.image = "106", "nginx:3" }), true, 6, first},
		{"seen deleted again after that: the same", v1.with(func(d *deploy) { d.rv, d.image = "106", "nginx:3" }), true, 6, first},
	} {
		obj := tc.obj.object()
		g := Observe(st, Projection(obj.Object, hs), tc.deleted, now.Add(time.Duration(i)*time.Second))
		if g != tc.gen || st.Observed.Generation != tc.gen || st.Observed.Since != tc.since || st.Observed.Deleted != tc.deleted {
			t.Errorf("%s: generation %d, observed %+v; want %d since %s, deleted %v", tc.name, g, st.Observed, tc.gen, tc.since, tc.deleted)
		}
	}
	// First seen deleted: 1, and the deletion is not counted again.
	gone := state(0, nil, nil)
	if g := Observe(gone, Projection(v1.object().Object, hs), true, now); g != 1 || !gone.Observed.Deleted {
		t.Errorf("first seen deleted: generation %d, observed %+v; want 1, deleted", g, gone.Observed)
	}
	if g := Observe(gone, Projection(v1.object().Object, hs), true, now); g != 1 {
		t.Errorf("first seen deleted, seen again: generation %d; want 1", g)
	}
	// A number is the same whatever its Go type: the archive gives back
	// float64 what the API gave as int64.
	hash := st.Observed.Hash
	p := Projection(v1.with(func(d *deploy) { d.image = "nginx:3" }).object().Object, hs)
	p["spec"].(map[string]any)["replicas"] = float64(2)
	if Observe(st, p, true, now) != 6 || st.Observed.Hash != hash {
		t.Error("replicas 2.0 for 2 is a change")
	}
	// The hash of a record made by an engine that hashed a normalized
	// copy (a JSON round trip) is the same: an upgrade is no change.
	st2 := state(0, nil, nil)
	p2 := Projection(v1.object().Object, hs)
	Observe(st2, p2, false, now)
	old, _ := json.Marshal(normalize(p2))
	if sum := sha256.Sum256(old); st2.Observed.Hash != hex.EncodeToString(sum[:12]) {
		t.Errorf("hash %s; an engine before hashed %s", st2.Observed.Hash, hex.EncodeToString(sum[:12]))
	}
	// Beyond 2^53, as the cache holds it (int64) and as JSON gives it
	// back (float64, rounded): one hash, the one an engine before made.
	wide := map[string]any{"spec": map[string]any{"n": int64(1<<53 + 1), "list": []any{int64(-(1 << 60))}}}
	readBack := map[string]any{}
	if data, _ := json.Marshal(normalize(wide)); json.Unmarshal(data, &readBack) != nil {
		t.Fatal("normalize")
	}
	stWide, stBack := state(0, nil, nil), state(0, nil, nil)
	Observe(stWide, wide, false, now)
	Observe(stBack, readBack, false, now)
	old, _ = json.Marshal(normalize(wide))
	if sum := sha256.Sum256(old); stWide.Observed.Hash != hex.EncodeToString(sum[:12]) || stBack.Observed.Hash != stWide.Observed.Hash {
		t.Errorf("integers beyond 2^53: hash %s as int64, %s read back; an engine before hashed %s", stWide.Observed.Hash, stBack.Observed.Hash, hex.EncodeToString(sum[:12]))
	}
	// The record survives the archive's JSON.
	data, _ := json.Marshal(st)
	back := &State{}
	if err := json.Unmarshal(data, back); err != nil || back.Observed == nil || *back.Observed != *st.Observed {
		t.Errorf("read back %+v (%v); want %+v", back.Observed, err, st.Observed)
	}
}

func TestDecideForAWatchedObject(t *testing.T) {
	create := handler("created", v1alpha1.OnCreate)
	rolled := withFields(handler("rolled", v1alpha1.OnCreate, v1alpha1.OnUpdate), "spec.template")
	anyChange := handler("changed", v1alpha1.OnUpdate)
	ready := withFields(handler("ready", v1alpha1.OnUpdate), "status.readyReplicas")
	noted := withFields(handler("noted", v1alpha1.OnUpdate), "metadata.annotations")
	del := handler("cleanup", v1alpha1.OnDelete)
	newImage := v1.with(func(d *deploy) { d.rv, d.image = "101", "nginx:2" })
	scaled := v1.with(func(d *deploy) { d.rv, d.replicas = "101", 5 })
	readied := v1.with(func(d *deploy) { d.rv, d.ready = "101", 2 })
	annotated := v1.with(func(d *deploy) { d.rv, d.annotations["note"] = "101", "b" })
	relabelled := v1.with(func(d *deploy) { d.rv, d.labels["tier"] = "101", "front" })
	for _, tc := range []struct {
		name     string
		handlers []*definition.Handler
		before   []deploy // seen, and every run for them succeeded
		obj      *unstructured.Unstructured
		want     string   // "handler trigger key"; "" for no run
		diff     []string // the run's diff paths, exactly
		gen      int64    // the observed generation of obj
		passed   string   // a handler whose record is at gen without a run
	}{
		{
			name:     "create on first sight",
			handlers: []*definition.Handler{create},
			obj:      v1.object(),
			want:     "created create " + life + "/1/created", diff: []string{"metadata", "spec"}, gen: 1,
		},
		{
			name:     "an update of the fields named, with paths from the root",
			handlers: []*definition.Handler{rolled},
			before:   []deploy{v1}, obj: newImage.object(),
			want: "rolled update " + life + "/2/rolled", diff: []string{"spec.template.spec.containers"}, gen: 2,
		},
		{
			name:     "a change of other fields: no run, the handler passes it",
			handlers: []*definition.Handler{rolled},
			before:   []deploy{v1}, obj: scaled.object(),
			gen: 2, passed: "rolled",
		},
		{
			name:     "any change of the spec, for a handler without fields",
			handlers: []*definition.Handler{anyChange},
			before:   []deploy{v1}, obj: scaled.object(),
			want: "changed update " + life + "/2/changed", diff: []string{"spec.replicas"}, gen: 2,
		},
		{
			name:     "a label change is a change",
			handlers: []*definition.Handler{anyChange},
			before:   []deploy{v1}, obj: relabelled.object(),
			want: "changed update " + life + "/2/changed", diff: []string{"metadata.labels.tier"}, gen: 2,
		},
		{
			name:     "a status change is not, unless named",
			handlers: []*definition.Handler{rolled, anyChange, noted},
			before:   []deploy{v1}, obj: readied.object(),
			gen: 1,
		},
		{
			name:     "a status field named",
			handlers: []*definition.Handler{ready},
			before:   []deploy{v1}, obj: readied.object(),
			want: "ready update " + life + "/2/ready", diff: []string{"status.readyReplicas"}, gen: 2,
		},
		{
			name:     "an annotation change is not, unless named",
			handlers: []*definition.Handler{rolled, anyChange},
			before:   []deploy{v1}, obj: annotated.object(),
			gen: 1,
		},
		{
			name:     "another handler's status field is not a change for one without fields",
			handlers: []*definition.Handler{anyChange, ready},
			before:   []deploy{v1}, obj: readied.object(),
			want: "ready update " + life + "/2/ready", diff: []string{"status.readyReplicas"}, gen: 2, passed: "changed",
		},
		{
			name:     "another handler's annotations are not a change for one without fields",
			handlers: []*definition.Handler{anyChange, noted},
			before:   []deploy{v1}, obj: annotated.object(),
			want: "noted update " + life + "/2/noted", diff: []string{"metadata.annotations.note"}, gen: 2, passed: "changed",
		},
		{
			name:     "annotations named",
			handlers: []*definition.Handler{noted},
			before:   []deploy{v1}, obj: annotated.object(),
			want: "noted update " + life + "/2/noted", diff: []string{"metadata.annotations.note"}, gen: 2,
		},
		{
			name:     "an update-only handler passes the first sight",
			handlers: []*definition.Handler{anyChange},
			obj:      v1.object(),
			gen:      1, passed: "changed",
		},
		{
			name:     "delete, a generation after the one last seen",
			handlers: []*definition.Handler{rolled, del},
			before:   []deploy{v1, newImage}, obj: gone(newImage.object()),
			want: "cleanup delete " + life + "/3/cleanup", gen: 3,
		},
		{
			name:     "delete before a pending update: one change, with the deletion",
			handlers: []*definition.Handler{rolled, del},
			before:   []deploy{v1}, obj: gone(newImage.object()),
			want: "cleanup delete " + life + "/2/cleanup", gen: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatcher(tc.handlers...)
			for _, b := range tc.before {
				w.settle(b.object())
			}
			d, g := w.decide(tc.obj)
			got := ""
			if d.Cause != nil {
				got = d.Cause.Handler.Name + " " + d.Cause.Trigger + " " + d.Cause.Key
			}
			if got != tc.want {
				t.Fatalf("Decide = %q; want %q (decision %+v)", got, tc.want, d)
			}
			if g != tc.gen {
				t.Errorf("observed generation %d; want %d", g, tc.gen)
			}
			if d.Cause != nil && d.Cause.Trigger != v1alpha1.OnDelete {
				if paths := Paths(d.Cause.Diff); !slices.Equal(paths, tc.diff) {
					t.Errorf("diff %v; want %v", paths, tc.diff)
				}
			}
			if tc.passed != "" && w.st.Of(tc.passed).Generation != g {
				t.Errorf("handler %s is at generation %d; want %d, passed", tc.passed, w.st.Of(tc.passed).Generation, g)
			}
			// Once: after its success, nothing more for the same object.
			if d.Cause != nil {
				w.st.Succeeded(tc.handlers, d.Cause, Projection(tc.obj.Object, tc.handlers), 0, now)
				if again := w.settle(tc.obj); len(again) > 0 {
					t.Errorf("ran again: %v", again)
				}
			}
		})
	}
}

func TestAWatchedObjectsRunsFollowItsChanges(t *testing.T) {
	rolled := withFields(handler("rolled", v1alpha1.OnCreate, v1alpha1.OnUpdate), "spec.template")
	del := handler("cleanup", v1alpha1.OnDelete)
	w := newWatcher(rolled, del)
	steps := []struct {
		obj  *unstructured.Unstructured
		runs string
	}{
		{v1.object(), "rolled create " + life + "/1/rolled"},
		{v1.with(func(d *deploy) { d.rv, d.ready = "101", 2 }).object(), ""},
		{v1.with(func(d *deploy) { d.rv, d.replicas = "102", 4 }).object(), ""},
		{v1.with(func(d *deploy) { d.rv, d.replicas, d.image = "103", 4, "nginx:2" }).object(), "rolled update " + life + "/3/rolled"},
		{gone(v1.with(func(d *deploy) { d.rv, d.replicas, d.image = "104", 4, "nginx:2" }).object()), "cleanup delete " + life + "/4/cleanup"},
		{gone(v1.with(func(d *deploy) { d.rv, d.replicas, d.image = "104", 4, "nginx:2" }).object()), ""},
	}
	for i, s := range steps {
		if got := strings.Join(w.settle(s.obj), ", "); got != s.runs {
			t.Errorf("step %d: runs %q; want %q", i, got, s.runs)
		}
	}
}

func TestAWatchedObjectSeenAgainStartsANewLife(t *testing.T) {
	hs := []*definition.Handler{handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate)}
	first := newWatcher(hs...)
	if got := fmt.Sprint(first.settle(v1.object())); got != "[h create "+life+"/1/h]" {
		t.Fatalf("first life: %s", got)
	}
	// It stopped matching and was forgotten (its record dropped); it
	// matches again a minute later, unchanged (a selector of the
	// operator's changed, not the object).
	again := newWatcher(hs...)
	again.at = now.Add(time.Minute)
	obj := v1.object()
	d, g := again.decide(obj)
	if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnCreate || g != 1 {
		t.Fatalf("second life: %+v at generation %d; want create at 1", d.Cause, g)
	}
	if want := "d-1." + strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10) + "/1/h"; d.Cause.Key != want {
		t.Errorf("key %q; want %s, apart from the first life's %s/1/h", d.Cause.Key, want, life)
	}
	// A custom resource has no life of its own: its key is as before.
	if d := apply(Input{Handlers: hs, Object: object(1, map[string]any{"text": "a"}), State: state(0, nil, nil), Now: now}); d.Cause == nil || d.Cause.Key != "u-1/1/h" {
		t.Errorf("custom resource: %+v; want key u-1/1/h", d.Cause)
	}
}

func TestDiffObjectPathsStartAtTheRoot(t *testing.T) {
	before := map[string]any{"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"image": "a"}}, "metadata": map[string]any{"labels": map[string]any{"app": "web"}}}
	after := map[string]any{"spec": map[string]any{"replicas": float64(1), "template": map[string]any{"image": "b"}}, "data": map[string]any{"k": "v"}}
	got := DiffObject(before, after)
	want := []string{"data", "metadata", "spec.template.image"}
	if paths := Paths(got); !slices.Equal(paths, want) {
		t.Errorf("DiffObject paths %v; want %v", paths, want)
	}
	if ops := got[0].Op + " " + got[1].Op + " " + got[2].Op; ops != "add remove change" {
		t.Errorf("ops %s; want add remove change", ops)
	}
	if d := DiffObject(nil, map[string]any{}); len(d) != 0 {
		t.Errorf("DiffObject(nil, {}) = %v", d)
	}
}

// TestAWatchedHandlerOnDeleteBesideOtherTriggersRunsOnDeletion: a watched
// object's handler that runs on delete beside create or update, or alone,
// has its delete run once the object is deleted, whatever ran before. Its
// key is none of the earlier runs' keys (the engine asks the archive
// whether a key succeeded, and runs nothing for one that did), its
// attempts count from 1 (a create run that gave up does not hold it back),
// it keeps its key while it is decided again (a retry, or an engine
// started again on the archive's record), and once it succeeded nothing
// more runs.
func TestAWatchedHandlerOnDeleteBesideOtherTriggersRunsOnDeletion(t *testing.T) {
	newImage := v1.with(func(d *deploy) { d.rv, d.image = "101", "nginx:2" })
	newerImage := v1.with(func(d *deploy) { d.rv, d.image = "102", "nginx:3" })
	for _, h := range []*definition.Handler{
		handler("h", v1alpha1.OnCreate, v1alpha1.OnDelete),
		withFields(handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete), "spec.template"),
		handler("h", v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete),
		handler("h", v1alpha1.OnUpdate, v1alpha1.OnDelete),
		handler("h", v1alpha1.OnDelete),
	} {
		for _, tc := range []struct {
			name string
			seen []deploy // seen in turn, each run succeeding
			// gaveUp: the run for the last one seen gives up instead.
			gaveUp bool
			last   deploy // as it is deleted
			gen    int64  // the delete run's generation
		}{
			{name: "deleted as first seen", seen: []deploy{v1}, last: v1, gen: 2},
			{name: "deleted after a change", seen: []deploy{v1, newImage}, last: newImage, gen: 3},
			{name: "deleted with a change not seen", seen: []deploy{v1}, last: newImage, gen: 2},
			{name: "deleted after its run gave up", seen: []deploy{v1, newImage}, gaveUp: true, last: newImage, gen: 3},
			{name: "deleted, its last change seen only as it went", seen: []deploy{v1, newImage}, last: newerImage, gen: 3},
		} {
			t.Run(fmt.Sprintf("on %v fields %v/%s", h.On, h.Fields, tc.name), func(t *testing.T) {
				w := newWatcher(h)
				ran := map[string]bool{}
				for i, d := range tc.seen {
					if tc.gaveUp && i == len(tc.seen)-1 {
						if d, _ := w.decide(d.object()); d.Cause != nil {
							ran[d.Cause.Key] = true
							w.st.Failed(d.Cause, "boom", true, now)
						}
						continue
					}
					for _, run := range w.settle(d.object()) {
						ran[run[strings.LastIndex(run, " ")+1:]] = true
					}
				}
				obj := gone(tc.last.object())
				d, g := w.decide(obj)
				if d.Cause == nil || d.Cause.Trigger != v1alpha1.OnDelete {
					t.Fatalf("decided %+v (stalled %q) at generation %d; want a delete run", d.Cause, d.Stalled, g)
				}
				want := fmt.Sprintf("%s/%d/h", life, tc.gen)
				if g != tc.gen || d.Cause.Generation != tc.gen || d.Cause.Key != want || d.Cause.Attempt != 1 {
					t.Errorf("delete run for generation %d, key %q, attempt %d; want %d, %q, 1", d.Cause.Generation, d.Cause.Key, d.Cause.Attempt, tc.gen, want)
				}
				if ran[d.Cause.Key] {
					t.Errorf("the delete run's key %q is an earlier run's (%v)", d.Cause.Key, ran)
				}
				// Decided again, and by an engine started again on the
				// archive's record: the same run.
				if again, _ := w.decide(obj); again.Cause == nil || again.Cause.Key != d.Cause.Key {
					t.Errorf("decided again: %+v; want key %q", again.Cause, d.Cause.Key)
				}
				data, _ := json.Marshal(w.st)
				restarted := newWatcher(h)
				if err := json.Unmarshal(data, restarted.st); err != nil {
					t.Fatal(err)
				}
				if again, _ := restarted.decide(obj); again.Cause == nil || again.Cause.Key != d.Cause.Key {
					t.Errorf("decided from the archive's record: %+v; want key %q", again.Cause, d.Cause.Key)
				}
				w.st.Succeeded(w.handlers, d.Cause, Projection(obj.Object, w.handlers), 0, now)
				if more := w.settle(obj); len(more) > 0 {
					t.Errorf("after the delete run succeeded: %v; want nothing", more)
				}
			})
		}
	}
}

// ProjectsMoreThanLabels says whether Projection picks a field beyond the
// labels and the top-level fields, handler by handler field.
func TestProjectsMoreThanLabelsFollowsWhatProjectionPicks(t *testing.T) {
	for fields, want := range map[string]bool{
		"":                       false,
		"spec.template":          false,
		"data":                   false,
		"metadata.labels":        false,
		"metadata.labels.team":   false,
		"metadata.annotations":   true,
		"metadata.annotations.x": true,
		"metadata.generation":    true,
		"status":                 true,
		"status.readyReplicas":   true,
		"spec.replicas,status.x": true,
	} {
		h := &definition.Handler{Name: "h"}
		if fields != "" {
			h.Fields = strings.Split(fields, ",")
		}
		if got := ProjectsMoreThanLabels([]*definition.Handler{{Name: "other"}, h}); got != want {
			t.Errorf("fields %q: %v, want %v", fields, got, want)
		}
	}
}
