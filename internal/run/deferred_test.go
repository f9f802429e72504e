package run

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestMergeStatusIsAJSONMergePatchThatSharesNoChangedMap(t *testing.T) {
	nested := map[string]any{"a": int64(1), "b": int64(2)}
	status := map[string]any{"phase": "Old", "gone": true, "nested": nested, "list": []any{"x"}}
	MergeStatus(status, map[string]any{
		"phase": "New", "gone": nil, "nested": map[string]any{"b": nil, "c": int64(3)}, "list": []any{"y"}, "added": map[string]any{"d": nil, "e": "f"},
	})
	want := map[string]any{"phase": "New", "nested": map[string]any{"a": int64(1), "c": int64(3)}, "list": []any{"y"}, "added": map[string]any{"e": "f"}}
	if !reflect.DeepEqual(status, want) {
		t.Errorf("merged %v\nwant   %v", status, want)
	}
	if !reflect.DeepEqual(nested, map[string]any{"a": int64(1), "b": int64(2)}) {
		t.Errorf("the map the status shared was changed: %v", nested)
	}
}

func TestWithStatusLeavesTheObjectAsItWas(t *testing.T) {
	cr := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"x": "y"}, "status": map[string]any{"n": int64(1)}}}
	got := WithStatus(cr, map[string]any{"n": int64(2), "touched": true})
	if n := got.Object["status"].(map[string]any)["n"]; n != int64(2) {
		t.Errorf("merged status.n %v; want 2", n)
	}
	if n := cr.Object["status"].(map[string]any)["n"]; n != int64(1) {
		t.Errorf("the object's own status.n became %v", n)
	}
}
