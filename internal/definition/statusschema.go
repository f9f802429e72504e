package definition

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// checkStatusSchemas checks each version's statusSchema (an object schema
// whose properties type the fields handlers write, agreeing with the types
// of spec.status) and its printer columns: a column must show a field its
// schemas have, with the column's type. A column over a status field no
// schema types is warned of: a handler that writes it with another type
// leaves the column blank, and nothing says why.
func checkStatusSchemas(l *errorList, d *Definition) {
	for i := range d.Operator.Spec.Resource.Versions {
		v := &d.Operator.Spec.Resource.Versions[i]
		field := fmt.Sprintf("spec.resource.versions[%d]", i)
		if s := v.StatusSchema; s != nil {
			checkStatusSchema(l, d, field+".statusSchema", s)
		}
		status := d.statusSchema(v)
		for j, c := range v.PrinterColumns {
			checkColumn(l, d, fmt.Sprintf("%s.printerColumns[%d]", field, j), c, v.Schema, &status)
		}
	}
}

func checkStatusSchema(l *errorList, d *Definition, field string, s *apiextensionsv1.JSONSchemaProps) {
	if s.Type != "" && s.Type != "object" {
		l.add(field+".type", "%q: the status schema is an object's, type: object with properties", s.Type)
		return
	}
	if len(s.Required) > 0 {
		l.add(field+".required", "status fields cannot be required: the status is written in steps, by opkit and by each handler; require fields inside an object field instead")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		if slices.Contains(reservedStatus, name) {
			l.add(field+".properties."+name, "%q is written and typed by opkit; choose another name", name)
		}
	}
	for _, f := range append(slices.Clone(d.Status), d.States.setFields()...) {
		declared, ok := s.Properties[f.Name]
		if typ := f.schemaType(); ok && typ != "" && declared.Type != typ {
			l.add(field+".properties."+f.Name+".type", "%q, but %s computes a %s: declare type %s, or leave the field out (spec.status types it)", declared.Type, f.Field, typ, typ)
		}
	}
	var internal apiextensions.JSONSchemaProps
	whole := s.DeepCopy()
	whole.Type = "object"
	for _, name := range reservedStatus {
		delete(whole.Properties, name) // reported above
	}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(whole, &internal, nil); err != nil {
		l.add(field, "%v", err)
		return
	}
	ss, err := structuralschema.NewStructural(&internal)
	if err != nil {
		l.add(field, "not a structural schema: %v", err)
		return
	}
	for _, e := range structuralschema.ValidateStructural(nil, ss) {
		l.add(field+schemaErrorPath(e.Field), "%s: every field needs a type, and an open object x-kubernetes-preserve-unknown-fields: true", e.ErrorBody())
	}
}

// schemaType is the OpenAPI type the field's template computes, or "" when
// not a scalar.
func (f *StatusField) schemaType() string {
	if len(f.Slot.parts) == 1 && f.Slot.parts[0].expr != nil {
		return schemaType(f.Slot.parts[0].expr.Type) // one expression keeps its type
	}
	return "string" // a longer template is spliced into a string
}

// opkitColumnFields are the roots of the paths opkit writes and types.
var opkitColumnFields = []string{"metadata", "status.conditions", "status.observedGeneration", "status.opkit"}

func checkColumn(l *errorList, d *Definition, field string, c apiextensionsv1.CustomResourceColumnDefinition, spec, status *apiextensionsv1.JSONSchemaProps) {
	path, simple := strings.CutPrefix(c.JSONPath, ".")
	if !simple || strings.ContainsAny(path, "[]{}()@*?$ ") {
		return // a filter or a function: not followed
	}
	for _, root := range opkitColumnFields {
		if path == root || strings.HasPrefix(path, root+".") {
			return
		}
	}
	names := strings.Split(path, ".")
	var s *apiextensionsv1.JSONSchemaProps
	switch names[0] {
	case "spec":
		s = spec
	case "status":
		s = status
	default:
		l.add(field+".jsonPath", "%q: a column shows a field of .spec or .status", c.JSONPath)
		return
	}
	for i, name := range names[1:] {
		if s == nil {
			return // an untyped .spec
		}
		prop, ok := s.Properties[name]
		if !ok {
			if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
				computed := slices.ContainsFunc(d.Status, func(f *StatusField) bool { return f.Name == names[1] })
				if names[0] == "status" && i == 0 && !computed {
					l.warn(d, field+".jsonPath", "%s has no type: a handler that writes it as another type than %s leaves the column blank, with no error; type it in statusSchema: {properties: {%s: {type: %s}}}",
						c.JSONPath, c.Type, names[1], columnSchemaType(c.Type))
				}
				return
			}
			l.add(field+".jsonPath", "%s: the schema has no field %s, so the column is always blank", c.JSONPath, strings.Join(names[:i+2], "."))
			return
		}
		s = &prop
	}
	if !columnShows(c.Type, s.Type) {
		l.add(field+".type", "%s, but %s is a %s: the column would stay blank; make it type %s", c.Type, c.JSONPath, s.Type, columnType(s.Type))
	}
}

