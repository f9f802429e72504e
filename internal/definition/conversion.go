package definition

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Conversion is how the custom resource's versions convert to one
// another, as declared by spec.resource.versions[i].conversion: each
// version converts to and from the storage version, the hub, and a
// conversion from A to B goes A -> storage -> B. Package
// internal/conversion does the converting.
type Conversion struct {
	// Storage is the storage version's name.
	Storage string
	// Versions are every version of the resource, by name.
	Versions map[string]*ConversionVersion
}

// ConversionVersion is one version as conversion sees it.
type ConversionVersion struct {
	Name string
	// Schema is the structural schema of the whole object at this
	// version: apiVersion, kind and metadata, .spec as declared (open
	// when the version has no schema) and .status, opkit's open object.
	Schema *structuralschema.Structural
	// Fields are the version's field mappings to the storage version, in
	// the order declared; none for the storage version.
	Fields []*FieldMapping
}

// FieldMapping is one compiled spec.resource.versions[i].conversion.fields[j].
type FieldMapping struct {
	// Field is the path in its version (spec.size), Path its names.
	Field string
	Path  []string
	// StorageField is the path in the storage version, StoragePath its
	// names.
	StorageField string
	StoragePath  []string
	// ToStorage and FromStorage are the expressions each way; nil for
	// self (a rename). Their variables are self and object.
	ToStorage, FromStorage *Expression
	// Schema and StorageSchema are the field's schema in each version;
	// nil where it is not typed (under x-kubernetes-preserve-unknown-fields).
	Schema, StorageSchema *structuralschema.Structural
	// ObjectSchema and StorageObjectSchema are the whole object's in each
	// version, to type object.
	ObjectSchema, StorageObjectSchema *structuralschema.Structural
}

// ConversionPath is the path at which the engine's webhook server serves
// an operator's conversion webhook, /convert/<operator>: the path of the
// URL or Service in the CRD's conversion clientConfig (CRDOptions).
func ConversionPath(operator string) string { return "/convert/" + operator }

// compileConversion checks every version's conversion and, when any
// declares one, sets d.Conversion. storage is the storage version. It
// warns of a version whose schema differs from the storage version's and
// that declares no conversion: the API server then only rewrites
// apiVersion, and what the storage version has no place for is lost.
func compileConversion(l *errorList, d *Definition, storage *v1alpha1.ResourceVersion) {
	versions := d.Operator.Spec.Resource.Versions
	declared := slices.ContainsFunc(versions, func(v v1alpha1.ResourceVersion) bool { return v.Conversion != nil })
	if len(versions) < 2 && !declared {
		return
	}
	schemas := map[string]*structuralschema.Structural{}
	for i, v := range versions {
		s, err := objectStructural(v.Schema, nil)
		if err != nil {
			l.add(fmt.Sprintf("spec.resource.versions[%d].schema", i), "%v", err)
			continue
		}
		schemas[v.Name] = s
	}
	hub := schemas[storage.Name]
	if hub == nil {
		return
	}
	conv := &Conversion{Storage: storage.Name, Versions: map[string]*ConversionVersion{}}
	for i, v := range versions {
		field := fmt.Sprintf("spec.resource.versions[%d]", i)
		s := schemas[v.Name]
		if s == nil {
			continue
		}
		cv := &ConversionVersion{Name: v.Name, Schema: s}
		conv.Versions[v.Name] = cv
		switch {
		case v.Name == storage.Name && v.Conversion != nil:
			l.add(field+".conversion", "%s is the storage version, the hub every other version converts to and from: declare conversion on the other versions", v.Name)
		case v.Name == storage.Name:
		case v.Conversion == nil:
			if diff := schemaDifferences(s, hub, v.Name, storage.Name, func(string) bool { return false }); len(diff) > 0 {
				var msgs []string
				for _, x := range diff[:min(len(diff), 5)] {
					msgs = append(msgs, x.msg)
				}
				l.warn(d, field+".schema", "differs from the schema of %s, the storage version (%s), and %s declares no conversion: the API server only rewrites apiVersion, and drops what a version has no place for; declare conversion: {} to keep it (in an annotation), and map renamed or retyped fields under conversion.fields (docs/conversion.md)",
					storage.Name, strings.Join(msgs, "; "), v.Name)
			}
		default:
			cv.Fields = compileMappings(l, field+".conversion", v, s, storage.Name, hub)
		}
	}
	if declared {
		d.Conversion = conv
	}
}

