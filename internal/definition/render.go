package definition

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/cel/common"
)

// Vars are the values expressions see: self is the custom resource,
// Children holds the current object of each child that exists, and
// Related each related object that exists (map[string]any) or each list
// of them ([]any).
type Vars struct {
	Self     map[string]any
	Children map[string]map[string]any
	Related  map[string]any
}

// activation binds self, children and related; an object whose schema is
// known is read through it, so that its fields have the types the
// expressions were checked with (a date-time string is a timestamp, for
// one).
func (v Vars) activation(schemas map[string]common.Schema) map[string]any {
	children := make(map[string]any, len(v.Children))
	for id, obj := range v.Children {
		children[id] = typed(obj, schemas[id])
	}
	related := make(map[string]any, len(v.Related))
	for id, val := range v.Related {
		related[id] = typedAny(val, schemas[relatedKey(id)])
	}
	return map[string]any{"self": typed(v.Self, schemas[selfKey]), "children": children, "related": related}
}

// selfKey is the key of self's schema among a definition's value schemas,
// for a watched kind's: a custom resource is read as it is.
const selfKey = "self:"

// typedAny is typed for an object or a list of objects.
func typedAny(v any, s common.Schema) any {
	if s == nil {
		return v
	}
	return common.UnstructuredToVal(v, s)
}

func typed(obj map[string]any, s common.Schema) any {
	if s == nil {
		return obj
	}
	return common.UnstructuredToVal(obj, s)
}

// ErrChildMissing is returned (wrapped) when an expression reads a child
// that does not exist yet; the caller waits for it rather than failing.
var ErrChildMissing = errors.New("a child it reads does not exist yet")

// ErrRelatedMissing is returned (wrapped) when an expression reads a
// related object that does not exist. It wraps ErrChildMissing: callers
// wait for it as for a child.
var ErrRelatedMissing = fmt.Errorf("a related object it reads does not exist (%w)", ErrChildMissing)

// Eval evaluates the expression and returns a JSON-compatible value:
// string, int64, float64, bool, nil, []any or map[string]any.
func (e *Expression) Eval(activation map[string]any) (any, error) {
	if v, ok := e.readField(activation); ok {
		return v, nil
	}
	out, _, err := e.Program.Eval(activation)
	if err != nil {
		if children, _ := activation["children"].(map[string]any); children != nil {
			for _, id := range e.Children {
				if _, ok := children[id]; !ok {
					return nil, fmt.Errorf("%s: ${%s}: children.%s: %w", e.Field, e.Source, id, ErrChildMissing)
				}
			}
		}
		if related, _ := activation["related"].(map[string]any); related != nil {
			for _, id := range e.Related {
				if _, ok := related[id]; !ok {
					return nil, fmt.Errorf("%s: ${%s}: related.%s: %w", e.Field, e.Source, id, ErrRelatedMissing)
				}
			}
		}
		return nil, fmt.Errorf("%s: ${%s}: %w", e.Field, e.Source, err)
	}
	v, err := native(out)
	if err != nil {
		return nil, fmt.Errorf("%s: ${%s}: %w", e.Field, e.Source, err)
	}
	return v, nil
}

// Render returns the child object for vars: a copy of the template with
// every expression evaluated.
func (c *Child) Render(vars Vars) (map[string]any, error) {
	return renderTemplate(c.Template, c.Slots, vars.activation(c.schemas))
}

// renderTemplate returns a copy of template with each of its slots
// evaluated over act and set at its path.
func renderTemplate(template map[string]any, slots []*Slot, act map[string]any) (map[string]any, error) {
	obj := runtime.DeepCopyJSON(template)
	for _, s := range slots {
		v, err := s.eval(act)
		if err != nil {
			return nil, err
		}
		setPath(obj, s.Path, v)
	}
	return obj, nil
}

