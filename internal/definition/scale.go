package definition

import (
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// checkScale checks each version's scale subresource against what the
// API server reads through it (kubectl scale, a HorizontalPodAutoscaler):
// specReplicasPath an integer field of the spec schema; statusReplicasPath
// an integer status field the operator writes, computed in spec.status or
// declared in statusSchema for a handler to write; the optional
// labelSelectorPath a string field of either. A path to nothing, or to a
// field of another type, makes `kubectl scale` fail on every object.
func checkScale(l *errorList, d *Definition) {
	for i := range d.Operator.Spec.Resource.Versions {
		v := &d.Operator.Spec.Resource.Versions[i]
		if v.Scale == nil {
			continue
		}
		field := fmt.Sprintf("spec.resource.versions[%d].scale", i)
		status := d.statusSchema(v)
		s := scaleCheck{l: l, d: d, spec: v.Schema, status: &status}
		s.path(field+".specReplicasPath", v.Scale.SpecReplicasPath, "integer", true, false)
		s.path(field+".statusReplicasPath", v.Scale.StatusReplicasPath, "integer", false, true)
		if p := v.Scale.LabelSelectorPath; p != nil && *p != "" {
			s.path(field+".labelSelectorPath", *p, "string", true, true)
		}
	}
}

type scaleCheck struct {
	l            *errorList
	d            *Definition
	spec, status *apiextensionsv1.JSONSchemaProps
}

// path checks one path, which must be under .spec (inSpec) or .status
// (inStatus) and name a field of type typ.
func (c scaleCheck) path(field, path, typ string, inSpec, inStatus bool) {
	example := map[string]string{"integer": "replicas", "string": "selector"}[typ]
	var under string
	switch {
	case inSpec && inStatus:
		under = "under .spec or .status, like .status." + example
	case inSpec:
		under = "under .spec, like .spec." + example
	default:
		under = "under .status, like .status." + example
	}
	if path == "" {
		c.l.add(field, "required: a path %s", under)
		return
	}
	names := strings.Split(strings.TrimPrefix(path, "."), ".")
	rootAllowed := (inSpec && names[0] == "spec") || (inStatus && names[0] == "status")
	if !strings.HasPrefix(path, ".") || strings.ContainsAny(path, "[]*@ ") || len(names) < 2 || !rootAllowed {
		c.l.add(field, "%q: expected a path of field names %s", path, under)
		return
	}
	s := c.spec
	if names[0] == "status" {
		s = c.status
	} else if s == nil {
		c.l.add(field, "%q: the version has no schema; declare %s in it with type: %s", path, strings.Join(names[1:], "."), typ)
		return
	}
	for i, name := range names[1:] {
		prop, ok := s.Properties[name]
		if ok {
			s = &prop
			continue
		}
		at := strings.Join(names[:i+2], ".")
		switch {
		case names[0] == "spec":
			c.l.add(field, "%q: the schema has no field %s; declare it with type: %s", path, at, typ)
		case i == 0 && c.computed(name):
			c.l.add(field, "%q: spec.status.%s computes it, but its type is not known at load (an expression over children is typed only by the cluster's schemas); declare it: statusSchema: {properties: {%s: {type: %s}}}", path, name, name, typ)
		case i == 0:
			c.l.add(field, "%q: nothing writes %s: compute it in spec.status (%s: \"${...}\"), or declare it in statusSchema (properties: {%s: {type: %s}}) for a handler to write", path, at, name, name, typ)
		default:
			c.l.add(field, "%q: the status schema has no field %s; declare it in statusSchema with type: %s", path, at, typ)
		}
		return
	}
	if s.Type != typ {
		c.l.add(field, "%q has type %s, but the scale subresource reads it as type %s: declare it type: %s", path, orNone(s.Type), typ, typ)
	}
}

// computed reports whether a spec.status field computes the status field.
func (c scaleCheck) computed(name string) bool {
	for _, f := range c.d.Status {
		if f.Name == name {
			return true
		}
	}
	return false
}

func orNone(t string) string {
	if t == "" {
		return "none"
	}
	return t
}
