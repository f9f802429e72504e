package cause

import (
	"encoding/json"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/compare"
)

// Diff lists the changes from before to after as dotted paths under spec:
// maps are compared key by key, anything else as a whole (numbers by
// value, whatever their Go type).
func Diff(before, after map[string]any) []archive.Change {
	return diff("spec", before, after)
}

// DiffObject lists the changes from before to after as dotted paths from
// the root of an object: those of a watched object's Projection.
func DiffObject(before, after map[string]any) []archive.Change {
	return diff("", before, after)
}

func diff(root string, before, after map[string]any) []archive.Change {
	if before == nil {
		before = map[string]any{}
	}
	if after == nil {
		after = map[string]any{}
	}
	var out []archive.Change
	compare.Walk(root, before, after, compare.ListsWhole, func(op, path string, was, now any) {
		out = append(out, archive.Change{Op: op, Path: path, Old: was, New: now})
	})
	return out
}

// Paths are the paths of a diff's changes.
func Paths(diff []archive.Change) []string {
	paths := make([]string, len(diff))
	for i, c := range diff {
		paths[i] = c.Path
	}
	return paths
}

// normalize gives a value its JSON form, so that int64(1) and float64(1)
// hash alike.
func normalize(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}
