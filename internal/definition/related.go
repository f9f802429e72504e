package definition

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Related is a compiled related reference (v1alpha1.Related): its
// templates read self alone.
type Related struct {
	ID  string
	GVK schema.GroupVersionKind
	// Name is set for one object; Selector (by label, sorted) for a list.
	Name     *Slot
	Selector map[string]*Slot
	// Namespace is nil for the custom resource's own.
	Namespace *Slot
	// Namespaces, sorted, are the only namespaces where the kind is read
	// and watched for this reference; empty for all.
	Namespaces []string
	// Field is where it is declared, e.g. spec.related[0].
	Field string
}

// List reports whether related.<id> is a list (a selector) rather than one
// object.
func (r *Related) List() bool { return r.Selector != nil }

// Target is what the reference names for the custom resource self: the
// namespace (defaultNS when none is given), and the name or the label
// selector.
func (r *Related) Target(self map[string]any, defaultNS string) (namespace, name string, selector labels.Selector, err error) {
	act := Vars{Self: self}.activation(nil)
	str := func(s *Slot) (string, error) {
		v, err := s.eval(act)
		if err != nil {
			return "", err
		}
		if v == nil {
			return "", nil
		}
		return fmt.Sprint(v), nil
	}
	namespace = defaultNS
	if r.Namespace != nil {
		if namespace, err = str(r.Namespace); err != nil {
			return "", "", nil, err
		}
	}
	if r.Name != nil {
		name, err = str(r.Name)
		if err == nil && name == "" {
			err = fmt.Errorf("%s.name: gave an empty name", r.Field)
		}
		return namespace, name, nil, err
	}
	set := labels.Set{}
	for _, k := range slices.Sorted(maps.Keys(r.Selector)) {
		if set[k], err = str(r.Selector[k]); err != nil {
			return "", "", nil, err
		}
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return "", "", nil, fmt.Errorf("%s.selector: %w", r.Field, err)
	}
	return namespace, "", sel, nil
}

// compileRelated compiles one reference; its templates may read self only.
func compileRelated(l *errorList, envs *celEnvs, field string, r v1alpha1.Related) *Related {
	if !childRE.MatchString(r.ID) {
		l.add(field+".id", "%q is not an id: expected a lower-case identifier like app or pods", r.ID)
		return nil
	}
	out := &Related{ID: r.ID, Field: field}
	switch {
	case r.APIVersion == "" || strings.Contains(r.APIVersion, "${"):
		l.add(field+".apiVersion", "required, and it cannot be an expression")
	case r.Kind == "" || strings.Contains(r.Kind, "${"):
		l.add(field+".kind", "required, and it cannot be an expression")
	default:
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			l.add(field+".apiVersion", "%v", err)
		}
		out.GVK = gv.WithKind(r.Kind)
	}
	selfOnly := func(f, s string) *Slot {
		slot := compileString(l, envs.object, f, s, nil)
		if slot == nil {
			return nil
		}
		for _, e := range slot.Expressions() {
			if len(e.Children) > 0 || len(e.Related) > 0 {
				l.add(f, "${%s}: a related object is named from self alone, not from children or other related objects", e.Source)
				return nil
			}
		}
		return slot
	}
	switch {
	case r.Name != "" && len(r.Selector) > 0:
		l.add(field, "set one of name and selector, not both")
	case r.Name != "":
		out.Name = selfOnly(field+".name", r.Name)
	case len(r.Selector) > 0:
		out.Selector = map[string]*Slot{}
		for _, k := range slices.Sorted(maps.Keys(r.Selector)) {
			if msgs := validationLabelKey(k); msgs != "" {
				l.add(field+".selector."+k, "%q is not a label key: %s", k, msgs)
				continue
			}
			if slot := selfOnly(field+".selector."+k, r.Selector[k]); slot != nil {
				out.Selector[k] = slot
			}
		}
	default:
		l.add(field, "set name (one object, e.g. ${self.spec.deployment}) or selector (the objects with these labels)")
	}
	if r.Namespace != "" {
		out.Namespace = selfOnly(field+".namespace", r.Namespace)
	}
	out.Namespaces, _ = namespaceList(l, field+".namespaces", r.Namespaces)
	if len(out.Namespaces) > 0 && r.Namespace != "" && !strings.Contains(r.Namespace, "${") && !slices.Contains(out.Namespaces, r.Namespace) {
		l.add(field+".namespace", "%q is not among namespaces (%s): nothing there would be read", r.Namespace, strings.Join(out.Namespaces, ", "))
	}
	return out
}

