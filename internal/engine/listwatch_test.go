package engine_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/informer"
)

// The cache's own list-watch, which decodes JSON straight into the
// cache's form, gives what the API server holds: a list page by page, and
// every change after it, each object as a read of the API gives it (less
// its managedFields).
func TestThePackedListWatchGivesWhatTheAPIHolds(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	for i := range 5 {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: env.Namespace, Labels: map[string]string{"n": fmt.Sprint(i)}},
			Data:       map[string]string{"text": fmt.Sprintf("héllo \"%d\"\n", i)},
			BinaryData: map[string][]byte{"bin": {0, 1, byte(i)}},
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	lw := packedListWatch(t, env, gvk, "")

	// Pages of two.
	var listed []*unstructured.Unstructured
	var rv string
	for opts := (metav1.ListOptions{Limit: 2}); ; {
		page, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		items, meta := informer.CachedObjects(page)
		listed, rv = append(listed, items...), meta.ResourceVersion
		if meta.Continue == "" {
			break
		}
		opts.Continue = meta.Continue
	}
	want := &unstructured.UnstructuredList{}
	want.SetGroupVersionKind(gvk.GroupVersion().WithKind("ConfigMapList"))
	if err := env.Client.List(ctx, want, client.InNamespace(env.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(want.Items) || len(listed) < 5 {
		t.Fatalf("listed %d ConfigMaps, the API holds %d (5 made here)", len(listed), len(want.Items))
	}
	for i := range want.Items {
		want.Items[i].SetManagedFields(nil)
		if !equality.Semantic.DeepEqual(listed[i].Object, want.Items[i].Object) {
			t.Errorf("listed\n%v\nthe API holds\n%v", listed[i].Object, want.Items[i].Object)
		}
	}

	// Every change after the list.
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	added := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "added", Namespace: env.Namespace}, Data: map[string]string{"a": "1"}}
	if err := env.Client.Create(ctx, added); err != nil {
		t.Fatal(err)
	}
	changed := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "cm-1"}, changed); err != nil {
		t.Fatal(err)
	}
	changed.Data["text"] = "changed"
	if err := env.Client.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-2", Namespace: env.Namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, next := range []struct {
		typ  watch.EventType
		name string
		data string
	}{{watch.Added, "added", "1"}, {watch.Modified, "cm-1", "changed"}, {watch.Deleted, "cm-2", `héllo "2"` + "\n"}} {
		ev := nextEvent(t, w)
		objs, _ := informer.CachedObjects(ev.Object)
		if ev.Type != next.typ || len(objs) != 1 || objs[0].GetName() != next.name || objs[0].GetKind() != "ConfigMap" {
			t.Fatalf("event %s %v, want %s of ConfigMap %s", ev.Type, objs, next.typ, next.name)
		}
		if data, _, _ := unstructured.NestedStringMap(objs[0].Object, "data"); data["a"] != next.data && data["text"] != next.data {
			t.Errorf("%s %s holds %v, want %q", next.typ, next.name, data, next.data)
		}
	}
}

// packedListWatch is the list-watch of gvk the cache's informers use in
// env's namespace, of the objects selector selects ("": all).
func packedListWatch(t *testing.T, env *clustertest.Env, gvk schema.GroupVersionKind, selector string) toolscache.ListerWatcherWithContext {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	p := &informer.Informers{Config: env.Config, HTTP: hc, Scopes: &informer.Scopes{Mapper: mapper}, Namespace: env.Namespace, LabelSelector: selector}
	lw, err := p.ListWatch(gvk)
	if err != nil {
		t.Fatal(err)
	}
	return lw
}

// nextEvent returns the watch's next event but a bookmark.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			if ev.Type != watch.Bookmark {
				return ev
			}
		case <-time.After(clustertest.Scaled(30 * time.Second)):
			t.Fatalf("no event in %s", clustertest.Scaled(30*time.Second))
		}
	}
}

// With a label selector (a watch operator's own cache), the packed
// list-watch lists and watches the selected objects only.
func TestThePackedListWatchKeepsToItsLabelSelector(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	configMap := func(name, team string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace, Labels: map[string]string{"team": team}}}
	}
	for _, cm := range []*corev1.ConfigMap{configMap("a-1", "a"), configMap("b-1", "b"), configMap("a-2", "a")} {
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	lw := packedListWatch(t, env, gvk, "team=a")
	page, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, meta := informer.CachedObjects(page)
	var names []string
	for _, it := range items {
		names = append(names, it.GetName())
	}
	if fmt.Sprint(names) != "[a-1 a-2]" {
		t.Errorf("listed %v; want [a-1 a-2], the ConfigMaps of team a", names)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: meta.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, cm := range []*corev1.ConfigMap{configMap("b-2", "b"), configMap("a-3", "a")} {
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	ev := nextEvent(t, w)
	if objs, _ := informer.CachedObjects(ev.Object); ev.Type != watch.Added || len(objs) != 1 || objs[0].GetName() != "a-3" {
		t.Errorf("the first event after the list: %s %v; want a-3 Added (b-2 is team b's)", ev.Type, objs)
	}
}
