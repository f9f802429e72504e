// Package conversion converts custom resources between the versions of a
// definition, as its declared conversion says (definition.Conversion):
// the work of the CRD's conversion webhook, without the server (package
// internal/webhook serves it at definition.ConversionPath).
//
// Flow: the storage version is the hub. An object at version A converted
// to B goes A -> storage -> B; each step maps the declared fields (a CEL
// expression each way, self being the field's value and object the whole
// object), carries every other field over by the same path, and then
// walks the result against the target version's structural schema.
//
// Guarantees:
//   - Lossless round trips. What the target version cannot hold (a field
//     its schema has no place for, or a value of another type) is removed
//     and kept in the annotation opkit.dev/conversion.<version it came
//     from> (v1alpha1.ConversionAnnotationPrefix), and restored when the
//     object is converted back to that version. A mapped value whose round
//     trip is not exact (fromStorage(toStorage(x)) != x) is kept there
//     too, with the value it became, and restored only while the other
//     version still has that value: a change made through the other
//     version wins. The annotation is removed once restored, and absent
//     when nothing is kept. v1 -> v2 -> v1 and v2 -> v1 -> v2 give back
//     the object converted.
//   - metadata is never changed but for that annotation (the API server
//     refuses any other change but labels and annotations), so uid,
//     resourceVersion, name, namespace and the rest are kept; .status is
//     opkit's open object and carried over as it is.
//   - A conversion is a pure function of the definition and the object: a
//     Converter is safe for concurrent use.
//
// Caveats: a mapped field is a field of objects (not inside a list or a
// map); a list is converted as a whole, so a list item that the target
// version cannot hold keeps the whole list in the annotation. Kept fields
// restored into an object whose lists were shortened meanwhile are
// dropped where their index no longer exists. An annotation edited by
// hand into something that is not what opkit keeps is dropped, not an
// error: the object stays readable.
package conversion

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apiserver/pkg/cel/common"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// maxKept bounds the annotation: the API server refuses annotations of
// more than 256 KiB in all.
const maxKept = 200 << 10

// Converter converts the custom resources of one definition.
type Converter struct {
	group, kind string
	conv        *definition.Conversion
}

// New returns the converter of d, or an error when d declares no
// conversion.
func New(d *definition.Definition) (*Converter, error) {
	if d.Conversion == nil {
		return nil, fmt.Errorf("operator %s declares no conversion (spec.resource.versions[].conversion)", d.Operator.Name)
	}
	return &Converter{group: d.GVK.Group, kind: d.GVK.Kind, conv: d.Conversion}, nil
}

// Convert returns obj, a custom resource at any of the definition's
// versions, converted to version to; obj is not changed.
func (c *Converter) Convert(obj map[string]any, to string) (map[string]any, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Group != c.group {
		return nil, fmt.Errorf("apiVersion %q is not of group %s", apiVersion, c.group)
	}
	if kind, _ := obj["kind"].(string); kind != c.kind {
		return nil, fmt.Errorf("kind %q is not %s", kind, c.kind)
	}
	from, ok := c.conv.Versions[gv.Version]
	if !ok {
		return nil, fmt.Errorf("%s is not a version of %s (%s)", gv.Version, c.kind, c.versions())
	}
	target, ok := c.conv.Versions[to]
	if !ok {
		return nil, fmt.Errorf("%s is not a version of %s (%s)", to, c.kind, c.versions())
	}
	out := runtime.DeepCopyJSON(obj)
	if from.Name == to {
		return out, nil
	}
	hub := c.conv.Versions[c.conv.Storage]
	if from != hub {
		if out, err = c.step(out, from, hub, true); err != nil {
			return nil, fmt.Errorf("converting %s to %s: %w", from.Name, hub.Name, err)
		}
	}
	if target != hub {
		if out, err = c.step(out, hub, target, false); err != nil {
			return nil, fmt.Errorf("converting %s to %s: %w", hub.Name, target.Name, err)
		}
	}
	return out, nil
}