// Included reports whether every includeWhen expression holds.
func (c *Child) Included(vars Vars) (bool, error) {
	return allTrue(c.IncludeWhen, vars.activation(c.schemas))
}

// Ready reports whether every readyWhen expression holds for obj, the
// child's current object. A child without readyWhen is ready when it exists.
func (c *Child) Ready(obj map[string]any) (bool, error) {
	return allTrue(c.ReadyWhen, map[string]any{"self": typed(obj, c.schemas[c.ID])})
}

func allTrue(exprs []*Expression, act map[string]any) (bool, error) {
	for _, e := range exprs {
		if b, err := e.evalBool(act); err != nil || !b {
			return false, err
		}
	}
	return true, nil
}

// evalBool evaluates a condition: an error when it gives anything but a
// bool.
func (e *Expression) evalBool(act map[string]any) (bool, error) {
	v, err := e.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: ${%s} gave %v, not a bool", e.Field, e.Source, v)
	}
	return b, nil
}

// Evaluate returns the status field's value.
func (s *StatusField) Evaluate(vars Vars) (any, error) {
	return s.Slot.eval(vars.activation(s.schemas))
}

// eval computes the slot: one expression gives its value, several are
// spliced with the literals into a string.
func (s *Slot) eval(act map[string]any) (any, error) {
	if len(s.parts) == 1 && s.parts[0].expr != nil {
		return s.parts[0].expr.Eval(act)
	}
	var b strings.Builder
	for _, p := range s.parts {
		if p.expr == nil {
			b.WriteString(p.literal)
			continue
		}
		v, err := p.expr.Eval(act)
		if err != nil {
			return nil, err
		}
		str, err := spliceString(v)
		if err != nil {
			return nil, fmt.Errorf("%s: ${%s}: %w", p.expr.Field, p.expr.Source, err)
		}
		b.WriteString(str)
	}
	return b.String(), nil
}

func spliceString(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case int64:
		return strconv.FormatInt(t, 10), nil
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(t), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("a %T cannot be part of a string", v)
}

// setPath stores v at path in obj; the path exists, since it was found in
// the template.
func setPath(obj map[string]any, path []any, v any) {
	var cur any = obj
	for i, p := range path {
		last := i == len(path)-1
		switch k := p.(type) {
		case string:
			m := cur.(map[string]any)
			if last {
				m[k] = v
				return
			}
			cur = m[k]
		case int:
			l := cur.([]any)
			if last {
				l[k] = v
				return
			}
			cur = l[k]
		}
	}
}

// native converts a CEL value to a JSON-compatible Go value, keeping
// integers as int64.
func native(v ref.Val) (any, error) {
	switch v.Type() {
	case types.NullType:
		return nil, nil
	case types.BoolType, types.StringType, types.DoubleType:
		return v.Value(), nil
	case types.IntType:
		return v.Value().(int64), nil
	case types.UintType:
		return int64(v.Value().(uint64)), nil
	case types.BytesType:
		return string(v.Value().([]byte)), nil
	case types.TimestampType:
		return v.Value().(time.Time).UTC().Format(time.RFC3339), nil
	case types.DurationType:
		return v.Value().(time.Duration).String(), nil
	}
	if l, ok := v.(traits.Lister); ok {
		n := int(l.Size().(types.Int))
		out := make([]any, 0, n)
		for i := range n {
			item, err := native(l.Get(types.Int(i)))
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.Value().(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k.Value())
			}
			item, err := native(m.Get(k))
			if err != nil {
				return nil, err
			}
			out[ks] = item
		}
		return out, nil
	}
	// Objects of the schema's types are maps at run time; anything else is
	// passed on only if it is already JSON-compatible.
	switch t := v.Value().(type) {
	case map[string]any, []any, string, int64, float64, bool:
		return runtime.DeepCopyJSONValue(t), nil
	}
	return nil, fmt.Errorf("a value of type %s cannot be written to an object", v.Type().TypeName())
}