// Allows reports whether the reference may read objects in namespace ns:
// any when it lists no namespaces, else those it lists. A cluster-scoped
// object (ns "") is read whatever the list.
func (r *Related) Allows(ns string) bool {
	return len(r.Namespaces) == 0 || ns == "" || slices.Contains(r.Namespaces, ns)
}

// RelatedKind is a kind of a definition's related objects, with where
// they are read and watched.
type RelatedKind struct {
	GVK schema.GroupVersionKind
	// Namespaces, sorted, are those the references of the kind list; nil,
	// every namespace, when one of them lists none.
	Namespaces []string
}

// RelatedKinds returns the kinds of d's related objects, each once, in the
// order they are declared.
func (d *Definition) RelatedKinds() []RelatedKind {
	var out []RelatedKind
	for _, r := range d.Related {
		i := slices.IndexFunc(out, func(k RelatedKind) bool { return k.GVK == r.GVK })
		if i < 0 {
			out = append(out, RelatedKind{GVK: r.GVK, Namespaces: slices.Clone(r.Namespaces)})
			continue
		}
		if len(out[i].Namespaces) == 0 || len(r.Namespaces) == 0 {
			out[i].Namespaces = nil // every namespace, for one of them
			continue
		}
		for _, ns := range r.Namespaces {
			if !slices.Contains(out[i].Namespaces, ns) {
				out[i].Namespaces = append(out[i].Namespaces, ns)
			}
		}
		slices.Sort(out[i].Namespaces)
	}
	return out
}

// namespaceList checks a list of namespace names, each a DNS label, and
// returns it sorted, without the names it reports; valid is false when a
// name is not a namespace's (one listed twice is only reported).
func namespaceList(l *errorList, field string, names []string) (out []string, valid bool) {
	valid = true
	for i, ns := range names {
		at := fmt.Sprintf("%s[%d]", field, i)
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			l.add(at, "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
			valid = false
			continue
		}
		if slices.Contains(out, ns) {
			l.add(at, "namespace %q is listed twice", ns)
			continue
		}
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, valid
}

// resolveRelatedSchemas returns the related ids, which are lists, and,
// when schemas is given, the schema of each one's kind.
func resolveRelatedSchemas(l *errorList, op *v1alpha1.Operator, schemas SchemaResolver) ([]relatedType, bool) {
	var out []relatedType
	ok := true
	for i, r := range op.Spec.Related {
		if slices.ContainsFunc(out, func(t relatedType) bool { return t.id == r.ID }) {
			continue // reported with the reference
		}
		t := relatedType{id: r.ID, list: r.Name == "" && len(r.Selector) > 0}
		if schemas != nil && r.Kind != "" && !strings.Contains(r.APIVersion+r.Kind, "${") {
			if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil {
				s, err := schemas.ResolveSchema(gv.WithKind(r.Kind))
				if err != nil {
					l.add(fmt.Sprintf("spec.related[%d].kind", i), "kind %s %s is not served by the cluster: %v", r.APIVersion, r.Kind, err)
					ok = false
					continue
				}
				t.schema = s
			}
		}
		out = append(out, t)
	}
	return out, ok
}

// relatedType is how related.<id> is typed in expressions.
type relatedType struct {
	id     string
	list   bool
	schema *spec.Schema // nil: untyped
}

// relatedKey is the key of a related id's schema among a definition's
// value schemas, apart from the children's ids.
func relatedKey(id string) string { return "related:" + id }

// listSchema is the schema of a list of objects of schema s.
func listSchema(s *spec.Schema) *spec.Schema {
	return &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"array"}, Items: &spec.SchemaOrArray{Schema: s}}}
}

// validationLabelKey says what is wrong with a label key, or "".
func validationLabelKey(k string) string {
	return strings.Join(validation.IsQualifiedName(k), "; ")
}