func (c *Converter) versions() string {
	return strings.Join(slices.Sorted(maps.Keys(c.conv.Versions)), ", ")
}

// pair is one mapping as a step sees it: from src in the version
// converted from to dst in the target.
type pair struct {
	m        *definition.FieldMapping
	src, dst []string
	// expr and backExpr name the expressions in errors.
	expr, backExpr string
	forward, back  func(self any, object map[string]any) (any, error)
	dstSchema      *structuralschema.Structural
}

// pairs are the mappings of spoke, the version that is not the hub, in
// the step's direction.
func pairs(spoke *definition.ConversionVersion, toHub bool) []pair {
	out := make([]pair, 0, len(spoke.Fields))
	for _, m := range spoke.Fields {
		to := func(self any, object map[string]any) (any, error) {
			return eval(m.ToStorage, self, m.Schema, object, m.ObjectSchema)
		}
		from := func(self any, object map[string]any) (any, error) {
			return eval(m.FromStorage, self, m.StorageSchema, object, m.StorageObjectSchema)
		}
		if toHub {
			out = append(out, pair{m: m, src: m.Path, dst: m.StoragePath, expr: exprName(m.ToStorage, m), backExpr: exprName(m.FromStorage, m), forward: to, back: from, dstSchema: m.StorageSchema})
		} else {
			out = append(out, pair{m: m, src: m.StoragePath, dst: m.Path, expr: exprName(m.FromStorage, m), backExpr: exprName(m.ToStorage, m), forward: from, back: to, dstSchema: m.Schema})
		}
	}
	return out
}

// eval computes a mapping's expression, nil meaning self.
func eval(e *definition.Expression, self any, selfSchema *structuralschema.Structural, object map[string]any, objectSchema *structuralschema.Structural) (any, error) {
	if e == nil {
		return runtime.DeepCopyJSONValue(self), nil
	}
	act := map[string]any{"self": typed(self, selfSchema), "object": typed(object, objectSchema)}
	return e.Eval(act)
}

func typed(v any, s *structuralschema.Structural) any {
	if s == nil || v == nil {
		return v
	}
	return common.UnstructuredToVal(v, &model.Structural{Structural: s})
}

// step converts obj from version from to version to, one of them the
// hub.
func (c *Converter) step(obj map[string]any, from, to *definition.ConversionVersion, toHub bool) (map[string]any, error) {
	spoke := from
	if !toHub {
		spoke = to
	}
	out := runtime.DeepCopyJSON(obj)
	out["apiVersion"] = c.group + "/" + to.Name
	restore, err := takeKept(out, to.Name)
	if err != nil {
		return nil, err
	}
	var kept kept
	ps := pairs(spoke, toHub)
	srcs := make([]any, len(ps))
	present := make([]bool, len(ps))
	for i, p := range ps {
		srcs[i], present[i] = get(obj, p.src)
		remove(out, p.src)
	}
	for i, p := range ps {
		if !present[i] {
			continue
		}
		v, err := p.forward(srcs[i], obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.expr, err)
		}
		if v == nil {
			continue
		}
		if !fits(p.dstSchema, v) {
			return nil, fmt.Errorf("%s gave %s, a %s, where %s is %s", p.expr, short(v), jsonType(v), strings.Join(p.dst, "."), schemaType(p.dstSchema))
		}
		set(out, p.dst, v)
	}
	// What the version converted to had, and this one could not hold.
	for ptr, v := range restore.Fields {
		merge(out, splitPointer(ptr), v)
	}
	for ptr, kv := range restore.Values {
		for i, p := range ps {
			if pointer(p.dst) != ptr {
				continue
			}
			if jsonEqual(srcs[i], kv.As) {
				if kv.Value == nil {
					remove(out, p.dst)
				} else {
					set(out, p.dst, kv.Value)
				}
			}
		}
	}
	// Mapped values that would not come back as they were.
	for i, p := range ps {
		dst, has := get(out, p.dst)
		if !present[i] && !has {
			continue
		}
		var back any
		if has {
			if back, err = p.back(dst, out); err != nil {
				return nil, fmt.Errorf("%s, converting %s back: %w", p.backExpr, short(dst), err)
			}
		}
		if !present[i] || !jsonEqual(back, srcs[i]) {
			if kept.Values == nil {
				kept.Values = map[string]keptValue{}
			}
			var src any
			if present[i] {
				src = srcs[i]
			}
			kept.Values[pointer(p.src)] = keptValue{Value: src, As: dst}
		}
	}
	// What the target cannot hold.
	for k, v := range out {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
			continue
		}
		prop, ok := to.Schema.Properties[k]
		if !ok {
			kept.field("/"+escape(k), v)
			delete(out, k)
			continue
		}
		if !prune(v, &prop, "/"+escape(k), &kept) {
			kept.field("/"+escape(k), v)
			delete(out, k)
		}
	}
	if err := putKept(out, obj, from.Name, kept); err != nil {
		return nil, err
	}
	return out, nil
}

