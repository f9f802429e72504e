package compare

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// StatusDelta is the merge patch from old to status: the keys whose value
// changed (a map with its removed keys as nulls) and the removed keys.
func StatusDelta(old, status map[string]any) map[string]any {
	delta := WithRemovals(old, status)
	for k, v := range status {
		if was, ok := old[k]; ok && SameValue(was, v) {
			delete(delta, k)
		}
	}
	return delta
}

// Conditions reads the object's status.conditions; unreadable ones
// read as none. Conditions as the API gives them are read as they are;
// any other shape through JSON, as metav1.Condition decodes it.
func Conditions(cr *unstructured.Unstructured) []metav1.Condition {
	raw, ok, _ := unstructured.NestedFieldNoCopy(cr.Object, "status", "conditions")
	if !ok {
		return nil
	}
	if conds, ok := readConditionValues(raw); ok {
		return conds
	}
	var conds []metav1.Condition
	data, _ := json.Marshal(raw)
	_ = json.Unmarshal(data, &conds)
	return conds
}

// readConditionValues reads conditions from decoded JSON whose every
// field has the type metav1.Condition gives it; ok is false otherwise.
func readConditionValues(raw any) (conds []metav1.Condition, ok bool) {
	list, ok := raw.([]any)
	if !ok {
		return nil, false
	}
	conds = make([]metav1.Condition, 0, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, false
		}
		var c metav1.Condition
		for k, v := range m {
			switch k {
			case "type", "status", "reason", "message", "lastTransitionTime":
				s, isString := v.(string)
				if !isString {
					return nil, false
				}
				switch k {
				case "type":
					c.Type = s
				case "status":
					c.Status = metav1.ConditionStatus(s)
				case "reason":
					c.Reason = s
				case "message":
					c.Message = s
				case "lastTransitionTime":
					if err := c.LastTransitionTime.UnmarshalQueryParameter(s); err != nil {
						return nil, false
					}
				}
			case "observedGeneration":
				n, isInt := v.(int64)
				if !isInt {
					return nil, false
				}
				c.ObservedGeneration = n
			default:
				return nil, false // a field metav1.Condition does not have
			}
		}
		conds = append(conds, c)
	}
	return conds, true
}

// ConditionValues gives conditions as their JSON decodes, as a status
// read from the API holds them.
func ConditionValues(conds []metav1.Condition) []any {
	out := make([]any, len(conds))
	for i, c := range conds {
		m := map[string]any{"type": c.Type, "status": string(c.Status), "reason": c.Reason, "message": c.Message}
		if c.ObservedGeneration != 0 {
			m["observedGeneration"] = c.ObservedGeneration
		}
		m["lastTransitionTime"] = nil
		if !c.LastTransitionTime.IsZero() {
			m["lastTransitionTime"] = c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		out[i] = m
	}
	return out
}

// SameValue reports whether a and b encode to the same JSON value: an
// int64 and a float64 of the same integer are equal, as are a struct and
// its decoded map. Values decoded from JSON, which statuses are, are
// compared as they are; any other type through its JSON.
func SameValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			if len(x) != len(y) || (x == nil) != (y == nil) { // a nil map is null
				return false
			}
			for k, v := range x {
				if w, ok := y[k]; !ok || !SameValue(v, w) {
					return false
				}
			}
			return true
		}
	case []any:
		if y, ok := b.([]any); ok {
			return (x == nil) == (y == nil) && slices.EqualFunc(x, y, SameValue)
		}
	case string:
		if y, ok := b.(string); ok {
			return x == y
		}
	case bool:
		if y, ok := b.(bool); ok {
			return x == y
		}
	case nil:
		if b == nil {
			return true
		}
	case int64, float64:
		if equal, ok := sameNumber(x, b); ok {
			return equal
		}
	}
	return reflect.DeepEqual(Normalize(a), Normalize(b))
}

// sameNumber compares two numbers as JSON would write them; ok is false
// when either is not an int64 or a float64.
func sameNumber(a, b any) (equal, ok bool) {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y, true
		case float64:
			return intIsFloat(x, y), true
		}
	case float64:
		switch y := b.(type) {
		case int64:
			return intIsFloat(y, x), true
		case float64:
			return x == y, true
		}
	}
	return false, false
}

// intIsFloat reports whether f is exactly the integer i.
func intIsFloat(i int64, f float64) bool {
	return f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 && int64(f) == i
}

// Normalize round-trips a value through JSON so that int and int64, or
// typed and untyped maps, compare equal.
func Normalize(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}
