package compare

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// A child's v1alpha1.AppliedHashAnnotation, with contains, tells whether
// it needs a write: a new hash means the template's output changed (an
// item removed from a list too), and contains catches a field changed by
// someone else.

// AppliedHash hashes a rendered child (encoding/json sorts map keys).
func AppliedHash(obj map[string]any) string {
	data, _ := json.Marshal(obj)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// Contains reports whether every field set in desired holds the same value
// in live: maps are compared key by key (live may have more keys, such as
// defaults and status), lists item by item in order, where live may have
// items the server added (a Pod's default tolerations), and numbers by
// value.
func Contains(live, desired any) bool {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, dv := range d {
			lv, ok := l[k]
			if !ok {
				if isEmpty(dv) {
					continue // an empty value is not stored
				}
				return false
			}
			if !Contains(lv, dv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return false
		}
		// Each desired item matches a later live item than the one before.
		j := 0
		for _, item := range d {
			for j < len(l) && !Contains(l[j], item) {
				j++
			}
			if j == len(l) {
				return false
			}
			j++
		}
		return true
	case nil:
		return live == nil
	}
	if dn, ok := Number(desired); ok {
		ln, ok := Number(live)
		return ok && dn == ln
	}
	return live == desired
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// Number is v as a JSON number, whichever Go type a decoder gave it
// (int, int32, int64, float64, json.Number); ok is false for a value
// that is no number.
func Number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// WithRemovals makes desired a JSON merge patch (RFC 7386) over current:
// desired as it is, plus a null for every key current has and desired
// lacks, at every depth where both hold an object. A merge patch merges
// nested objects key by key, so without the nulls a field desired dropped
// (a handler's stalled flag after a success) would stay on the server.
// Neither argument is changed.
func WithRemovals(current, desired map[string]any) map[string]any {
	out := make(map[string]any, len(desired))
	for k, v := range desired {
		if dm, ok := v.(map[string]any); ok {
			if cm, ok := current[k].(map[string]any); ok {
				v = WithRemovals(cm, dm)
			}
		}
		out[k] = v
	}
	for k := range current {
		if _, ok := desired[k]; !ok {
			out[k] = nil
		}
	}
	return out
}