// exprName names a mapping's expression in errors: its field in the
// definition.
func exprName(e *definition.Expression, m *definition.FieldMapping) string {
	if e == nil {
		return "the rename of " + m.Field + " to " + m.StorageField
	}
	return e.Field + " (" + e.Source + ")"
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 64 {
		return string(b[:61]) + "..."
	}
	return string(b)
}

// kept is the content of a conversion annotation: what the version the
// object came from had and its version cannot hold.
type kept struct {
	// Fields are values the version cannot hold, by JSON pointer (RFC
	// 6901) in the object.
	Fields map[string]any `json:"fields,omitempty"`
	// Values are mapped values whose round trip is not exact, by JSON
	// pointer in the version they came from, with the value they became.
	Values map[string]keptValue `json:"values,omitempty"`
}

type keptValue struct {
	Value any `json:"value"`
	// As is the value it became (null: none).
	As any `json:"as"`
}

func (k *kept) field(ptr string, v any) {
	if k.Fields == nil {
		k.Fields = map[string]any{}
	}
	k.Fields[ptr] = v
}

func (k kept) empty() bool { return len(k.Fields) == 0 && len(k.Values) == 0 }

func annotation(version string) string { return v1alpha1.ConversionAnnotationPrefix + version }

// takeKept removes the annotation kept for version from obj and returns
// its content.
func takeKept(obj map[string]any, version string) (kept, error) {
	var k kept
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	raw, ok := ann[annotation(version)].(string)
	if !ok {
		return k, nil
	}
	delete(ann, annotation(version))
	if err := utiljson.Unmarshal([]byte(raw), &k); err != nil {
		// Edited by hand into something else: what it kept is lost
		// already, and failing would make the object unreadable.
		return kept{}, nil
	}
	return k, nil
}

// putKept sets, or removes when k is empty, the annotation kept for
// version on out; orig is the object converted, whose metadata out
// keeps otherwise.
func putKept(out, orig map[string]any, version string, k kept) error {
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		if k.empty() {
			return nil
		}
		meta = map[string]any{}
		out["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if k.empty() {
		delete(ann, annotation(version))
	} else {
		b, err := json.Marshal(k)
		if err != nil {
			return err
		}
		if len(b) > maxKept {
			return fmt.Errorf("what %s has and the other version cannot hold is %d bytes, too large to keep in an annotation (at most %d)", version, len(b), maxKept)
		}
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[annotation(version)] = string(b)
	}
	// No empty annotations where the object had none but opkit's.
	if ann != nil && len(ann) == 0 && onlyOurs(orig) {
		delete(meta, "annotations")
	}
	return nil
}

// onlyOurs reports whether obj has no annotations, or conversion
// annotations alone; an empty map of its own is kept.
func onlyOurs(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	ann, had := meta["annotations"].(map[string]any)
	if !had {
		return true
	}
	if len(ann) == 0 {
		return false
	}
	for k := range ann {
		if !strings.HasPrefix(k, v1alpha1.ConversionAnnotationPrefix) {
			return false
		}
	}
	return true
}
