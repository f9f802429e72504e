package definition

import (
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Most expressions of a definition read one field: ${self.metadata.name},
// ${self.spec.text}, ${children.db.status.host}. Such an expression is
// evaluated by reading the field, without running its CEL program: on a
// drain this was a tenth of the engine's CPU, most of it the program's
// cost tracking, which a field read has no need of.
//
// The result is the program's in every case: the read is taken only when
// it finds a string, an integer, a float or a bool of the type the
// expression was checked to have (so a string with a format, which CEL
// reads as a timestamp or bytes, is left to the program); a field that is
// missing, null, an object or a list, and every other expression, goes to
// the program, which gives the value or the error it always gave.

// fieldPath returns the variable and the fields of an expression that is
// a chain of field selections on self, children or related, e.g.
// [self metadata name]; nil for any other expression, or one whose type a
// field read cannot give.
func fieldPath(ast *cel.Ast) []string {
	switch ast.OutputType().Kind() {
	case types.StringKind, types.IntKind, types.DoubleKind, types.BoolKind, types.DynKind, types.AnyKind:
	default:
		return nil
	}
	var path []string
	e := ast.NativeRep().Expr()
	for e.Kind() == celast.SelectKind {
		sel := e.AsSelect()
		// A name with "__" may be an escaped one (x__dash__y reads x-y):
		// the program knows.
		if sel.IsTestOnly() || strings.Contains(sel.FieldName(), "__") {
			return nil
		}
		path = append(path, sel.FieldName())
		e = sel.Operand()
	}
	if e.Kind() != celast.IdentKind || len(path) == 0 {
		return nil
	}
	switch root := e.AsIdent(); root {
	case "self", "children", "related":
		path = append(path, root)
	default:
		return nil
	}
	slices.Reverse(path)
	return path
}

// readField reads e's field in activation; ok is false when the program
// must evaluate e instead (see fieldPath).
func (e *Expression) readField(activation map[string]any) (v any, ok bool) {
	if e.path == nil {
		return nil, false
	}
	cur := unwrap(activation[e.path[0]])
	for _, f := range e.path[1:] {
		m, isMap := cur.(map[string]any)
		if !isMap {
			return nil, false
		}
		if cur, ok = m[f]; !ok {
			return nil, false
		}
		cur = unwrap(cur)
	}
	switch e.Type.Kind() {
	case types.StringKind:
		_, ok = cur.(string)
	case types.IntKind:
		_, ok = cur.(int64)
	case types.DoubleKind:
		_, ok = cur.(float64)
	case types.BoolKind:
		_, ok = cur.(bool)
	default: // dyn: as the program would convert it back
		switch cur.(type) {
		case string, int64, float64, bool:
			ok = true
		}
	}
	return cur, ok
}

// unwrap gives the value under a typed CEL value (an object read with its
// schema), or v itself.
func unwrap(v any) any {
	if rv, ok := v.(ref.Val); ok {
		return rv.Value()
	}
	return v
}
