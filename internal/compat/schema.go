package compat

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

type schema = apiextensionsv1.JSONSchemaProps

// root compares a version's whole schema: its .spec (the definition's
// schema, at at.def+".schema") and any other field but .status.
func (c *comparer) root(at path, old, updated *schema) {
	if old == nil || updated == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(old.Properties)) {
		if name == "status" {
			continue
		}
		o := old.Properties[name]
		p := path{user: at.user + "." + name, version: at.version}
		if name == "spec" {
			p.def = at.def + ".schema"
		}
		n, ok := updated.Properties[name]
		if !ok {
			c.add(Breaking, p, "removed, with every field under it")
			continue
		}
		c.node(p, &o, &n)
	}
}

// node compares one schema node and, recursively, those under it.
func (c *comparer) node(p path, o, n *schema) {
	if !c.types(p, o, n) {
		return // what is under a changed type is another thing
	}
	c.format(p, o, n)
	if o.Nullable && !n.Nullable {
		c.add(Warning, p, "nullable is removed: a null here is now dropped (pruned) from the objects that hold one, instead of kept")
	}
	c.enum(p, o, n)
	c.bounds(p, o, n)
	c.required(p, o, n)
	c.properties(p, o, n)
	if o.Items != nil && o.Items.Schema != nil && n.Items != nil && n.Items.Schema != nil {
		c.node(p.to("[*]", ".items"), o.Items.Schema, n.Items.Schema)
	}
	c.rules(p, o, n)
	c.defaults(p, o, n)
	for _, comb := range []struct {
		name string
		o, n any
	}{{"allOf", o.AllOf, n.AllOf}, {"anyOf", o.AnyOf, n.AnyOf}, {"oneOf", o.OneOf, n.OneOf}, {"not", o.Not, n.Not}} {
		if jsonOf(comb.o) != jsonOf(comb.n) {
			c.add(Warning, p.to("", "."+comb.name), "%s changes: opkit does not compare such combinations; check by hand that existing objects still validate", comb.name)
		}
	}
}

// types reports a narrowed type; it returns false when the type changed.
func (c *comparer) types(p path, o, n *schema) bool {
	if o.XIntOrString && !n.XIntOrString && n.Type != "" {
		c.add(Breaking, p.to("", ".type"), "was an int-or-string, and is now only %s: objects that hold the other are refused on their next write of it, and clients that send it break", n.Type)
		return false
	}
	if o.Type == n.Type || n.Type == "" && (n.XIntOrString || preserves(n)) {
		return true
	}
	if o.Type == "integer" && n.Type == "number" {
		return true // every integer is a number
	}
	c.add(Breaking, p.to("", ".type"), "the type changes from %s to %s: existing values of type %s no longer validate, and clients that read or send a %s break",
		typeName(o), typeName(n), typeName(o), typeName(o))
	return false
}

func typeName(s *schema) string {
	switch {
	case s.XIntOrString:
		return "int-or-string"
	case s.Type == "":
		return "any type"
	}
	return s.Type
}

// widerFormats are the format changes that accept every value accepted
// before.
var widerFormats = map[[2]string]bool{
	{"int32", "int64"}: true, {"float", "double"}: true,
	{"int32", "double"}: true, {"int64", "double"}: true,
}

func (c *comparer) format(p path, o, n *schema) {
	if n.Format == "" || n.Format == o.Format || widerFormats[[2]string{o.Format, n.Format}] {
		return
	}
	if o.Format == "" {
		c.add(Breaking, p.to("", ".format"), "format %s is added: values that are not a valid %s are refused from now on, and objects that hold one cannot change it but to a valid one", n.Format, n.Format)
		return
	}
	c.add(Breaking, p.to("", ".format"), "the format changes from %s to %s: values that are not a valid %s are refused from now on", o.Format, n.Format, n.Format)
}

func (c *comparer) enum(p path, o, n *schema) {
	if len(n.Enum) == 0 {
		return
	}
	newValues := make([]string, len(n.Enum))
	for i, v := range n.Enum {
		newValues[i] = canonical(v.Raw)
	}
	if len(o.Enum) == 0 {
		c.add(Breaking, p.to("", ".enum"), "an enum is added (%s): other values are refused from now on", strings.Join(newValues, ", "))
		return
	}
	var removed []string
	for _, v := range o.Enum {
		if s := canonical(v.Raw); !slices.Contains(newValues, s) {
			removed = append(removed, s)
		}
	}
	if len(removed) > 0 {
		c.add(Breaking, p.to("", ".enum"), "enum value %s is removed: clients that send it are refused, and objects that hold it cannot be written with it", strings.Join(removed, ", "))
	}
}

