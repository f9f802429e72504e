// Package jsondepth bounds how deeply the JSON opkit reads from outside may
// nest: one limit, Max, for every such input.
//
// The contract:
//   - A webhook delivery's body, a handler's result and what a binding
//     context carries (the object, its old spec, children, related
//     objects, a delivery's payload) nest at most Max objects and arrays.
//     Past it, a delivery is refused with 400, a result is a failed run,
//     and a binding context is not handed to the handler: its run fails,
//     saying so.
//   - A binding context nests at most MaxContext: Max for what it carries,
//     and its own levels around it (context.related.ID[i] is three).
//   - Readers of the archive show what was stored before this limit was
//     set: anything nested deeper than Max is shown unindented or not at
//     all, never expanded line by line.
//
// Why a limit of our own: Go's encoding/json accepts 10,000 levels, so a
// 20 KB body of '[' can pass, and a reader that indents it writes 200 MB.
// 100 is what Ruby's JSON and protocol buffers allow by default, and ten
// times what a Kubernetes object or a GitHub payload needs.
package jsondepth

import "fmt"

// Max is the deepest nesting of objects and arrays that opkit reads: a
// delivery's body, a handler's result, an object in a binding context.
const Max = 100

// MaxContext is the deepest nesting of a binding context: what it
// carries, Max deep, inside its own three levels.
const MaxContext = Max + 3

// Error is JSON nested deeper than a limit.
type Error struct {
	// Limit is the limit passed.
	Limit int
	// Offset is the byte at which the nesting passed it.
	Offset int
}

func (e *Error) Error() string {
	return fmt.Sprintf("nested deeper than %d objects and arrays (at byte %d)", e.Limit, e.Offset)
}

// Check returns an *Error when data nests deeper than limit objects and
// arrays, nil otherwise. It counts brackets outside strings and stops at
// the first past the limit; it does not check that data is valid JSON
// (decoding it does that), and takes no stack however deep data goes.
func Check(data []byte, limit int) error {
	depth := 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte, a quote included
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > limit {
				return &Error{Limit: limit, Offset: i}
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// Value reports whether v, a value as encoding/json decodes it
// (map[string]any, []any and scalars), nests at most limit maps and
// slices. It walks no deeper than limit+1.
func Value(v any, limit int) bool {
	switch v := v.(type) {
	case map[string]any:
		if limit == 0 {
			return false
		}
		for _, e := range v {
			if !Value(e, limit-1) {
				return false
			}
		}
	case []any:
		if limit == 0 {
			return false
		}
		for _, e := range v {
			if !Value(e, limit-1) {
				return false
			}
		}
	}
	return true
}
