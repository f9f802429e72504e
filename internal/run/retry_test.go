package run

import (
	"encoding/json"
	"testing"
)

// TestRemoveAnnotationPatchIsJSONForAnyValue: the guarded removal of a
// request consumed is valid JSON, testing the very value read, whatever
// that value holds (one set by hand may hold a control character or a
// rune Go quotes in its own syntax); else it never applies, and the
// request is taken again at every reconcile.
func TestRemoveAnnotationPatchIsJSONForAnyValue(t *testing.T) {
	for _, value := range []string{"2026-11-27T08:00:00Z", `{"by":"alice","reason":"a \"quoted\" <reason>","at":"x"}`, "bell \x07 and \x01", "\U000e0001 a tag rune", ""} {
		var ops []map[string]string
		if err := json.Unmarshal(RemoveAnnotationPatch("opkit.dev/retry", value), &ops); err != nil {
			t.Errorf("the patch for %q is not JSON: %v", value, err)
			continue
		}
		if len(ops) != 2 || ops[0]["op"] != "test" || ops[0]["value"] != value || ops[0]["path"] != "/metadata/annotations/opkit.dev~1retry" ||
			ops[1]["op"] != "remove" || ops[1]["path"] != ops[0]["path"] {
			t.Errorf("the patch for %q is %v; want a test of that value, then its removal", value, ops)
		}
	}
}