// columnShows reports whether a column of type column shows a field of the
// schema type typ, as the API server's table converter does.
func columnShows(column, typ string) bool {
	switch column {
	case "integer", "number":
		return typ == "number" || typ == "integer"
	case "boolean":
		return typ == "boolean"
	case "date":
		return typ == "string"
	}
	return true // a string column prints any value
}

// columnType is the column type that shows a field of a schema type.
func columnType(typ string) string {
	switch typ {
	case "integer", "number", "boolean":
		return typ
	}
	return "string"
}

// columnSchemaType is the schema type of a column's field.
func columnSchemaType(column string) string {
	if column == "date" {
		return "string, format: date-time"
	}
	return column
}

// mergeStatusSchema adds a version's statusSchema properties to the status
// schema.
func mergeStatusSchema(s *apiextensionsv1.JSONSchemaProps, v *v1alpha1.ResourceVersion) {
	if v.StatusSchema == nil {
		return
	}
	for name, prop := range v.StatusSchema.Properties {
		if slices.Contains(reservedStatus, name) {
			continue
		}
		if _, typed := s.Properties[name]; typed {
			continue // spec.status types it
		}
		if s.Properties == nil {
			s.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		}
		s.Properties[name] = *prop.DeepCopy()
	}
}

// schemaErrorPath turns the path of a structural schema error,
// <root>.properties[name].items, into a field path: .properties.name.items.
func schemaErrorPath(p string) string {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "<root>"), ".")
	p = strings.ReplaceAll(p, "[", ".")
	return "." + strings.ReplaceAll(p, "]", "")
}

// statusReadSchema types self.status for the expressions of a custom
// resource's definition: the fields opkit writes (conditions,
// observedGeneration; state, for an Operator with states), the version's
// statusSchema fields with their types, and the spec.status fields, as
// dyn (their types are known only once they are compiled, which may
// read them), and so the fields transitions set. A field none of these names is not read: a handler's
// field is declared in statusSchema first.
func statusReadSchema(op *v1alpha1.Operator, v *v1alpha1.ResourceVersion) *apiextensionsv1.JSONSchemaProps {
	s := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true), Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	mergeStatusSchema(s, v)
	names := slices.Collect(maps.Keys(op.Spec.Status))
	for _, st := range op.Spec.States {
		for _, t := range st.Transitions {
			names = slices.AppendSeq(names, maps.Keys(t.Set))
		}
	}
	for _, name := range names {
		if _, typed := s.Properties[name]; !typed && !slices.Contains(reservedStatus, name) {
			s.Properties[name] = apiextensionsv1.JSONSchemaProps{XIntOrString: true}
		}
	}
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	s.Properties["observedGeneration"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	s.Properties["conditions"] = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"type": str, "status": str, "reason": str, "message": str, "lastTransitionTime": str,
			"observedGeneration": {Type: "integer", Format: "int64"},
		},
	}}}
	delete(s.Properties, stateStatus)
	if len(op.Spec.States) > 0 {
		// since is read as the string it is: self is not read through
		// its schema, so a date-time would not be a timestamp.
		s.Properties[stateStatus] = objectStateSchema(false)
	}
	return s
}

// objectStateSchema is the schema of status.state, from the fields of
// v1alpha1.ObjectState: since a date-time when dates is set, a string
// otherwise.
func objectStateSchema(dates bool) apiextensionsv1.JSONSchemaProps {
	s := apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "The object's state in its life cycle, written by opkit.",
		Properties:  map[string]apiextensionsv1.JSONSchemaProps{},
	}
	t := reflect.TypeFor[v1alpha1.ObjectState]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		var p apiextensionsv1.JSONSchemaProps
		switch f.Type.Kind() {
		case reflect.Int64:
			p = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
		case reflect.Slice:
			p = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}}
		default:
			p = apiextensionsv1.JSONSchemaProps{Type: "string"}
			if name == "since" && dates {
				p.Format = "date-time"
			}
		}
		s.Properties[name] = p
	}
	return s
}
