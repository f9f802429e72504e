package informer

import (
	"maps"
	"reflect"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The objects below are as the API sends them; the cache must give back
// each one unchanged but for its managedFields.
var cachedObjects = []string{
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p-text","namespace":"bench","uid":"6b1f","resourceVersion":"812","creationTimestamp":"2026-11-22T10:00:00Z",
	  "ownerReferences":[{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","name":"p","uid":"5a0e","controller":true,"blockOwnerDeletion":true}],
	  "labels":{"opkit.dev/operator":"bench-printer"},
	  "managedFields":[{"manager":"opkit","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:text":{}}}}]},
	  "data":{"text":"hello"}}`,
	`{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"p","generateName":"p-","namespace":"bench","uid":"5a0e","resourceVersion":"813","generation":3,
	  "creationTimestamp":"2026-11-22T10:00:00Z","deletionTimestamp":"2026-11-22T10:05:00Z","deletionGracePeriodSeconds":0,
	  "labels":{},"annotations":{"opkit.dev/retry":"1","kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{}}"},"finalizers":["opkit.dev/handlers"],
	  "ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"bench","uid":"1"}]},
	  "spec":{"text":"héllo \u2028 <b>","copies":2,"ratio":1.5,"big":9007199254740993,"whole":4.0,"none":null,"on":false,"list":[1,"two",{"three":[]}],"empty":{}},
	  "status":{"observedGeneration":3,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T10:00:01Z","reason":"Reconciled","message":""}]}}`,
	`{"apiVersion":"example.com/v1","kind":"Cluster","metadata":{"name":"scoped"}}`,
}

func TestCompactCacheGivesBackWhatItWasGiven(t *testing.T) {
	for _, raw := range cachedObjects {
		want := &unstructured.Unstructured{}
		if err := want.UnmarshalJSON([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		in := want.DeepCopy()
		want.SetManagedFields(nil)

		stored, err := Transform(in)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := stored.(*compactObject)
		if !ok {
			t.Fatalf("%s is cached as %T, want *compactObject", want.GetName(), stored)
		}
		// What the informer's keys, indexes and owner lookups read.
		key, err := toolscache.MetaNamespaceKeyFunc(c)
		if err != nil {
			t.Fatal(err)
		}
		if wantKey, _ := toolscache.MetaNamespaceKeyFunc(want); key != wantKey {
			t.Errorf("key %q, want %q", key, wantKey)
		}
		var obj client.Object = c
		if !equality.Semantic.DeepEqual(obj.GetOwnerReferences(), want.GetOwnerReferences()) ||
			!equality.Semantic.DeepEqual(obj.GetLabels(), want.GetLabels()) ||
			obj.GetGeneration() != want.GetGeneration() || obj.GetResourceVersion() != want.GetResourceVersion() ||
			obj.GetObjectKind().GroupVersionKind() != want.GroupVersionKind() {
			t.Errorf("%s: the cached object's metadata differs from the object's", want.GetName())
		}

		// What a read through the cache returns: the copy.
		got, ok := c.DeepCopyObject().(*unstructured.Unstructured)
		if !ok {
			t.Fatalf("the copy is %T, want *unstructured.Unstructured", c.DeepCopyObject())
		}
		if !equality.Semantic.DeepEqual(got.Object, want.Object) {
			t.Errorf("%s changed in the cache:\n got %v\nwant %v", want.GetName(), got.Object, want.Object)
		}
		// Each read is a copy of its own.
		got.Object["spec"] = "changed"
		if again := c.DeepCopyObject().(*unstructured.Unstructured); !equality.Semantic.DeepEqual(again.Object, want.Object) {
			t.Errorf("%s: changing a read changed the cache", want.GetName())
		}

		// Informers may transform an object twice.
		twice, err := Transform(c)
		if err != nil {
			t.Fatal(err)
		}
		if twice != stored {
			t.Errorf("transforming a cached object again gave %T, want the same object", twice)
		}
	}
}

func TestCompactCacheStripsManagedFieldsOfTypedObjects(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	got, err := Transform(cm)
	if err != nil {
		t.Fatal(err)
	}
	if got.(runtime.Object) != cm || cm.ManagedFields != nil {
		t.Errorf("a typed object is cached as %T with managedFields %v; want itself without them", got, cm.ManagedFields)
	}
}

// BenchmarkCacheRead is a read through the cache: the copy of a cached
// Printer, compact or as nested maps.
func BenchmarkCacheRead(b *testing.B) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(cachedObjects[1])); err != nil {
		b.Fatal(err)
	}
	u.SetManagedFields(nil)
	b.Run("unstructured", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = u.DeepCopyObject()
		}
	})
	c, err := Transform(u.DeepCopy())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("compact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.(*compactObject).DeepCopyObject()
		}
	})
}

// BenchmarkCacheWrite is what the informer does with each object it
// receives.
func BenchmarkCacheWrite(b *testing.B) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(cachedObjects[1])); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Transform(u); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEqualLabelSetsAreSharedAndOthersKeptApart(t *testing.T) {
	sets := &labelSets{}
	a := sets.intern(map[string]string{"opkit.dev/operator": "printer", "tier": "web"})
	b := sets.intern(map[string]string{"tier": "web", "opkit.dev/operator": "printer"})
	if reflect.ValueOf(a).Pointer() != reflect.ValueOf(b).Pointer() {
		t.Error("two equal label sets are two maps, want one shared")
	}
	// Sets whose keys and values run together alike stay apart.
	for _, other := range []map[string]string{
		{"opkit.dev/operator": "printer"},
		{"opkit.dev/operator": "printertier", "web": ""},
		{"opkit.dev/operator": "printer", "tier": "web", "x": "y"},
	} {
		got := sets.intern(other)
		if !maps.Equal(got, other) {
			t.Errorf("intern(%v) = %v", other, got)
		}
	}
	if got := sets.intern(nil); got != nil {
		t.Errorf("intern(nil) = %v, want nil", got)
	}
	// The table is bounded: past maxLabelSets it starts again, and the
	// maps it gave out stay as they were.
	for i := range maxLabelSets + 10 {
		sets.intern(map[string]string{"id": strconv.Itoa(i)})
	}
	if n := len(sets.sets); n > maxLabelSets {
		t.Errorf("the table holds %d sets, want at most %d", n, maxLabelSets)
	}
	if !maps.Equal(a, map[string]string{"opkit.dev/operator": "printer", "tier": "web"}) {
		t.Errorf("a shared set changed: %v", a)
	}
}

func TestCachedChildrenShareTheirLabels(t *testing.T) {
	child := func(name string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns","labels":{"opkit.dev/operator":"printer"}},"data":{"text":"hi"}}`)
	}
	var got []map[string]string
	for _, name := range []string{"a", "b"} {
		c, err := decodeCompact(child(name), metav1.TypeMeta{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := Transform(c)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.(*compactObject).Labels)
	}
	if reflect.ValueOf(got[0]).Pointer() != reflect.ValueOf(got[1]).Pointer() {
		t.Error("two cached children with the same labels hold two maps, want one")
	}
}
