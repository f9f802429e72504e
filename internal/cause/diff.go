package cause

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	"github.com/opkit-dev/opkit/internal/archive"
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
	var out []archive.Change
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				if path == "" {
					walk(k, am[k], bm[k])
				} else {
					walk(path+"."+k, am[k], bm[k])
				}
			}
			return
		}
		switch {
		case a == nil && b == nil:
		case a == nil:
			out = append(out, archive.Change{Op: "add", Path: path, New: b})
		case b == nil:
			out = append(out, archive.Change{Op: "remove", Path: path, Old: a})
		case !reflect.DeepEqual(normalize(a), normalize(b)):
			out = append(out, archive.Change{Op: "change", Path: path, Old: a, New: b})
		}
	}
	if before == nil {
		before = map[string]any{}
	}
	if after == nil {
		after = map[string]any{}
	}
	walk(root, before, after)
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
// compare equal.
func normalize(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}
