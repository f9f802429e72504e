package watch

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/informer"
)

// A watched object's update is reconciled when it changes what a step
// reads, and only then: the cases are compared as the cache keeps them
// (compact, packed in their maps' order) and as unstructured objects.
func TestAnUpdateIsReconciledWhenItChangesWhatAStepReads(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{
				"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "10", "generation": int64(2),
				"labels":      map[string]any{"app": "web", "tier": "front"},
				"annotations": map[string]any{"deployment.kubernetes.io/revision": "2", "opkit.dev/paused": `{"by":"ana"}`},
				"finalizers":  []any{"example.com/keep"},
			},
			"spec": map[string]any{"replicas": int64(2), "ratio": 0.0, "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "web", "image": "nginx:1.27", "ports": []any{map[string]any{"containerPort": int64(80)}}}}}}},
			"status": map[string]any{"replicas": int64(2), "readyReplicas": int64(1), "observedGeneration": int64(2)},
		}}
	}
	statusWrite := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(2), "status", "readyReplicas")
	}
	byStatusField := []*definition.Handler{{Name: "ready", Fields: []string{"status.readyReplicas"}}}
	byAnnotations := []*definition.Handler{{Name: "notes", Fields: []string{"metadata.annotations"}}}
	bySpec := []*definition.Handler{{Name: "image", Fields: []string{"spec.template"}}, {Name: "labels", Fields: []string{"metadata.labels.app"}}}
	for _, c := range []struct {
		name        string
		handlers    []*definition.Handler
		expressions bool
		change      func(u *unstructured.Unstructured)
		want        bool
	}{
		{name: "a status write", change: statusWrite},
		{name: "a status write, handlers on spec fields", handlers: bySpec, change: statusWrite},
		{name: "someone else's annotation", change: func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["example.com/note"] = "x"
			u.SetAnnotations(a)
		}},
		{name: "the owner references", change: func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "o1"}})
		}},
		{name: "nothing but the resourceVersion", change: func(*unstructured.Unstructured) {}},
		{name: "a resync: the same resourceVersion", change: func(u *unstructured.Unstructured) { u.SetResourceVersion("10") }, want: true},
		{name: "the spec", change: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
		}, want: true},
		{name: "a container's image", change: func(u *unstructured.Unstructured) {
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			cs[0].(map[string]any)["image"] = "nginx:1.28"
			_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
		}, want: true},
		{name: "a float's zero made negative, which JSON writes apart", change: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, math.Copysign(0, -1), "spec", "ratio")
		}, want: true},
		{name: "a top-level field of its own", change: func(u *unstructured.Unstructured) { u.Object["data"] = map[string]any{"k": "v"} }, want: true},
		{name: "a label", change: func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"app": "web"}) }, want: true},
		{name: "opkit retry", change: func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["opkit.dev/retry"] = "2026-12-06T00:00:00Z"
			u.SetAnnotations(a)
		}, want: true},
		{name: "opkit resume", change: func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"deployment.kubernetes.io/revision": "2", "opkit.dev/resumed": `{"by":"ana"}`})
		}, want: true},
		{name: "a finalizer removed", change: func(u *unstructured.Unstructured) { u.SetFinalizers(nil) }, want: true},
		{name: "its deletion", change: func(u *unstructured.Unstructured) {
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			u.SetDeletionTimestamp(&now)
		}, want: true},
		{name: "another object of its name", change: func(u *unstructured.Unstructured) { u.SetUID("u2") }, want: true},
		{name: "a status field a handler names", handlers: byStatusField, change: statusWrite, want: true},
		{name: "another status field than a handler names", handlers: byStatusField, change: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(3), "status", "observedGeneration")
		}},
		{name: "someone else's annotation, a handler on annotations", handlers: byAnnotations, change: func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a["example.com/note"] = "x"
			u.SetAnnotations(a)
		}, want: true},
		{name: "a status write, an operator with expressions", expressions: true, change: statusWrite, want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpdates("test", c.handlers, c.expressions)
			old, updated := base(), base()
			updated.SetResourceVersion("11")
			c.change(updated)
			if got := u.changed(old, updated); got != c.want {
				t.Errorf("as unstructured objects: reconciled %v, want %v", got, c.want)
			}
			if got := u.changed(compact(t, old), compact(t, updated)); got != c.want {
				t.Errorf("as the cache keeps them: reconciled %v, want %v", got, c.want)
			}
			if got := u.changed(old, compact(t, updated)); got != c.want {
				t.Errorf("one of each: reconciled %v, want %v", got, c.want)
			}
		})
	}
}

// Labels that go from empty to none change the projection (it holds
// labels: {}, then no labels), which the labels' maps alone do not say.
func TestEmptyLabelsRemovedAreAChange(t *testing.T) {
	u := newUpdates("test", nil, false)
	old := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "uid": "u1", "resourceVersion": "1", "labels": map[string]any{}},
		"data":     map[string]any{"k": "v"},
	}}
	updated := old.DeepCopy()
	updated.SetResourceVersion("2")
	unstructured.RemoveNestedField(updated.Object, "metadata", "labels")
	if !u.changed(old, updated) || !u.changed(compact(t, old), compact(t, updated)) {
		t.Error("labels {} removed was not a change")
	}
}

// A built-in kind's list gives its items without apiVersion and kind,
// its watch events with them: an object from the list and its update
// from the watch that changes nothing else is no change.
func TestAnObjectFromTheListAndItsWatchEventCompareAlike(t *testing.T) {
	u := newUpdates("test", nil, false)
	listed := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "c", "uid": "u1", "resourceVersion": "1"},
		"data":     map[string]any{"k": "v"},
		"status":   map[string]any{"n": int64(1)},
	}}
	watched := listed.DeepCopy()
	watched.SetAPIVersion("v1")
	watched.SetKind("ConfigMap")
	watched.SetResourceVersion("2")
	_ = unstructured.SetNestedField(watched.Object, int64(2), "status", "n")
	if u.changed(compact(t, listed), compact(t, watched)) {
		t.Error("a status write after the list was reconciled: apiVersion and kind compared")
	}
}

func compact(t *testing.T, u *unstructured.Unstructured) client.Object {
	t.Helper()
	c, err := informer.Transform(u.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return c.(client.Object)
}
