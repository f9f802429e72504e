package run

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func version(uid, rv string, count int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rw.example.com/v1", "kind": "Counter",
		"metadata": map[string]any{"name": "c", "namespace": "ns", "uid": uid, "resourceVersion": rv},
		"status":   map[string]any{"count": count},
	}}
}

func count(obj *unstructured.Unstructured) int64 {
	c, _, _ := unstructured.NestedInt64(obj.Object, "status", "count")
	return c
}

func TestMemoryReadsTheNewerOfCacheAndWrite(t *testing.T) {
	cases := []struct {
		name    string
		written []*unstructured.Unstructured
		cached  *unstructured.Unstructured
		want    int64
		kept    bool // the write is still remembered after the read
	}{
		{"nothing written: the cache", nil, version("u1", "10", 1), 1, false},
		{"the cache is behind the write: the write", []*unstructured.Unstructured{version("u1", "12", 2)}, version("u1", "10", 1), 2, true},
		{"the cache shows the write: the cache, and the write is dropped", []*unstructured.Unstructured{version("u1", "12", 2)}, version("u1", "12", 2), 2, false},
		{"the cache is past the write: the cache", []*unstructured.Unstructured{version("u1", "12", 2)}, version("u1", "15", 7), 7, false},
		{"an object of another uid: the cache", []*unstructured.Unstructured{version("u1", "12", 2)}, version("u2", "3", 0), 0, false},
		{"an answer older than the write before it does not replace it", []*unstructured.Unstructured{version("u1", "14", 3), version("u1", "12", 2)}, version("u1", "10", 1), 3, true},
		{"a later write replaces an earlier one", []*unstructured.Unstructured{version("u1", "12", 2), version("u1", "14", 3)}, version("u1", "10", 1), 3, true},
		{"a resourceVersion that is not a number: the cache", []*unstructured.Unstructured{version("u1", "x12", 2)}, version("u1", "10", 1), 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewMemory(false)
			for _, obj := range tc.written {
				w.Record(obj)
			}
			got := w.Newest(tc.cached)
			if count(got) != tc.want {
				t.Errorf("newest gives count %d; want %d", count(got), tc.want)
			}
			_, kept := w.writes[types.NamespacedName{Namespace: "ns", Name: "c"}]
			if kept != tc.kept {
				t.Errorf("the write is kept: %v; want %v", kept, tc.kept)
			}
		})
	}
}

func TestMemoryGivesACopy(t *testing.T) {
	w := NewMemory(false)
	w.Record(version("u1", "12", 2))
	got := w.Newest(version("u1", "10", 1))
	if err := unstructured.SetNestedField(got.Object, int64(99), "status", "count"); err != nil {
		t.Fatal(err)
	}
	if again := w.Newest(version("u1", "10", 1)); count(again) != 2 {
		t.Fatalf("a change to what newest gave changed the memory: count %d", count(again))
	}
}

func TestMemoryForgetsAndANilOrReadOnlyMemoryRecordsNothing(t *testing.T) {
	w := NewMemory(false)
	w.Record(version("u1", "12", 2))
	w.Forget(types.NamespacedName{Namespace: "ns", Name: "c"})
	if got := w.Newest(version("u1", "10", 1)); count(got) != 1 {
		t.Fatalf("a forgotten write is still read: count %d", count(got))
	}
	var none *Memory
	none.Record(version("u1", "12", 2))
	if got := none.Newest(version("u1", "10", 1)); count(got) != 1 {
		t.Fatalf("a nil memory gave count %d", count(got))
	}
	readOnly := NewMemory(true)
	readOnly.Record(version("u1", "12", 2))
	if got := readOnly.Newest(version("u1", "10", 1)); count(got) != 1 {
		t.Fatalf("a read-only memory gave count %d", count(got))
	}
}
