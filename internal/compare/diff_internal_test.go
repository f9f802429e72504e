package compare

import (
	"fmt"
	"slices"
	"testing"
)

func TestWalk(t *testing.T) {
	before := map[string]any{
		"n":     int64(3),
		"gone":  "x",
		"list":  []any{"a", "b"},
		"short": []any{"a"},
		"named": []any{map[string]any{"name": "web", "image": "v1"}, map[string]any{"name": "db"}},
		"deep":  map[string]any{"k": "v"},
	}
	after := map[string]any{
		"n":     float64(3), // the same number
		"list":  []any{"a", "c"},
		"short": []any{"a", "b"},
		"named": []any{map[string]any{"name": "db"}, map[string]any{"name": "web", "image": "v2"}, map[string]any{"name": "cache"}},
		"deep":  map[string]any{"k": "w", "new": true},
	}
	for _, tc := range []struct {
		lists Lists
		want  []string
	}{
		{ListsWhole, []string{
			"change spec.deep.k v w", "add spec.deep.new <nil> true", "remove spec.gone x <nil>",
			"change spec.list [a b] [a c]",
			"change spec.named [map[image:v1 name:web] map[name:db]] [map[name:db] map[image:v2 name:web] map[name:cache]]",
			"change spec.short [a] [a b]",
		}},
		{ListsByIndex, []string{
			"change spec.deep.k v w", "add spec.deep.new <nil> true", "remove spec.gone x <nil>",
			"change spec.list[1] b c",
			"change spec.named [map[image:v1 name:web] map[name:db]] [map[name:db] map[image:v2 name:web] map[name:cache]]",
			"change spec.short [a] [a b]",
		}},
		{ListsByKey, []string{
			"change spec.deep.k v w", "add spec.deep.new <nil> true", "remove spec.gone x <nil>",
			"change spec.list[1] b c",
			"change spec.named[web].image v1 v2", "add spec.named[cache] <nil> map[name:cache]",
			"change spec.short [a] [a b]",
		}},
	} {
		var got []string
		Walk("spec", before, after, tc.lists, func(op, path string, was, now any) {
			got = append(got, fmt.Sprintf("%s %s %v %v", op, path, was, now))
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("lists %d:\n got %q\nwant %q", tc.lists, got, tc.want)
		}
	}
	var root []string
	Walk("", map[string]any{"a": "x"}, map[string]any{"a": "y"}, ListsWhole, func(_, path string, _, _ any) { root = append(root, path) })
	if !slices.Equal(root, []string{"a"}) {
		t.Errorf("paths from the root: %q, want [a]", root)
	}
}