// objectStructural is the structural schema of a whole object whose
// .spec has the schema spec, and .status the schema status (nil: an
// open object).
func objectStructural(spec, status *apiextensionsv1.JSONSchemaProps) (*structuralschema.Structural, error) {
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(selfSchema(spec, status), &internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, fmt.Errorf("the schema is not structural: %w", err)
	}
	return s, nil
}

// compileMappings checks and compiles one version's field mappings.
func compileMappings(l *errorList, field string, v v1alpha1.ResourceVersion, s *structuralschema.Structural, storage string, hub *structuralschema.Structural) []*FieldMapping {
	selfRoot := model.SchemaDeclType(s, false).MaybeAssignTypeName("__opkit_" + v.Name)
	hubRoot := model.SchemaDeclType(hub, false).MaybeAssignTypeName("__opkit_" + storage)
	var out []*FieldMapping
	var fields, storageFields []string
	for j, f := range v.Conversion.Fields {
		ff := fmt.Sprintf("%s.fields[%d]", field, j)
		m := &FieldMapping{Field: f.Field, StorageField: f.StorageField, ObjectSchema: s, StorageObjectSchema: hub}
		if m.StorageField == "" {
			m.StorageField = m.Field
		}
		var selfType, hubType *apiservercel.DeclType
		var ok bool
		m.Path, m.Schema, selfType, ok = resolveField(l, ff+".field", f.Field, v.Name, s, selfRoot)
		if !ok {
			continue
		}
		sf := ff + ".storageField"
		if f.StorageField == "" {
			sf = ff + ".field"
		}
		m.StoragePath, m.StorageSchema, hubType, ok = resolveField(l, sf, m.StorageField, storage, hub, hubRoot)
		if !ok {
			continue
		}
		if f.StorageField == "" && f.ToStorage == "" && f.FromStorage == "" {
			l.add(ff, "maps %s to itself unchanged, which fields not mapped do already: give storageField, or toStorage and fromStorage", f.Field)
			continue
		}
		if (f.ToStorage == "") != (f.FromStorage == "") {
			l.add(ff, "give toStorage and fromStorage together: each direction needs its own expression")
			continue
		}
		if i := overlapping(fields, m.Field); i >= 0 {
			l.add(ff+".field", "%s is mapped by fields[%d] already (%s): each field is mapped once", m.Field, i, fields[i])
			continue
		}
		if i := overlapping(storageFields, m.StorageField); i >= 0 {
			l.add(sf, "%s is the storage field of fields[%d] already (%s): each storage field is converted from one field", m.StorageField, i, storageFields[i])
			continue
		}
		fields, storageFields = append(fields, m.Field), append(storageFields, m.StorageField)
		if f.ToStorage != "" {
			m.ToStorage = compileConversionExpr(l, ff+".toStorage", f.ToStorage, selfRoot, selfType, hubType, storage, m.StorageField)
			m.FromStorage = compileConversionExpr(l, ff+".fromStorage", f.FromStorage, hubRoot, hubType, selfType, v.Name, m.Field)
			if m.ToStorage == nil || m.FromStorage == nil {
				continue
			}
		} else if !convertible(selfType.CelType(), hubType.CelType()) || !convertible(hubType.CelType(), selfType.CelType()) {
			l.add(ff, "%s is %s in %s and %s is %s in %s: a rename needs the same type; give toStorage and fromStorage", m.Field, typeName(selfType), v.Name, m.StorageField, typeName(hubType), storage)
			continue
		}
		out = append(out, m)
	}
	// Fields carried over by the same path must have the same type in
	// both versions.
	for _, d := range schemaDifferences(s, hub, v.Name, storage, func(path string) bool { return overlapping(fields, path) >= 0 || overlapping(storageFields, path) >= 0 }) {
		if d.typed {
			l.add(field, "%s: a field carried over keeps its value, which the other version cannot hold; map it under fields, with toStorage and fromStorage", d.msg)
		}
	}
	return out
}