// tighter is the reason common to tightened bounds.
const tighter = "values beyond it are refused from now on (an object that holds one keeps it while that field is left unchanged)"

func (c *comparer) bounds(p path, o, n *schema) {
	bound := func(field, format string, args ...any) {
		c.add(Breaking, p.to("", "."+field), format+": "+tighter, args...)
	}
	switch {
	case n.Minimum == nil:
	case o.Minimum == nil:
		bound("minimum", "a minimum of %v is added", *n.Minimum)
	case *n.Minimum > *o.Minimum:
		bound("minimum", "the minimum rises from %v to %v", *o.Minimum, *n.Minimum)
	case *n.Minimum == *o.Minimum && n.ExclusiveMinimum && !o.ExclusiveMinimum:
		bound("exclusiveMinimum", "the minimum %v becomes exclusive", *n.Minimum)
	}
	switch {
	case n.Maximum == nil:
	case o.Maximum == nil:
		bound("maximum", "a maximum of %v is added", *n.Maximum)
	case *n.Maximum < *o.Maximum:
		bound("maximum", "the maximum falls from %v to %v", *o.Maximum, *n.Maximum)
	case *n.Maximum == *o.Maximum && n.ExclusiveMaximum && !o.ExclusiveMaximum:
		bound("exclusiveMaximum", "the maximum %v becomes exclusive", *n.Maximum)
	}
	for _, b := range []struct {
		field string
		o, n  *int64
	}{{"minLength", o.MinLength, n.MinLength}, {"minItems", o.MinItems, n.MinItems}, {"minProperties", o.MinProperties, n.MinProperties}} {
		if on, nn := deref(b.o), deref(b.n); nn > on {
			bound(b.field, "%s rises from %d to %d", b.field, on, nn)
		}
	}
	for _, b := range []struct {
		field string
		o, n  *int64
	}{{"maxLength", o.MaxLength, n.MaxLength}, {"maxItems", o.MaxItems, n.MaxItems}, {"maxProperties", o.MaxProperties, n.MaxProperties}} {
		switch {
		case b.n == nil:
		case b.o == nil:
			bound(b.field, "a %s of %d is added", b.field, *b.n)
		case *b.n < *b.o:
			bound(b.field, "%s falls from %d to %d", b.field, *b.o, *b.n)
		}
	}
	switch {
	case n.MultipleOf == nil:
	case o.MultipleOf == nil:
		bound("multipleOf", "multipleOf %v is added", *n.MultipleOf)
	case !wholeMultiple(*o.MultipleOf, *n.MultipleOf):
		bound("multipleOf", "multipleOf changes from %v to %v", *o.MultipleOf, *n.MultipleOf)
	}
	if n.UniqueItems && !o.UniqueItems {
		bound("uniqueItems", "uniqueItems is added")
	}
	if n.Pattern != "" && n.Pattern != o.Pattern {
		if o.Pattern == "" {
			bound("pattern", "a pattern %q is added", n.Pattern)
		} else {
			bound("pattern", "the pattern changes from %q to %q", o.Pattern, n.Pattern)
		}
	}
	listType := func(s *schema) string {
		if s.XListType == nil {
			return "atomic"
		}
		return *s.XListType
	}
	switch ot, nt := listType(o), listType(n); {
	case ot != nt && nt != "atomic":
		c.add(Breaking, p.to("", ".x-kubernetes-list-type"), "x-kubernetes-list-type changes from %s to %s: lists with duplicate entries are refused from now on", ot, nt)
	case nt == "map" && !slices.Equal(o.XListMapKeys, n.XListMapKeys):
		c.add(Breaking, p.to("", ".x-kubernetes-list-map-keys"), "x-kubernetes-list-map-keys change from %v to %v: the entries are told apart by other keys, and lists that repeat them are refused", o.XListMapKeys, n.XListMapKeys)
	}
}

