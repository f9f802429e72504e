package typegen

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// kind is what a type reference is.
type kind int

const (
	tString      kind = iota
	tInt              // bits: 32 or 64
	tFloat            //
	tBool             //
	tIntOrString      // x-kubernetes-int-or-string
	tJSON             // any JSON value: no type
	tMap              // an object of elem values; elem nil: any JSON values
	tList             // a list of elem
	tNamed            // a type declared in the file: name
	tSDK              // a type of the handler SDK: name (ObjectMeta, KubeObject, Delivery...)
	tConst            // a string that is always name: the object's apiVersion and kind
)

// typeRef is the type of a field or of a context's part.
type typeRef struct {
	kind     kind
	name     string
	elem     *typeRef
	nullable bool
	bits     int
}

// field is one property of an object type.
type field struct {
	json     string
	goName   string
	doc      string
	t        *typeRef
	required bool
}

// decl is a type declared in the generated file.
type decl interface{ declName() string }

// structDecl is an object type.
type structDecl struct {
	name string
	// what the type is, a noun phrase: "the spec of a Greeting".
	what string
	// doc is the schema's description, or "".
	doc    string
	fields []*field
	// open: the object keeps fields beside its own
	// (x-kubernetes-preserve-unknown-fields).
	open bool
	// holds: what is a plural ("the related objects of..."), which the
	// type holds rather than is.
	holds bool
	// key is, for the types of a context's related objects or children,
	// the context's field they type: related or children.
	key string
}

// enumDecl is a type of a few values.
type enumDecl struct {
	name, what, doc string
	base            kind // tString, tInt or tFloat
	bits            int
	values          []enumValue
}

type enumValue struct {
	// literal is the value as JSON: "en", 3.
	literal string
	// goName is the Go constant's name.
	goName string
}

// contextDecl is a handler's binding context: the SDK's context with the
// types of its object and old spec.
type contextDecl struct {
	name    string
	handler string
	// on are the handler's triggers.
	on []string
	// what says which runs it is for.
	what string
	// admission: the admission context of a validate or mutate handler.
	admission bool
	// object and old are nil for runs with no object (null).
	object, old *typeRef
	// related and children, when the operator declares some and the
	// handler's runs carry them; optional: absent from some runs
	// (delete).
	related, children *typeRef
	relatedOptional   bool
	// event: a run on event (the context's event is the delivery);
	// operatorWideSchedule: an operator-wide schedule's run (its
	// schedule is the slot). Both are for no object.
	event, operatorWideSchedule bool
	// result is the handler's result.
	result *resultDecl
}

// resultDecl is a handler's result: the SDK's result with the type of
// the status it may write.
type resultDecl struct {
	name, handler string
	// status is nil when a result may write none (a watched object, an
	// operator-wide run).
	status    *typeRef
	admission bool
	why       string // why no status, when status is nil
	// object is an admission handler's object type, which its patch
	// patches.
	object *typeRef
}

func (d *structDecl) declName() string  { return d.name }
func (d *enumDecl) declName() string    { return d.name }
func (d *contextDecl) declName() string { return d.name }
func (d *resultDecl) declName() string  { return d.name }

// model is what one file declares, in order: each definition's types
// top-down (the object, its spec and what the spec holds, its status...),
// then its handlers' contexts and results.
type model struct {
	decls    []decl
	byName   map[string]decl
	warnings []string
	// goWarnings are about names only the Go file has.
	goWarnings []string
	names      *namespace
}

func (m *model) warn(format string, args ...any) {
	m.warnings = append(m.warnings, fmt.Sprintf(format, args...))
}

func (m *model) goWarn(format string, args ...any) {
	m.goWarnings = append(m.goWarnings, "go: "+fmt.Sprintf(format, args...))
}

func (m *model) add(d decl) {
	m.decls = append(m.decls, d)
	m.byName[d.declName()] = d
}

// sdkRef is a type of the SDK.
func (m *model) sdkRef(name string) *typeRef {
	return &typeRef{kind: tSDK, name: name}
}

// reservedNames are the names the generated code uses in any language,
// which no declared type may take.
var reservedNames = []string{
	// Go
	"handler", "json",
	// Python
	"Any", "Literal", "NotRequired", "TypedDict", "Never", "opkit",
	// TypeScript
	"Record", "Omit", "Array", "Partial",
}