// overlapping returns the index of the path in paths that is p, or
// contains it, or is inside it; -1 for none.
func overlapping(paths []string, p string) int {
	for i, q := range paths {
		if q == p || strings.HasPrefix(p, q+".") || strings.HasPrefix(q, p+".") {
			return i
		}
	}
	return -1
}

// resolveField finds a field path (spec.a.b) in a version's schema: its
// names, its schema (nil when untyped) and its CEL type.
func resolveField(l *errorList, field, path, version string, root *structuralschema.Structural, rootType *apiservercel.DeclType) ([]string, *structuralschema.Structural, *apiservercel.DeclType, bool) {
	names := strings.Split(path, ".")
	if len(names) < 2 || names[0] != "spec" || slices.Contains(names, "") {
		l.add(field, "%q: expected a path of the spec's fields from the object's root, like spec.size", path)
		return nil, nil, nil, false
	}
	s, t := root, rootType
	for i, name := range names {
		if s == nil {
			return names, nil, apiservercel.DynType, true // untyped below
		}
		if s.Type == "array" || (s.AdditionalProperties != nil && len(s.Properties) == 0) {
			l.add(field, "%s is a %s: a conversion maps fields of objects, not inside lists or maps; map %s itself", strings.Join(names[:i], "."), listOrMap(s), strings.Join(names[:i], "."))
			return nil, nil, nil, false
		}
		prop, ok := s.Properties[name]
		if !ok {
			if s.XPreserveUnknownFields {
				return names, nil, apiservercel.DynType, true
			}
			l.add(field, "%s has no field %s in %s (it has: %s)", strings.Join(names[:i], "."), name, version, strings.Join(slices.Sorted(maps.Keys(s.Properties)), ", "))
			return nil, nil, nil, false
		}
		s = &prop
		if t != nil && t.Fields != nil {
			if f, ok := t.Fields[name]; ok {
				t = f.Type
			} else {
				t = apiservercel.DynType
			}
		} else {
			t = apiservercel.DynType
		}
	}
	return names, s, t, true
}

func listOrMap(s *structuralschema.Structural) string {
	if s.Type == "array" {
		return "list"
	}
	return "map"
}

// compileConversionExpr compiles one direction of a mapping: self is of
// type selfType in an object of type root, and the result must fit
// target, the other version's field (targetField in targetVersion).
func compileConversionExpr(l *errorList, field, src string, root, selfType, target *apiservercel.DeclType, targetVersion, targetField string) *Expression {
	env, err := conversionEnv(root, selfType)
	if err != nil {
		l.add(field, "%v", err)
		return nil
	}
	e := &Expression{Source: src, Field: field}
	if err := compile(env, e); err != nil {
		l.add(field, "%v", err)
		return nil
	}
	if !convertible(e.Type, target.CelType()) {
		l.add(field, "%q gives %s, but %s is %s in %s", src, e.Type, targetField, typeName(target), targetVersion)
		return nil
	}
	return e
}

// conversionEnv is the environment of a conversion expression: self is
// the field's value, object the whole object.
func conversionEnv(root, self *apiservercel.DeclType) (*cel.Env, error) {
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	set, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable("self", self.CelType()), cel.Variable("object", root.CelType())},
		DeclTypes:         []*apiservercel.DeclType{root},
	})
	if err != nil {
		return nil, err
	}
	return set.NewExpressionsEnv(), nil
}

// convertible reports whether a value of CEL type out can be written to
// a field of type want: the same kind, an integer for a number, a string
// for a timestamp or duration (formatted), a map for an object; dyn
// either way is checked when converting.
func convertible(out, want *cel.Type) bool {
	switch {
	case out.Kind() == types.DynKind || out.Kind() == types.AnyKind || want.Kind() == types.DynKind || want.Kind() == types.AnyKind:
		return true
	case out.Kind() == types.NullTypeKind:
		return true // leaves the field out
	}
	switch want.Kind() {
	case types.DoubleKind:
		return out.Kind() == types.DoubleKind || out.Kind() == types.IntKind || out.Kind() == types.UintKind
	case types.IntKind:
		return out.Kind() == types.IntKind || out.Kind() == types.UintKind
	case types.TimestampKind, types.DurationKind, types.StringKind:
		return out.Kind() == want.Kind() || out.Kind() == types.StringKind ||
			(want.Kind() == types.StringKind && (out.Kind() == types.TimestampKind || out.Kind() == types.DurationKind))
	case types.StructKind, types.MapKind:
		return out.Kind() == types.StructKind || out.Kind() == types.MapKind
	}
	return out.Kind() == want.Kind()
}

