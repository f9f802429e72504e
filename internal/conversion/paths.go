package conversion

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
)

// get returns the value at path (field names) in obj, and whether there
// is one.
func get(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, name := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[name]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// set stores v at path in obj, making the objects on the way; a value on
// the way that is not an object is replaced by one.
func set(obj map[string]any, path []string, v any) {
	cur := obj
	for _, name := range path[:len(path)-1] {
		next, ok := cur[name].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[name] = next
		}
		cur = next
	}
	cur[path[len(path)-1]] = v
}

// remove deletes the value at path in obj, and the objects on the way
// that are left empty by it.
func remove(obj map[string]any, path []string) {
	parents := []map[string]any{obj}
	cur := obj
	for _, name := range path[:len(path)-1] {
		next, ok := cur[name].(map[string]any)
		if !ok {
			return
		}
		parents = append(parents, next)
		cur = next
	}
	if _, ok := cur[path[len(path)-1]]; !ok {
		return
	}
	delete(cur, path[len(path)-1])
	for i := len(parents) - 1; i > 0 && len(parents[i]) == 0; i-- {
		delete(parents[i-1], path[i-1])
	}
}

// merge puts v at path (JSON pointer tokens) in obj: where obj has an
// object and v is one, their fields are merged, obj's winning; where obj
// has a value, it is kept. Objects on the way are made; a list index that
// does not exist drops v.
func merge(obj map[string]any, path []string, v any) {
	var cur any = obj
	for i, tok := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			existing, ok := c[tok]
			if last {
				if !ok {
					c[tok] = v
				} else {
					c[tok] = mergeValues(existing, v)
				}
				return
			}
			if !ok {
				existing = map[string]any{}
				c[tok] = existing
			}
			cur = existing
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(c) {
				return
			}
			if last {
				c[n] = mergeValues(c[n], v)
				return
			}
			cur = c[n]
		default:
			return
		}
	}
}

// mergeValues merges kept into have, have winning.
func mergeValues(have, kept any) any {
	hm, ok1 := have.(map[string]any)
	km, ok2 := kept.(map[string]any)
	if !ok1 || !ok2 {
		return have
	}
	for k, v := range km {
		if hv, ok := hm[k]; ok {
			hm[k] = mergeValues(hv, v)
		} else {
			hm[k] = v
		}
	}
	return hm
}

// pointer is the JSON pointer (RFC 6901) of a path of field names.
func pointer(path []string) string {
	var b strings.Builder
	for _, name := range path {
		b.WriteString("/" + escape(name))
	}
	return b.String()
}

func escape(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// splitPointer returns a JSON pointer's tokens.
func splitPointer(ptr string) []string {
	if ptr == "" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// prune removes from v, at JSON pointer ptr, what s cannot hold, keeping
// each in k; it returns false when s cannot hold v at all (the caller
// keeps v whole).
func prune(v any, s *structuralschema.Structural, ptr string, k *kept) bool {
	if s == nil || v == nil {
		return true
	}
	if !fits(s, v) {
		return false
	}
	switch t := v.(type) {
	case map[string]any:
		if s.Type != "object" && !s.XEmbeddedResource {
			return true
		}
		for _, name := range slices.Sorted(maps.Keys(t)) {
			child := ptr + "/" + escape(name)
			var cs *structuralschema.Structural
			if prop, ok := s.Properties[name]; ok {
				cs = &prop
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
				cs = s.AdditionalProperties.Structural
			} else if s.XPreserveUnknownFields || (s.AdditionalProperties != nil && s.AdditionalProperties.Bool) ||
				(s.XEmbeddedResource && (name == "apiVersion" || name == "kind" || name == "metadata")) {
				continue
			} else {
				k.field(child, t[name])
				delete(t, name)
				continue
			}
			if !prune(t[name], cs, child, k) {
				k.field(child, t[name])
				delete(t, name)
			}
		}
	case []any:
		for _, item := range t {
			if !fits(s.Items, item) {
				return false // an item it cannot hold: the list is kept whole
			}
		}
		for i, item := range t {
			prune(item, s.Items, fmt.Sprintf("%s/%d", ptr, i), k)
		}
	}
	return true
}

// fits reports whether a value of v's JSON type can be held where the
// schema is s (nil: anything).
func fits(s *structuralschema.Structural, v any) bool {
	if s == nil || v == nil {
		return true
	}
	if s.XIntOrString {
		switch n := v.(type) {
		case string, int64, int:
			return true
		case float64:
			return isWhole(n)
		}
		return false
	}
	switch s.Type {
	case "":
		if s.XEmbeddedResource {
			_, ok := v.(map[string]any)
			return ok
		}
		return true
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "integer":
		switch n := v.(type) {
		case int64, int:
			return true
		case float64:
			return isWhole(n)
		}
		return false
	case "number":
		switch v.(type) {
		case int64, int, float64:
			return true
		}
		return false
	}
	return true
}

func isWhole(f float64) bool { return f == math.Trunc(f) && !math.IsInf(f, 0) }

// jsonType names v's JSON type for a message.
func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64, int:
		return "integer"
	case float64:
		return "number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func schemaType(s *structuralschema.Structural) string {
	if s == nil || s.Type == "" {
		return "untyped"
	}
	return "a " + s.Type
}

// jsonEqual compares JSON values, numbers by value (an int64 2 equals a
// float64 2.0).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case int64, int, float64:
		fa, ok1 := number(a)
		fb, ok2 := number(b)
		return ok1 && ok2 && fa == fb
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
