package definition

import "fmt"

// Clashes checks definitions meant to run together in one engine: two
// Operators may not share a name, nor a custom resource (the CRD's name,
// plural.group). Each clash is an Error at the later definition's field,
// naming where the earlier one is; nil when there is none.
func Clashes(defs []*Definition) error {
	var errs Errors
	names := map[string]*Definition{}
	crds := map[string]*Definition{}
	for _, d := range defs {
		if first, ok := names[d.Operator.Name]; ok {
			errs = append(errs, d.errorAt("metadata.name", "operator %s is defined twice: also at %s; give each Operator its own name",
				d.Operator.Name, first.place("metadata.name")))
		} else {
			names[d.Operator.Name] = d
		}
		if !d.Owns() {
			continue
		}
		crd := d.Plural + "." + d.GVK.Group
		if first, ok := crds[crd]; ok && first.Operator.Name != d.Operator.Name {
			errs = append(errs, d.errorAt("spec.resource.kind", "operators %s and %s both declare %s (CRD %s; the other at %s): one custom resource has one operator; change the group or kind of one",
				first.Operator.Name, d.Operator.Name, d.GVK.GroupKind(), crd, first.place("spec.resource.kind")))
		} else if !ok {
			crds[crd] = d
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// errorAt is an Error at one of the definition's fields.
func (d *Definition) errorAt(field, format string, args ...any) *Error {
	l := &errorList{file: d.Source, operator: d.Operator.Name}
	if d.src != nil {
		l.lines = d.src.lines
	}
	l.add(field, format, args...)
	return l.errs[0]
}

// place is file:line of one of the definition's fields, or the operator's
// name when it came from the cluster.
func (d *Definition) place(field string) string {
	e := d.errorAt(field, "")
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d", e.File, e.Line)
	case e.File != "":
		return e.File
	}
	return "operator " + d.Operator.Name
}