// build makes the model of the definitions.
func build(defs []*definition.Definition) (*model, error) {
	m := &model{byName: map[string]decl{}}
	m.names = newNamespace(m.warn, m.goWarn, reservedNames...)
	for _, d := range defs {
		if err := m.definition(d); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// definition adds the types of one definition.
func (m *model) definition(d *definition.Definition) error {
	op := d.Operator
	var object, spec *typeRef
	var writable func() *typeRef
	var related, children *typeRef
	if d.Owns() {
		r := op.Spec.Resource
		// The version handlers receive first: its names are unsuffixed.
		versions := slices.Clone(r.Versions)
		slices.SortStableFunc(versions, func(a, b v1alpha1.ResourceVersion) int {
			return boolOrder(a.Name != d.GVK.Version, b.Name != d.GVK.Version)
		})
		crd := d.CRD()
		for _, v := range versions {
			var root *apiextensionsv1.JSONSchemaProps
			for _, cv := range crd.Spec.Versions {
				if cv.Name == v.Name {
					root = cv.Schema.OpenAPIV3Schema
				}
			}
			if root == nil {
				return fmt.Errorf("operator %s: the CRD has no version %s", op.Name, v.Name)
			}
			base := r.Kind
			if v.Name != d.GVK.Version {
				base += pascal(v.Name)
			}
			gv := r.Group + "/" + v.Name
			o, s, w := m.version(d, base, gv, v, root)
			if v.Name == d.GVK.Version {
				object, spec, writable = o, s, w
			}
		}
		related = m.related(d, r.Kind)
		children = m.children(d, r.Kind)
	}
	// In the order declared.
	for _, dh := range op.Spec.Handlers {
		if i := slices.IndexFunc(d.Admission, func(h *definition.Handler) bool { return h.Name == dh.Name }); i >= 0 {
			m.admission(d, d.Admission[i], object)
		}
		if i := slices.IndexFunc(d.Handlers, func(h *definition.Handler) bool { return h.Name == dh.Name }); i >= 0 {
			m.handler(d, d.Handlers[i], object, spec, writable, related, children)
		}
	}
	return nil
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// version adds the types of one version of the custom resource: its
// object, spec and status, and the status handlers may write when it
// differs from the status (handlers' version only).
//
// writable is declared when first called: only when a handler writes the
// status.
func (m *model) version(d *definition.Definition, base, gv string, v v1alpha1.ResourceVersion, root *apiextensionsv1.JSONSchemaProps) (object, spec *typeRef, writable func() *typeRef) {
	kind := d.Operator.Spec.Resource.Kind
	of := fmt.Sprintf("a %s (%s)", kind, gv)
	if startsWithVowel(kind) {
		of = fmt.Sprintf("an %s (%s)", kind, gv)
	}
	objName := m.names.claim(typeName(base), "the object type of "+of)
	base = objName // Literal2Spec for Literal2
	obj := &structDecl{name: objName, what: of + ", as handlers receive it"}
	if v.Name != d.GVK.Version {
		obj.what = of
	}
	m.add(obj)

	specSchema := root.Properties["spec"]
	specRef := m.schemaType(&specSchema, base+"Spec", "spec", of, true)
	specDoc := "The object's desired state."
	if len(specSchema.Required) == 0 {
		specDoc += " Absent when the object was made without one (no spec field is required)."
	}
	statusSchema := root.Properties["status"]
	statusSchema = m.withState(d, statusSchema)
	statusRef := m.statusType(d, &statusSchema, base+"Status", of)
	obj.fields = []*field{
		{json: "apiVersion", goName: "APIVersion", t: &typeRef{kind: tConst, name: gv}, required: true},
		{json: "kind", goName: "Kind", t: &typeRef{kind: tConst, name: kind}, required: true},
		{json: "metadata", goName: "Metadata", t: m.sdkRef("ObjectMeta"), required: true},
		{json: "spec", goName: "Spec", t: specRef, required: len(specSchema.Required) > 0, doc: specDoc},
		{json: "status", goName: "Status", t: statusRef, doc: "What the operator and its handlers observed, written by opkit."},
	}
	object = &typeRef{kind: tNamed, name: objName}
	if v.Name == d.GVK.Version {
		var w *typeRef
		writable = func() *typeRef {
			if w == nil {
				w = m.writableStatus(d, &v, statusRef, base+"StatusUpdate", of)
			}
			return w
		}
	}
	return object, specRef, writable
}

func startsWithVowel(s string) bool {
	return s != "" && strings.ContainsRune("AEIOU", rune(s[0]))
}

// statusType declares the status as the CRD types it: the fields of
// spec.status with a scalar type, the version's statusSchema, and
// status.state for an operator with states. The fields opkit writes for
// itself (conditions, observedGeneration, opkit) are not declared.
func (m *model) statusType(d *definition.Definition, s *apiextensionsv1.JSONSchemaProps, name, of string) *typeRef {
	s = s.DeepCopy()
	for _, f := range d.Status {
		p, ok := s.Properties[f.Name]
		if !ok {
			// Not a scalar: the CRD leaves it untyped.
			p = apiextensionsv1.JSONSchemaProps{}
		}
		p.Description = computedDoc(f)
		if s.Properties == nil {
			s.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		}
		s.Properties[f.Name] = p
	}
	for k, p := range s.Properties {
		// The CRD's description of a field a transition sets.
		if field, ok := strings.CutPrefix(p.Description, "${...} "); ok {
			p.Description = "Written by opkit when a transition sets it (" + field + "). A handler's result may not set it."
			s.Properties[k] = p
		}
	}
	if len(s.Properties) == 0 {
		// No field declared: the status holds what the handlers write.
		return &typeRef{kind: tMap}
	}
	// The status is open: opkit keeps its fields and undeclared ones there.
	// Declared as closed, so that a misspelt field is caught: declare a
	// handler's fields in statusSchema.
	s.XPreserveUnknownFields = nil
	return m.schemaType(s, name, "status", of, true)
}

// computedDoc says where a spec.status field comes from.
func computedDoc(f *definition.StatusField) string {
	return "Written by opkit from spec.status." + f.Name + ": " + f.Template + ". A handler's result may not set it."
}

// withState types status.state more closely than the CRD does: the state
// names, and the fields opkit always writes required.
func (m *model) withState(d *definition.Definition, s apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	st, ok := s.Properties["state"]
	if d.States == nil || !ok {
		return s
	}
	s = *s.DeepCopy()
	st = *st.DeepCopy()
	st.Description = "The object's state in its life cycle (spec.states), written by opkit. A handler's result may not set it."
	var names []apiextensionsv1.JSON
	for _, state := range d.States.States {
		raw, _ := json.Marshal(state.Name)
		names = append(names, apiextensionsv1.JSON{Raw: raw})
	}
	t := reflect.TypeFor[v1alpha1.ObjectState]()
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(opts, "omitempty") {
			st.Required = append(st.Required, name)
		}
		p := st.Properties[name]
		switch name {
		case "name":
			p.Enum = names
			p.Description = "The current state."
		case "from":
			p.Description = "The state it left; absent for the initial state."
		case "seq":
			p.Description = "Counts the transitions: 1 for the initial state."
		case "since":
			p.Description = "When the object entered the state."
		case "choices":
			p.Description = "While the state needs a person: the states a decision may choose."
		case "question":
			p.Description = "While the state needs a person: what is asked."
		}
		st.Properties[name] = p
	}
	s.Properties["state"] = st
	return s
}

// writableStatus declares the status a handler's result may write, when
// it is not all of the status: opkit refuses the fields spec.status
// computes and status.state. Without a statusSchema it is open: the
// status keeps what handlers write.
func (m *model) writableStatus(d *definition.Definition, v *v1alpha1.ResourceVersion, status *typeRef, name, of string) *typeRef {
	sd, ok := m.byName[status.name].(*structDecl)
	if status.kind != tNamed || !ok {
		return status
	}
	computed := map[string]bool{}
	for _, f := range d.Status {
		computed[f.Name] = true
	}
	for _, st := range d.Operator.Spec.States {
		for _, t := range st.Transitions {
			for k := range t.Set {
				computed[k] = true
			}
		}
	}
	if d.States != nil {
		computed["state"] = true
	}
	var keep []*field
	for _, f := range sd.fields {
		if !computed[f.json] {
			c := *f
			keep = append(keep, &c)
		}
	}
	switch {
	case len(keep) == len(sd.fields) && !slices.ContainsFunc(keep, m.inPatch):
		return status
	case len(keep) < len(sd.fields) && (v.StatusSchema == nil || len(v.StatusSchema.Properties) == 0):
		return &typeRef{kind: tMap}
	}
	ref := &typeRef{kind: tNamed, name: m.names.claim(typeName(name), "the status a handler's result may write")}
	update := &structDecl{name: ref.name, what: "the status fields a handler's result may write to " + of, holds: true}
	if len(keep) < len(sd.fields) {
		update.what += ": those of statusSchema that opkit does not write itself (spec.status, status.state)"
	}
	if slices.ContainsFunc(keep, m.inPatch) {
		update.what += patchNote
	}
	m.add(update)
	update.fields = m.patchFields(keep, ref.name, "status", of)
	return ref
}

// patchNote says why a type a result writes has no required field.
const patchNote = ". Every field is optional: the status is a merge patch, and writes only the fields set"

// The status a result writes is a JSON merge patch of the object's: a
// field it leaves out is left as it is, objects are patched field by
// field, lists are written whole. Its types have no required field, so
// that a field not set is not written (Go writes a required field's zero
// value): an object type with one, here or in an object it holds, has a
// copy with every field optional.

// inPatch reports whether f's type, as a result writes it, differs from
// the object's: f is required, or its type holds a required field.
func (m *model) inPatch(f *field) bool {
	return f.required || m.patchDiffers(f.t)
}

// patchDiffers reports whether t holds, in its fields or a map's values
// (not in a list's items, which are written whole), a required field.
func (m *model) patchDiffers(t *typeRef) bool {
	switch {
	case t == nil:
		return false
	case t.kind == tMap:
		return m.patchDiffers(t.elem)
	case t.kind == tNamed:
		sd, ok := m.byName[t.name].(*structDecl)
		return ok && slices.ContainsFunc(sd.fields, m.inPatch)
	}
	return false
}

// patchFields are fields as a result writes them: each optional, of its
// patch type. name and path are their object's.
func (m *model) patchFields(fields []*field, name, path, of string) []*field {
	out := make([]*field, len(fields))
	for i, f := range fields {
		c := *f
		c.required = false
		c.t = m.patchType(f.t, name+pascalOrX(f.json), path+"."+f.json, of)
		out[i] = &c
	}
	return out
}

// patchType is t as a result writes it: t itself, or for an object type
// with a required field (in it or in an object it holds) a copy named
// name with every field optional.
func (m *model) patchType(t *typeRef, name, path, of string) *typeRef {
	if !m.patchDiffers(t) {
		return t
	}
	c := *t
	if t.kind == tMap {
		c.elem = m.patchType(t.elem, name+"Value", path+"[*]", of)
		return &c
	}
	sd := m.byName[t.name].(*structDecl)
	c.name = m.names.claim(typeName(name), path+" of "+of+" as a result writes it")
	patch := &structDecl{name: c.name, what: "the type of " + path + " in " + of + " as a result writes it" + patchNote, doc: sd.doc, open: sd.open}
	m.add(patch)
	patch.fields = m.patchFields(sd.fields, c.name, path, of)
	return &c
}

// schemaType is the type of a schema, declaring the named types it needs
// (name is the name of its own, path where it is in the object). top: the
// root of spec or status, which is always an object type.
func (m *model) schemaType(s *apiextensionsv1.JSONSchemaProps, name, path, of string, top bool) *typeRef {
	t := m.schemaTypeOf(s, name, path, of, top)
	t.nullable = s.Nullable
	return t
}

func (m *model) schemaTypeOf(s *apiextensionsv1.JSONSchemaProps, name, path, of string, top bool) *typeRef {
	preserve := s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
	switch {
	case s.XIntOrString:
		return &typeRef{kind: tIntOrString}
	case len(s.Enum) > 0 && (s.Type == "string" || s.Type == "integer" || s.Type == "number"):
		if e := m.enum(s, name, path, of); e != nil {
			return e
		}
	}
	switch s.Type {
	case "string":
		return &typeRef{kind: tString}
	case "integer":
		bits := 64
		if s.Format == "int32" {
			bits = 32
		}
		return &typeRef{kind: tInt, bits: bits}
	case "number":
		return &typeRef{kind: tFloat}
	case "boolean":
		return &typeRef{kind: tBool}
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			return &typeRef{kind: tList, elem: &typeRef{kind: tJSON}}
		}
		return &typeRef{kind: tList, elem: m.schemaType(s.Items.Schema, name+"Item", path+"[*]", of, false)}
	case "object":
	case "":
		if !top {
			return &typeRef{kind: tJSON}
		}
	default:
		return &typeRef{kind: tJSON}
	}
	// An object.
	if s.XEmbeddedResource && len(s.Properties) == 0 {
		return m.sdkRef("KubeObject")
	}
	if len(s.Properties) == 0 {
		switch {
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			return &typeRef{kind: tMap, elem: m.schemaType(s.AdditionalProperties.Schema, name+"Value", path+"[*]", of, false)}
		case !top || preserve || (s.AdditionalProperties != nil && s.AdditionalProperties.Allows):
			return &typeRef{kind: tMap}
		}
		// The root of an empty spec or status: a type with no field.
	}
	declName := m.names.claim(typeName(name), path+" of "+of)
	sd := &structDecl{name: declName, doc: s.Description, open: preserve}
	switch path {
	case "spec":
		sd.what = "the spec of " + of
	case "status":
		sd.what = "the status of " + of
	default:
		sd.what = "the type of " + path + " in " + of
	}
	m.add(sd)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[k]
		sd.fields = append(sd.fields, &field{
			json:     k,
			t:        m.schemaType(&p, name+pascalOrX(k), path+"."+k, of, false),
			required: required[k] || defaulted(path, &p),
			doc:      fieldDoc(&p),
		})
	}
	m.goFieldNames(sd)
	return &typeRef{kind: tNamed, name: declName}
}

