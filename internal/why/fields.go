package why

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Fields reads a managedFields entry's fieldsV1 (raw) as the leaf fields
// it owns, with their values in obj now: paths in kubectl's dotted form,
// a list's item by its key (containers[name=worker].image) or value.
// metadata's own fields (managedFields, resourceVersion...) are left out
// but labels and annotations.
func Fields(obj map[string]any, raw []byte) []Field {
	var set map[string]any
	if json.Unmarshal(raw, &set) != nil {
		return nil
	}
	var out []Field
	var walk func(path string, node any, set map[string]any)
	walk = func(path string, node any, set map[string]any) {
		keys := make([]string, 0, len(set))
		for k := range set {
			if k != "." {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		if len(keys) == 0 {
			f := Field{Path: path}
			switch node.(type) {
			case map[string]any, []any, nil:
			default:
				f.Value = node
			}
			out = append(out, f)
			return
		}
		for _, k := range keys {
			child, _ := set[k].(map[string]any)
			kind, rest, _ := strings.Cut(k, ":")
			var p string
			var next any
			switch kind {
			case "f":
				p = rest
				if path != "" {
					p = path + "." + rest
				}
				if m, ok := node.(map[string]any); ok {
					next = m[rest]
				}
			case "k":
				var key map[string]any
				_ = json.Unmarshal([]byte(rest), &key)
				p = path + "[" + keyText(key) + "]"
				next = itemByKey(node, key)
			case "v":
				p = path + "[" + rest + "]"
			case "i":
				p = path + "[" + rest + "]"
			default:
				continue
			}
			if path == "metadata" && kind == "f" && rest != "labels" && rest != "annotations" {
				continue
			}
			walk(p, next, child)
		}
	}
	walk("", obj, set)
	return out
}

// keyText is a list item's key as name=worker (several: a=1,b=2).
func keyText(key map[string]any) string {
	names := make([]string, 0, len(key))
	for k := range key {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%v", k, key[k]))
	}
	return strings.Join(parts, ",")
}

// itemByKey is the item of list whose fields are key's, or nil.
func itemByKey(list any, key map[string]any) any {
	items, _ := list.([]any)
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		match := true
		for k, v := range key {
			if fmt.Sprint(m[k]) != fmt.Sprint(v) {
				match = false
				break
			}
		}
		if match {
			return m
		}
	}
	return nil
}
