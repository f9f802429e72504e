package compare

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Conditions read from decoded JSON are what metav1.Condition decodes
// from the same JSON, whichever way they are read.
func TestStatusConditionsReadAsTheirJSONDecodes(t *testing.T) {
	for _, raw := range []string{
		`[]`,
		`[{"type":"Ready","status":"True","reason":"ChildrenReady","message":"all children exist","observedGeneration":3,"lastTransitionTime":"2026-11-25T10:00:00Z"}]`,
		`[{"type":"Ready","status":"False","reason":"R","message":"","lastTransitionTime":"2026-11-25T10:00:00+01:00"},{"type":"Degraded","status":"False","reason":"NoErrors","message":"m"}]`,
		// Shapes read through JSON instead.
		`[{"type":"Ready","status":"True","lastTransitionTime":null}]`,
		`[{"type":"Ready","status":"True","observedGeneration":2.0}]`,
		`[{"type":"Ready","status":"True","extra":"x"}]`,
		`[{"type":"Ready","status":"True","lastTransitionTime":"yesterday"}]`,
		`["Ready"]`,
		`{"type":"Ready"}`,
	} {
		var conds any
		if err := json.Unmarshal([]byte(raw), &conds); err != nil {
			t.Fatal(err)
		}
		conds = toInt64s(conds)
		cr := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": conds}}}
		// As they were read before: through JSON, always.
		var want []metav1.Condition
		data, _ := json.Marshal(conds)
		_ = json.Unmarshal(data, &want)
		if got := Conditions(cr); !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Errorf("%s: read %+v, want %+v", raw, got, want)
		}
	}
}

// toInt64s makes whole float64s int64s, as the API's JSON decodes.
func toInt64s(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = toInt64s(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = toInt64s(v[k])
		}
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	}
	return v
}

// The status patch holds what changed and nothing else: a changed map
// with its dropped keys as nulls, a dropped key as null, an unchanged key
// not at all (a handler's field written since must not be set back).
func TestStatusDeltaHoldsWhatChanged(t *testing.T) {
	old := map[string]any{
		"same":      "x",
		"number":    int64(2),
		"dropped":   "y",
		"opkit":     map[string]any{"children": []any{"a"}, "stalled": true},
		"untouched": map[string]any{"k": "v"},
	}
	status := map[string]any{
		"same":      "x",
		"number":    2.0,
		"opkit":     map[string]any{"children": []any{"a", "b"}},
		"untouched": map[string]any{"k": "v"},
		"added":     "z",
	}
	want := map[string]any{
		"dropped": nil,
		"opkit":   map[string]any{"children": []any{"a", "b"}, "stalled": nil},
		"added":   "z",
	}
	if got := StatusDelta(old, status); !reflect.DeepEqual(got, want) {
		t.Errorf("delta %v, want %v", got, want)
	}
	if _, ok := old["opkit"].(map[string]any)["stalled"]; !ok || len(status) != 5 {
		t.Errorf("StatusDelta changed its arguments: %v, %v", old, status)
	}
}