// defaulted reports whether a spec field at path's object is always
// there as handlers receive it: the API server fills a field with a
// default (on write and on read from storage) unless it may be null. Not
// so in status, whose types are also what a result writes.
func defaulted(path string, p *apiextensionsv1.JSONSchemaProps) bool {
	return (path == "spec" || strings.HasPrefix(path, "spec.")) && p.Default != nil && len(p.Default.Raw) > 0 && !p.Nullable
}

// pascalOrX is a field's part of a type name: PascalCase, or X for a
// field without a letter or digit.
func pascalOrX(s string) string {
	if p := pascal(s); p != "" {
		return p
	}
	return "X"
}

// goFieldNames names the Go fields of sd, each unique.
func (m *model) goFieldNames(sd *structDecl) {
	ns := newNamespace(m.goWarn, m.goWarn)
	for _, f := range sd.fields {
		if f.goName != "" {
			ns.claim(f.goName, "")
			continue
		}
		what := fmt.Sprintf("the Go field of %s's %s", sd.name, quoted(f.json))
		name := goName(f.json)
		if !startsWithLetter(f.json) {
			m.goWarn("%s is named %s: a Go name starts with a letter", what, name)
		}
		if !jsonTagName(f.json) {
			m.goWarn("%s: encoding/json cannot name a field %s (its tags take letters, digits and !#$%%&()*+-./:;<=>?@[]^_{|}~ and space): it reads and writes the field as %s", what, quoted(f.json), name)
		}
		f.goName = ns.claim(name, what)
	}
}

