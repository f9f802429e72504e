package plan

import (
	"fmt"
	"testing"
)

func TestDiffGoesIntoMapsAndListsOfTheSameLengthAndComparesNumbersByValue(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]any
		want          string
	}{
		{"equal", map[string]any{"a": int64(1)}, map[string]any{"a": float64(1)}, "[]"},
		{"a key added and one removed", map[string]any{"a": "x"}, map[string]any{"b": "y"},
			"[a: - \"x\" b: + \"y\"]"},
		{"a list item changed", map[string]any{"c": []any{map[string]any{"image": "a"}, "k"}}, map[string]any{"c": []any{map[string]any{"image": "b"}, "k"}},
			"[c[0].image: \"a\" -> \"b\"]"},
		{"a list grown is changed whole", map[string]any{"c": []any{"a"}}, map[string]any{"c": []any{"a", "b"}},
			"[c: [\"a\"] -> [\"a\",\"b\"]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(diff(tc.before, tc.after)); got != tc.want {
				t.Errorf("diff: %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCleanLeavesOutWhatTheServerFillsAndTheAppliedHash(t *testing.T) {
	obj := map[string]any{
		"metadata": map[string]any{
			"name": "a", "resourceVersion": "1", "generation": int64(2), "uid": "u", "creationTimestamp": "t",
			"managedFields": []any{}, "annotations": map[string]any{"opkit.dev/applied-hash": "h", "keep": "me"},
		},
		"status": map[string]any{"x": "y"},
	}
	got := fmt.Sprint(clean(obj))
	if want := "map[metadata:map[annotations:map[keep:me] name:a]]"; got != want {
		t.Errorf("clean: %s, want %s", got, want)
	}
	if _, ok := obj["status"]; !ok {
		t.Error("clean changed its argument")
	}
}