// typeName names a field's type for a message: string, integer, object...
func typeName(t *apiservercel.DeclType) string {
	switch t.CelType().Kind() {
	case types.StructKind:
		return "an object"
	case types.MapKind:
		return "a map"
	case types.ListKind:
		return "a list"
	case types.DynKind, types.AnyKind:
		return "untyped"
	case types.IntKind:
		return "an integer"
	case types.DoubleKind:
		return "a number"
	case types.BoolKind:
		return "a boolean"
	case types.TimestampKind:
		return "a date-time"
	}
	return "a " + t.CelType().String()
}

// schemaDiff is one way in which two versions' .spec differ.
type schemaDiff struct {
	path string
	// typed: the field has another type in the other version; otherwise
	// the other version has no place for it.
	typed bool
	msg   string
}

// schemaDifferences lists how a version's .spec (s) differs from the
// storage version's (hub), for fields carried over by the same path: a
// field of another type, or, both ways, a field the other version has no
// place for. mapped leaves out mapped paths.
func schemaDifferences(s, hub *structuralschema.Structural, version, storage string, mapped func(path string) bool) []schemaDiff {
	var out []schemaDiff
	var walk func(path string, a, b *structuralschema.Structural, aName, bName string)
	walk = func(path string, a, b *structuralschema.Structural, aName, bName string) {
		if a == nil || b == nil || mapped(path) {
			return // untyped: holds anything
		}
		if a.Type != b.Type && a.Type != "" && b.Type != "" {
			if aName == version { // reported once, from this version's side
				out = append(out, schemaDiff{path: path, typed: true, msg: fmt.Sprintf("%s is %s in %s and %s in %s", path, article(a.Type), version, article(b.Type), storage)})
			}
			return
		}
		for _, name := range slices.Sorted(maps.Keys(a.Properties)) {
			pa := a.Properties[name]
			child := path + "." + name
			switch pb, ok := b.Properties[name]; {
			case ok:
				walk(child, &pa, &pb, aName, bName)
			case b.XPreserveUnknownFields || (b.AdditionalProperties != nil && b.AdditionalProperties.Bool):
			case b.AdditionalProperties != nil && b.AdditionalProperties.Structural != nil:
				walk(child, &pa, b.AdditionalProperties.Structural, aName, bName)
			case !mapped(child):
				out = append(out, schemaDiff{path: child, msg: fmt.Sprintf("%s has no place in %s", child, bName)})
			}
		}
		walk(path+"[*]", a.Items, b.Items, aName, bName)
	}
	a, b := s.Properties["spec"], hub.Properties["spec"]
	walk("spec", &a, &b, version, storage)
	walk("spec", &b, &a, storage, version)
	return out
}

// readVersion returns the version the engine reads the custom resource
// at: spec.resource.readVersion, a served version, or the storage
// version.
func readVersion(l *errorList, op *v1alpha1.Operator, storage *v1alpha1.ResourceVersion) *v1alpha1.ResourceVersion {
	name := op.Spec.Resource.ReadVersion
	if name == "" {
		return storage
	}
	var names []string
	for i := range op.Spec.Resource.Versions {
		v := &op.Spec.Resource.Versions[i]
		if v.Name != name {
			names = append(names, v.Name)
			continue
		}
		if v.Served != nil && !*v.Served {
			l.add("spec.resource.readVersion", "%s is not served (served: false): the engine could not read custom resources at it; serve it, or read another version", name)
			return nil
		}
		return v
	}
	l.add("spec.resource.readVersion", "%q is not a version of the resource (versions: %s)", name, strings.Join(names, ", "))
	return nil
}