// jsonTagName reports whether encoding/json takes s as a field's name in
// a struct tag.
func jsonTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c) && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
}

// enum declares the type of a schema with an enum of strings or numbers,
// or returns nil when the values are not all of its type.
func (m *model) enum(s *apiextensionsv1.JSONSchemaProps, name, path, of string) *typeRef {
	base := map[string]kind{"string": tString, "integer": tInt, "number": tFloat}[s.Type]
	var values []enumValue
	seen := map[string]bool{}
	for _, e := range s.Enum {
		var v any
		if err := json.Unmarshal(e.Raw, &v); err != nil {
			return nil
		}
		switch v := v.(type) {
		case nil:
			continue // a nullable enum's null: the field's nullable
		case string:
			if base != tString {
				return nil
			}
		case float64:
			if base == tString || (base == tInt && v != float64(int64(v))) {
				return nil
			}
		default:
			return nil
		}
		lit, _ := json.Marshal(v)
		if seen[string(lit)] {
			continue
		}
		seen[string(lit)] = true
		values = append(values, enumValue{literal: string(lit)})
	}
	if len(values) == 0 {
		return nil
	}
	bits := 64
	if s.Format == "int32" && base == tInt && !slices.ContainsFunc(values, outsideInt32) {
		// A value past int32 (the schema's format notwithstanding) would
		// not compile as an int32 constant.
		bits = 32
	}
	declName := m.names.claim(typeName(name), path+" of "+of)
	ed := &enumDecl{name: declName, what: "a value of " + path + " of " + of, doc: s.Description, base: base, bits: bits, values: values}
	for i := range ed.values {
		var v any
		_ = json.Unmarshal([]byte(ed.values[i].literal), &v)
		part := goName(fmt.Sprint(v))
		if f, ok := v.(float64); ok {
			part = strings.NewReplacer("-", "Minus", ".", "Point", "+", "").Replace(strconv.FormatFloat(f, 'f', -1, 64))
		}
		if s, ok := v.(string); ok && s == "" {
			part = "Empty"
		}
		ed.values[i].goName = m.names.claimGo(declName+strings.TrimPrefix(part, "X"), fmt.Sprintf("the Go constant of %s's value %s", declName, ed.values[i].literal))
	}
	m.add(ed)
	return &typeRef{kind: tNamed, name: declName}
}

