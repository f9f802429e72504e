package plan

import (
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
	compare.Walk("", before, after, compare.ListsByIndex, func(op, path string, was, now any) {
		out = append(out, Change{Op: op, Path: path, Old: was, New: now})
	})
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
