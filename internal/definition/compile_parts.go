package definition

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// The parts of an operator with a custom resource: its children, in
// the order they read each other, and its status fields.

// compileChildren compiles spec.children into d, and returns their ids.
func compileChildren(l *errorList, envs *celEnvs, op *v1alpha1.Operator, d *Definition) map[string]bool {
	ids := map[string]bool{}
	for i, c := range op.Spec.Children {
		field := fmt.Sprintf("spec.children[%d]", i)
		child := compileChild(l, envs, field, c)
		if child == nil {
			continue
		}
		if ids[c.ID] {
			l.add(field+".id", "duplicate child id %q: each child needs its own", c.ID)
			continue
		}
		ids[c.ID] = true
		d.Children = append(d.Children, child)
	}
	return ids
}

func compileChild(l *errorList, envs *celEnvs, field string, c v1alpha1.Child) *Child {
	if !childRE.MatchString(c.ID) {
		l.add(field+".id", "%q is not a child id: expected a lower-case identifier like pod or configMap", c.ID)
		return nil
	}
	var tmpl map[string]any
	if err := json.Unmarshal(c.Template.Raw, &tmpl); err != nil || tmpl == nil {
		l.add(field+".template", "expected an object (a Kubernetes manifest)")
		return nil
	}
	child := &Child{ID: c.ID, Template: tmpl, Recreate: c.Recreate}
	apiVersion, _ := tmpl["apiVersion"].(string)
	kind, _ := tmpl["kind"].(string)
	switch {
	case apiVersion == "" || strings.Contains(apiVersion, "${"):
		l.add(field+".template.apiVersion", "required, and it cannot be an expression")
	case kind == "" || strings.Contains(kind, "${"):
		l.add(field+".template.kind", "required, and it cannot be an expression")
	default:
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			l.add(field+".template.apiVersion", "%v", err)
		}
		child.GVK = gv.WithKind(kind)
	}
	if meta, _ := tmpl["metadata"].(map[string]any); meta == nil || meta["name"] == nil {
		l.add(field+".template.metadata.name", "required: children are named, usually after their parent, like ${self.metadata.name}-print")
	}
	walkStrings(tmpl, nil, func(path []any, s string) {
		if slot := compileString(l, envs.object, field+".template"+pathString(path), s, path); slot != nil && !slot.verbatim(s) {
			child.Slots = append(child.Slots, slot)
		}
	})
	child.IncludeWhen = compileConditions(l, envs.object, field+".includeWhen", c.IncludeWhen)
	child.ReadyWhen = compileConditions(l, envs.childEnv(c.ID), field+".readyWhen", c.ReadyWhen)
	return child
}

// resolveChildSchemas returns the child ids and, when schemas is given,
// the schema of each child's kind.
func resolveChildSchemas(l *errorList, op *v1alpha1.Operator, schemas SchemaResolver) ([]string, map[string]*spec.Schema) {
	var ids []string
	out := map[string]*spec.Schema{}
	for i, c := range op.Spec.Children {
		if slices.Contains(ids, c.ID) {
			continue // reported with the child
		}
		ids = append(ids, c.ID)
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if schemas == nil || json.Unmarshal(c.Template.Raw, &head) != nil || head.Kind == "" || strings.Contains(head.APIVersion+head.Kind, "${") {
			continue // untyped, or reported with the child
		}
		gv, err := schema.ParseGroupVersion(head.APIVersion)
		if err != nil {
			continue
		}
		s, err := schemas.ResolveSchema(gv.WithKind(head.Kind))
		if err != nil {
			l.add(fmt.Sprintf("spec.children[%d].template.kind", i), "kind %s %s is not served by the cluster: %v", head.APIVersion, head.Kind, err)
			continue
		}
		out[c.ID] = s
	}
	return ids, out
}

// expressions are the ones evaluated before the child is applied; readyWhen
// reads the child itself and adds no dependency.
func (c *Child) expressions() []*Expression {
	var out []*Expression
	for _, s := range c.Slots {
		out = append(out, s.Expressions()...)
	}
	return append(out, c.IncludeWhen...)
}

// dependencyOrder sorts children so that each comes after what it reads,
// keeping the declared order otherwise. A cycle is an error naming it.
func dependencyOrder(children []*Child) ([]*Child, error) {
	byID := map[string]*Child{}
	for _, c := range children {
		byID[c.ID] = c
	}
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var order []*Child
	var stack []string
	var visit func(c *Child) error
	visit = func(c *Child) error {
		switch state[c.ID] {
		case done:
			return nil
		case visiting:
			i := slices.Index(stack, c.ID)
			cycle := append(append([]string{}, stack[i:]...), c.ID)
			return fmt.Errorf("the children depend on each other in a cycle: %s", strings.Join(cycle, " -> "))
		}
		state[c.ID] = visiting
		stack = append(stack, c.ID)
		for _, dep := range c.DependsOn {
			if dep == c.ID {
				return fmt.Errorf("child %q reads itself (children.%s); a child can read only other children", c.ID, c.ID)
			}
			if err := visit(byID[dep]); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[c.ID] = done
		order = append(order, c)
		return nil
	}
	for _, c := range children {
		if err := visit(c); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// compileStatusFields compiles spec.status into d.
func compileStatusFields(l *errorList, envs *celEnvs, op *v1alpha1.Operator, d *Definition) {
	for _, name := range slices.Sorted(maps.Keys(op.Spec.Status)) {
		field := "spec.status." + name
		switch {
		case !statusRE.MatchString(name):
			l.add(field, "status field names are lowerCamelCase identifiers")
			continue
		case slices.Contains(reservedStatus, name):
			l.add(field, "%q is written by opkit; choose another name", name)
			continue
		case name == stateStatus && len(op.Spec.States) > 0:
			l.add(field, "%q is written by opkit for an Operator with states (the object's current state); choose another name", name)
			continue
		}
		slot := compileString(l, envs.object, field, op.Spec.Status[name], nil)
		if slot != nil {
			d.Status = append(d.Status, &StatusField{Name: name, Slot: slot, Template: op.Spec.Status[name], Field: field})
		}
	}
}

// setValueSchemas gives the schemas of the children and related objects
// to what reads them: children, status fields, handlers, transitions.
func (d *Definition) setValueSchemas(childSchemas map[string]*spec.Schema, relatedTypes []relatedType) {
	for _, r := range relatedTypes {
		if r.schema == nil {
			continue
		}
		if r.list {
			childSchemas[relatedKey(r.id)] = listSchema(r.schema)
		} else {
			childSchemas[relatedKey(r.id)] = r.schema
		}
	}
	valueSchemas := newValueSchemas(childSchemas)
	for _, c := range d.Children {
		c.schemas = valueSchemas
	}
	for _, f := range d.Status {
		f.schemas = valueSchemas
	}
	for _, h := range d.Handlers {
		h.schemas = valueSchemas
	}
	for _, t := range d.States.transitions() {
		t.schemas = valueSchemas
	}
}
