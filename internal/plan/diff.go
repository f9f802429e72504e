package plan

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compare"
)

// clean is obj without what the server fills or opkit keeps for itself,
// which a plan does not show: its status, managedFields, resourceVersion,
// generation, uid, creationTimestamp and the applied-hash annotation.
func clean(obj map[string]any) map[string]any {
	out := (&unstructured.Unstructured{Object: obj}).DeepCopy().Object
	delete(out, "status")
	md, _ := out["metadata"].(map[string]any)
	for _, k := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"} {
		delete(md, k)
	}
	if a, ok := md["annotations"].(map[string]any); ok {
		delete(a, v1alpha1.AppliedHashAnnotation)
		if len(a) == 0 {
			delete(md, "annotations")
		}
	}
	return out
}

// diff lists the changes from before to after by leaf: maps key by key,
// lists item by item when their lengths agree (else as a whole), numbers
// by value.
func diff(before, after map[string]any) []Change {
	var out []Change
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := slices.Sorted(maps.Keys(am))
			for k := range bm {
				if _, ok := am[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(join(path, k), am[k], bm[k])
			}
			return
		}
		al, aok := a.([]any)
		bl, bok := b.([]any)
		if aok && bok && len(al) == len(bl) {
			for i := range al {
				walk(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])
			}
			return
		}
		switch {
		case a == nil && b == nil:
		case a == nil:
			out = append(out, Change{Op: "add", Path: path, New: b})
		case b == nil:
			out = append(out, Change{Op: "remove", Path: path, Old: a})
		case !compare.SameValue(a, b):
			out = append(out, Change{Op: "change", Path: path, Old: a, New: b})
		}
	}
	walk("", before, after)
	return out
}

// setChanges lists the changes from live to the fields desired sets
// (what a re-creation changes, without the defaults the server fills).
func setChanges(live, desired map[string]any) []Change {
	var out []Change
	for _, c := range diff(live, desired) {
		if c.Op != "remove" {
			out = append(out, c)
		}
	}
	return out
}

// join is path.key. A key with dots (an annotation's) is left as it is:
// the plan's paths are for reading, not parsing.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
