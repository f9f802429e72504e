package compare

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConditionValuesDecodeAsTheirJSON(t *testing.T) {
	conds := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 3, Reason: "R", Message: "m <&>",
			LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 22, 1, 2, 3, 0, time.FixedZone("x", 3600)))},
		{Type: "Degraded", Status: metav1.ConditionFalse}, // no generation, no time
	}
	data, err := json.Marshal(conds)
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if got := Normalize(ConditionValues(conds)); !reflect.DeepEqual(got, want) {
		t.Errorf("ConditionValues:\n got %v\nwant %v", got, want)
	}
}

func TestSameValueIsJSONEquality(t *testing.T) {
	type pair struct{ A, B int64 }
	for _, c := range []struct {
		name string
		a, b any
		want bool
	}{
		{"equal maps", map[string]any{"a": "x", "b": []any{true, nil}}, map[string]any{"b": []any{true, nil}, "a": "x"}, true},
		{"a value differs", map[string]any{"a": "x"}, map[string]any{"a": "y"}, false},
		{"a key differs", map[string]any{"a": "x"}, map[string]any{"b": "x"}, false},
		{"null is not absent", map[string]any{"a": nil}, map[string]any{}, false},
		{"a nil map is null, not {}", map[string]any(nil), map[string]any{}, false},
		{"a nil list is null, not []", []any(nil), []any{}, false},
		{"int64 and float64 of one integer", map[string]any{"g": int64(3)}, map[string]any{"g": 3.0}, true},
		{"float64 and int64 of one integer", 3.0, int64(3), true},
		{"a fraction is not an integer", 3.5, int64(3), false},
		{"integers past float64's precision", int64(1<<53 + 1), float64(1 << 53), false},
		{"lists by order", []any{"a", "b"}, []any{"b", "a"}, false},
		{"lists of different lengths", []any{"a"}, []any{"a", "a"}, false},
		{"a string is not a number", "3", int64(3), false},
		{"a struct and its decoded map", pair{1, 2}, map[string]any{"A": int64(1), "B": 2.0}, true},
		{"a struct and another map", pair{1, 2}, map[string]any{"A": int64(1)}, false},
	} {
		if got := SameValue(c.a, c.b); got != c.want {
			t.Errorf("%s: SameValue(%v, %v) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
		if got := SameValue(c.b, c.a); got != c.want {
			t.Errorf("%s, swapped: SameValue(%v, %v) = %v, want %v", c.name, c.b, c.a, got, c.want)
		}
	}
}