// outsideInt32 reports whether an integer enum value does not fit in an
// int32.
func outsideInt32(v enumValue) bool {
	n, err := strconv.ParseFloat(v.literal, 64)
	return err != nil || n < math.MinInt32 || n > math.MaxInt32
}

// fieldDoc is a field's documentation: its description, then what its
// schema says that its type does not (format, default).
func fieldDoc(s *apiextensionsv1.JSONSchemaProps) string {
	parts := []string{strings.TrimSpace(s.Description)}
	switch s.Format {
	case "":
	case "date-time":
		parts = append(parts, "An RFC 3339 date and time, like 2026-11-25T08:00:00Z.")
	case "date":
		parts = append(parts, "An RFC 3339 date, like 2026-11-25.")
	case "int32", "int64", "float", "double":
	default:
		parts = append(parts, "Format: "+s.Format+".")
	}
	if s.XIntOrString {
		parts = append(parts, "An integer or a string.")
	}
	if s.Default != nil && len(s.Default.Raw) > 0 {
		parts = append(parts, "Default: "+compactJSON(s.Default.Raw)+".")
	}
	return strings.TrimSpace(strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), " "))
}

func compactJSON(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// related declares the related objects by id, or returns nil for none.
func (m *model) related(d *definition.Definition, kind string) *typeRef {
	if len(d.Related) == 0 {
		return nil
	}
	name := m.names.claim(typeName(kind+"Related"), "the related objects of "+kind)
	sd := &structDecl{name: name, what: "the related objects of a " + kind + " (spec.related), by id", key: "related", holds: true}
	related := slices.Clone(d.Related)
	slices.SortFunc(related, func(a, b *definition.Related) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range related {
		gk := r.GVK.GroupKind().String()
		f := &field{json: r.ID, t: m.sdkRef("KubeObject")}
		if r.List() {
			f.t = &typeRef{kind: tList, elem: f.t}
			f.required = true
			f.doc = fmt.Sprintf("The %s objects its selector matches, sorted by name; empty when none do.", gk)
		} else {
			f.doc = fmt.Sprintf("The %s it names; absent while it does not exist.", gk)
		}
		sd.fields = append(sd.fields, f)
	}
	m.goFieldNames(sd)
	m.add(sd)
	return &typeRef{kind: tNamed, name: name}
}

// children declares the children by id, or returns nil for none.
func (m *model) children(d *definition.Definition, kind string) *typeRef {
	if len(d.Children) == 0 {
		return nil
	}
	name := m.names.claim(typeName(kind+"Children"), "the children of "+kind)
	sd := &structDecl{name: name, what: "the children of a " + kind + " (spec.children), by id: each one's current object", key: "children", holds: true}
	ids := slices.Clone(d.Children)
	slices.SortFunc(ids, func(a, b *definition.Child) int { return strings.Compare(a.ID, b.ID) })
	for _, c := range ids {
		gk := c.GVK.GroupKind().String()
		sd.fields = append(sd.fields, &field{json: c.ID, t: m.sdkRef("KubeObject"), doc: fmt.Sprintf("The %s; absent until it is made (or while its includeWhen is false). Secrets carry no data.", gk)})
	}
	m.goFieldNames(sd)
	m.add(sd)
	return &typeRef{kind: tNamed, name: name}
}

// handlerBase is what a handler's type names start with: its name in
// PascalCase (greet-all: GreetAll).
func (m *model) handlerBase(h *definition.Handler) string {
	base := typeName(h.Name)
	if !startsWithLetter(h.Name) {
		m.warn("handler %s: its types are named %sContext and %sResult, as a name starts with a letter", h.Name, base, base)
	}
	return base
}

func startsWithLetter(s string) bool {
	return s != "" && unicode.IsLetter([]rune(s)[0])
}

// objectTriggers are those whose runs are for an object.
var objectTriggers = []string{
	v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnResume, v1alpha1.OnWhen,
	v1alpha1.OnEnter, v1alpha1.OnExit,
}

// handler declares a handler's context and result.
func (m *model) handler(d *definition.Definition, h *definition.Handler, object, spec *typeRef, writable func() *typeRef, related, children *typeRef) {
	base := m.handlerBase(h)
	c := &contextDecl{handler: h.Name, on: h.On}
	r := &resultDecl{handler: h.Name}
	onObject := slices.ContainsFunc(h.On, func(t string) bool { return slices.Contains(objectTriggers, t) })
	switch {
	case h.Fires(v1alpha1.OnEvent):
		c.event = true
		c.what = "a run on event: a delivery of the operator's sources, for no object"
		r.why = "a run on event is for no object"
	case d.Owns() && (onObject || h.Fires(v1alpha1.OnSchedule)):
		c.object, c.old = object, spec
		c.what = "a run for a " + d.GVK.Kind + " (" + strings.Join(h.On, ", ") + ")"
		r.status = writable()
		if related != nil {
			c.related = related
			c.relatedOptional = h.Fires(v1alpha1.OnDelete)
		}
		if children != nil {
			c.children = children
		}
	case d.Watch != nil:
		gk := d.Watch.GVK.Kind
		if d.Watch.GVK.Group != "" {
			gk += "." + d.Watch.GVK.Group
		}
		c.object = m.sdkRef("KubeObject")
		c.old = &typeRef{kind: tMap}
		c.what = "a run for a watched " + gk + " (" + strings.Join(h.On, ", ") + "); old is its projection"
		r.why = "opkit never writes to a watched object"
	default:
		c.operatorWideSchedule = true
		c.what = "an operator-wide schedule's run (schedule, manual), for no object"
		r.why = "an operator-wide schedule's run is for no object"
	}
	c.name = m.names.claim(base+"Context", "the context of handler "+h.Name)
	r.name = m.names.claim(base+"Result", "the result of handler "+h.Name)
	c.result = r
	m.add(c)
	m.add(r)
}

// admission declares an admission handler's context and result.
func (m *model) admission(d *definition.Definition, h *definition.Handler, object *typeRef) {
	base := m.handlerBase(h)
	trigger := strings.Join(h.On, ", ")
	c := &contextDecl{handler: h.Name, on: h.On, admission: true, object: object, what: "an admission call (" + trigger + ") for a " + d.GVK.Kind}
	r := &resultDecl{handler: h.Name, admission: true, object: object, why: "an admission handler answers: allowed, message, patch, warnings"}
	c.name = m.names.claim(base+"Context", "the context of handler "+h.Name)
	r.name = m.names.claim(base+"Result", "the result of handler "+h.Name)
	c.result = r
	m.add(c)
	m.add(r)
}

// refs are the declared types t refers to.
func (t *typeRef) refs() []string {
	switch {
	case t == nil:
		return nil
	case t.kind == tNamed:
		return []string{t.name}
	case t.elem != nil:
		return t.elem.refs()
	}
	return nil
}

// deps are the declared types d refers to, in order.
func deps(d decl) []string {
	var out []string
	switch d := d.(type) {
	case *structDecl:
		for _, f := range d.fields {
			out = append(out, f.t.refs()...)
		}
	case *contextDecl:
		for _, t := range []*typeRef{d.object, d.old, d.related, d.children} {
			out = append(out, t.refs()...)
		}
	case *resultDecl:
		out = append(out, d.status.refs()...)
	}
	return out
}

// dependencyOrder is the declarations with each after those it refers to
// (Python evaluates its type aliases as it reads them), otherwise in
// order.
func (m *model) dependencyOrder() []decl {
	var out []decl
	done := map[string]bool{}
	var visit func(d decl)
	visit = func(d decl) {
		if done[d.declName()] {
			return
		}
		done[d.declName()] = true
		for _, dep := range deps(d) {
			if dd, ok := m.byName[dep]; ok {
				visit(dd)
			}
		}
		out = append(out, d)
	}
	for _, d := range m.decls {
		visit(d)
	}
	return out
}
