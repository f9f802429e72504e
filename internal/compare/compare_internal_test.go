package compare

import "testing"

func TestContains(t *testing.T) {
	m := func(kv ...any) map[string]any {
		out := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		live, desired any
		want          bool
	}{
		{"equal", m("a", "x"), m("a", "x"), true},
		{"extra live fields", m("a", "x", "status", m("phase", "Running")), m("a", "x"), true},
		{"changed value", m("a", "x"), m("a", "y"), false},
		{"missing field", m(), m("a", "x"), false},
		{"empty desired map", m(), m("labels", m()), true},
		{"number types", m("n", float64(3)), m("n", int64(3)), true},
		{"different numbers", m("n", int64(4)), m("n", int64(3)), false},
		{"server-added list items", []any{m("key", "mine"), m("key", "default")}, []any{m("key", "mine")}, true},
		{"list order", []any{"b", "a"}, []any{"a", "b"}, false},
		{"list item changed", []any{"a", "c"}, []any{"a", "b"}, false},
		{"list shorter than desired", []any{"a"}, []any{"a", "b"}, false},
		{"type mismatch", m("a", []any{}), m("a", m()), false},
		{"nil", m("a", nil), m("a", nil), true},
	} {
		if got := Contains(tc.live, tc.desired); got != tc.want {
			t.Errorf("%s: contains = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAppliedHashIsStable(t *testing.T) {
	a := map[string]any{"b": 1, "a": []any{"x", map[string]any{"z": 1, "y": 2}}}
	b := map[string]any{"a": []any{"x", map[string]any{"y": 2, "z": 1}}, "b": 1}
	if AppliedHash(a) != AppliedHash(b) {
		t.Error("the hash depends on map order")
	}
	b["b"] = 2
	if AppliedHash(a) == AppliedHash(b) {
		t.Error("the hash ignores a change")
	}
}