// wholeMultiple reports whether every multiple of o is one of n.
func wholeMultiple(o, n float64) bool {
	if n == 0 {
		return false
	}
	q := o / n
	return q == math.Trunc(q)
}

func (c *comparer) required(p path, o, n *schema) {
	for _, name := range n.Required {
		if slices.Contains(o.Required, name) {
			continue
		}
		at := p.to("."+name, ".required")
		prop, declared := n.Properties[name]
		if declared {
			at = p.to("."+name, ".properties."+name)
			if prop.Default != nil {
				continue // objects that leave it out get the default, when read too
			}
		}
		if _, existed := o.Properties[name]; existed {
			c.add(Breaking, at, "an optional field becomes required: objects that left it out can no longer be written, and clients that leave it out are refused; give it a default, or keep it optional")
			continue
		}
		c.add(Breaking, at, "a new required field: objects made before lack it and can no longer be written, and clients that do not set it are refused; give it a default, or make it optional")
	}
}

// preserves reports whether s keeps the fields it does not declare.
func preserves(s *schema) bool {
	return s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
}

func (c *comparer) properties(p path, o, n *schema) {
	if preserves(o) && !preserves(n) {
		c.add(Breaking, p.to("", ".x-kubernetes-preserve-unknown-fields"), "x-kubernetes-preserve-unknown-fields is removed: every field the schema does not declare is dropped (pruned) by the API server from the objects that hold one, and lost")
	}
	for _, name := range slices.Sorted(maps.Keys(o.Properties)) {
		op := o.Properties[name]
		at := p.to("."+name, ".properties."+name)
		np, ok := n.Properties[name]
		switch {
		case ok:
			c.node(at, &op, &np)
		case preserves(n):
			c.add(Warning, at, "no longer declared: objects keep it (unknown fields are preserved here), but it is no longer validated, and clients that read the schema no longer see it")
		default:
			c.add(Breaking, at, "removed: the API server drops it (pruning) from every object as it is read or written, so its values are lost, and clients that set it see it dropped")
		}
	}
	if preserves(o) {
		for _, name := range slices.Sorted(maps.Keys(n.Properties)) {
			if _, ok := o.Properties[name]; !ok {
				c.add(Warning, p.to("."+name, ".properties."+name), "a new field in an object that kept unknown fields: objects may already hold a value of another type there, and cannot be written until it validates")
			}
		}
	}
	oa, na := o.AdditionalProperties, n.AdditionalProperties
	switch {
	case oa == nil || oa.Schema == nil:
	case na == nil || na.Schema == nil:
		if !preserves(n) && (na == nil || !na.Allows) {
			c.add(Breaking, p.to(".*", ".additionalProperties"), "additionalProperties is removed: the entries not declared as properties are dropped (pruned) from every object, and lost")
		}
	default:
		c.node(p.to(".*", ".additionalProperties"), oa.Schema, na.Schema)
	}
}

// transition matches a rule that reads oldSelf: it judges a change, and
// passes on create and on objects that do not change.
var transition = regexp.MustCompile(`\boldSelf\b`)

func (c *comparer) rules(p path, o, n *schema) {
	for i, r := range n.XValidations {
		if transition.MatchString(r.Rule) || slices.ContainsFunc(o.XValidations, func(or apiextensionsv1.ValidationRule) bool { return or.Rule == r.Rule }) {
			continue
		}
		c.add(Warning, p.to("", fmt.Sprintf(".x-kubernetes-validations[%d].rule", i)),
			"a new validation rule %q: writes that break it are refused from now on; an object that already breaks it can be updated only while the value it checks is left unchanged", r.Rule)
	}
}

func (c *comparer) defaults(p path, o, n *schema) {
	switch {
	case o.Default == nil:
	case n.Default == nil:
		c.add(Warning, p.to("", ".default"), "the default %s is removed: objects that leave the field out no longer read %s there, those stored before included", canonical(o.Default.Raw), canonical(o.Default.Raw))
	case canonical(o.Default.Raw) != canonical(n.Default.Raw):
		c.add(Warning, p.to("", ".default"), "the default changes from %s to %s: objects that leave the field out read %s from now on, those stored before included", canonical(o.Default.Raw), canonical(n.Default.Raw), canonical(n.Default.Raw))
	}
}

// canonical is a JSON value written with its keys in order.
func canonical(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	return jsonOf(v)
}

func jsonOf(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
