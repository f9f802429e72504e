package compare

import (
	"fmt"
	"maps"
	"slices"
)

// Lists says how Walk compares two lists.
type Lists int

const (
	// ListsWhole compares a list as one value.
	ListsWhole Lists = iota
	// ListsByIndex compares two lists of one length item by item
	// (path[i]), others as one value.
	ListsByIndex
	// ListsByKey compares two lists whose items each have a distinct id,
	// or else name, item by item under it (path[content]): an item added
	// or removed is one change. Other lists as ListsByIndex.
	ListsByKey
)

// Walk calls change for each difference from a to b under path, in a
// stable order: maps are compared key by key (sorted), lists as lists
// says, anything else as a whole, numbers by value (SameValue). op is
// "add" (was is nil), "remove" (now is nil) or "change"; a key's path is
// path.key, or key when path is "".
func Walk(path string, a, b any, lists Lists, change func(op, path string, was, now any)) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := slices.Collect(maps.Keys(am))
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			Walk(join(path, k), am[k], bm[k], lists, change)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && lists != ListsWhole {
		var ak, bk *keyedList
		if lists == ListsByKey {
			ak, bk = keyed(al), keyed(bl)
		}
		if ak != nil && bk != nil {
			keys := slices.Clone(ak.order)
			for _, k := range bk.order {
				if _, ok := ak.items[k]; !ok {
					keys = append(keys, k)
				}
			}
			for _, k := range keys {
				Walk(path+"["+k+"]", ak.items[k], bk.items[k], lists, change)
			}
			return
		}
		if len(al) == len(bl) {
			for i := range al {
				Walk(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], lists, change)
			}
			return
		}
	}
	switch {
	case a == nil && b == nil:
	case a == nil:
		change("add", path, nil, b)
	case b == nil:
		change("remove", path, a, nil)
	case !SameValue(a, b):
		change("change", path, a, b)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// keyedList is a list whose items each have a distinct id or name.
type keyedList struct {
	order []string
	items map[string]any
}

// keyed indexes a list by its items' id, or else name; nil when an item
// has neither, or two share one. An empty list is keyed by anything.
func keyed(list []any) *keyedList {
	if len(list) == 0 {
		return &keyedList{items: map[string]any{}}
	}
	for _, field := range []string{"id", "name"} {
		l := &keyedList{items: map[string]any{}}
		for _, item := range list {
			m, _ := item.(map[string]any)
			k, _ := m[field].(string)
			if _, dup := l.items[k]; k == "" || dup {
				l = nil
				break
			}
			l.order = append(l.order, k)
			l.items[k] = item
		}
		if l != nil {
			return l
		}
	}
	return nil
}
