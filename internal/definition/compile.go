package definition

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Definition is a defaulted, validated and compiled Operator, ready for the
// engine.
type Definition struct {
	// Operator is the defaulted Operator.
	Operator *v1alpha1.Operator
	// Source is the file it came from, empty for the cluster.
	Source string
	// GVK is the custom resource at the version the engine reads it:
	// spec.resource.readVersion, which defaults to the storage version;
	// empty for an operator without one (see Watch).
	GVK schema.GroupVersionKind
	// StorageVersion is the name of the custom resource's storage
	// version; empty for an operator without one.
	StorageVersion string
	// Conversion is how the custom resource's versions convert to one
	// another, when a version declares one (spec.resource.versions[i].
	// conversion); nil otherwise, and the CRD's strategy is None.
	Conversion *Conversion
	// Watch is the objects the operator reacts to without owning them, or
	// nil. An operator with neither a custom resource (GVK) nor a watch
	// is a calendar: its handlers are operator-wide schedules.
	Watch *Watch
	// Plural is the resource name, e.g. printers.
	Plural string
	// Related are the objects each custom resource refers to, as declared.
	Related []*Related
	// Children in dependency order: a child comes after those it reads.
	Children []*Child
	// Status fields, sorted by name.
	Status []*StatusField
	// Handlers in the order they are declared, which is the order they run;
	// not those on validate or mutate (Admission).
	Handlers []*Handler
	// Admission are the handlers on validate or mutate, in the order
	// declared: the API server calls them (admission.go).
	Admission []*Handler
	// Sources are the operator's event sources, in the order declared.
	Sources []*EventSource
	// States is the custom resource's life cycle (spec.states), or nil.
	States *StateMachine
	// Rollout is how a change of the definition reaches the custom
	// resources (spec.rollout), or nil: all at once.
	Rollout *Rollout
	// Warnings are problems that do not stop the definition from running
	// but will surprise its users (a kind that shadows a built-in one in
	// kubectl), each placed like an error. Callers print them.
	Warnings Errors

	src   *Source
	typed bool // compiled with the children's schemas
	// expressions counts the CEL expressions compiled.
	expressions int
}

// Typed reports whether the children are typed by their kinds' schemas.
func (d *Definition) Typed() bool { return d.typed }

// NeedsSchemas reports whether compiling d again with schemas
// (WithSchemas) can change it: it owns a resource (its children and
// related objects are typed by their kinds' schemas), or it has
// expressions (a watched object, self, is typed by its kind's). A watch
// without any, or an operator-wide schedule, is the same either way, and
// its engine need not fetch and compile the schemas.
func (d *Definition) NeedsSchemas() bool { return d.Owns() || d.expressions > 0 }

// HasExpressions reports whether d has CEL expressions (a filter, a
// condition, a template's): any of them may read any field of an object.
func (d *Definition) HasExpressions() bool { return d.expressions > 0 }

// WithSchemas compiles the definition again with the children typed by
// schemas (see CompileWithSchemas).
func (d *Definition) WithSchemas(schemas SchemaResolver) (*Definition, error) {
	return compileDefinition(d.src, schemas)
}

// Child is a compiled child.
type Child struct {
	ID string
	// Template is the decoded template object.
	Template map[string]any
	// Slots are the template's strings that hold expressions.
	Slots       []*Slot
	IncludeWhen []*Expression
	ReadyWhen   []*Expression
	// DependsOn lists the children this one reads, sorted.
	DependsOn []string
	// GVK is the child's apiVersion and kind; neither may be an expression.
	GVK      schema.GroupVersionKind
	Recreate bool

	// schemas types the children's values at run time, by id, for
	// definitions compiled with schemas; nil otherwise.
	schemas map[string]common.Schema
}

// Slot is one template string with expressions, at Path in the template.
type Slot struct {
	// Path is the location in the template: map keys and list indexes.
	Path  []any
	parts []part
}

// StatusField is one compiled status expression.
type StatusField struct {
	Name string
	Slot *Slot
	// Template is the template as written.
	Template string
	Field    string

	schemas map[string]common.Schema // as in Child
}

var (
	groupRE   = regexp.MustCompile(v1alpha1.GroupPattern)
	kindRE    = regexp.MustCompile(v1alpha1.KindPattern)
	childRE   = regexp.MustCompile(v1alpha1.ChildIDPattern)
	versionRE = regexp.MustCompile(v1alpha1.VersionPattern)
	statusRE  = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
)

// reservedStatus are the status fields opkit writes itself.
var reservedStatus = []string{"conditions", "observedGeneration", "opkit"}

// Compile defaults, validates and compiles one Operator. Every problem
// found is returned together, as Errors, each naming its field (and line,
// for a file). Expressions are checked against the resource's schema;
// children.<id> is not typed (see CompileWithSchemas).
func Compile(src *Source) (*Definition, error) {
	return compileDefinition(src, nil)
}

// CompileWithSchemas is Compile that also types each child, in
// children.<id> and in its readyWhen, by the schema of its kind that
// schemas returns: a field the kind does not have is an error. A kind
// schemas cannot resolve (one the cluster does not serve) is an error.
func CompileWithSchemas(src *Source, schemas SchemaResolver) (*Definition, error) {
	return compileDefinition(src, schemas)
}

func compileDefinition(src *Source, schemas SchemaResolver) (*Definition, error) {
	l := &errorList{file: src.File, operator: src.Operator.Name, lines: src.lines, reported: map[string]bool{}}
	var fallbacks Errors
	for _, e := range src.errs {
		if e.fallback {
			fallbacks = append(fallbacks, e)
			continue
		}
		l.errs = append(l.errs, e)
		l.reported[e.Field] = true
	}
	d := compileInto(l, src, schemas)
	if d != nil {
		d.expressions = l.expressions
		warnYAML11(l, d, src)
	}
	l.withFallbacks(fallbacks)
	// In the file's order; those without a line keep theirs, after.
	line := func(e *Error) int {
		if e.Line == 0 {
			return math.MaxInt
		}
		return e.Line
	}
	slices.SortStableFunc(l.errs, func(a, b *Error) int { return cmp.Compare(line(a), line(b)) })
	if err := l.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// compileInto compiles src, reporting to l; it stops early, returning nil,
// where going on would only add noise.
func compileInto(l *errorList, src *Source, schemas SchemaResolver) *Definition {
	op := src.Operator.DeepCopy()
	if op.Name == "" {
		l.add("metadata.name", "required")
	} else if msgs := validation.IsDNS1123Subdomain(op.Name); len(msgs) > 0 {
		l.add("metadata.name", "%q is not a valid name: %s", op.Name, strings.Join(msgs, "; "))
	}
	Default(op)
	d := &Definition{Operator: op, Source: src.File, src: src, typed: schemas != nil}
	if op.Spec.Resource.IsZero() {
		return compileUnowned(l, src, d, schemas)
	}
	if op.Spec.Watch != nil {
		l.add("spec.watch", "set at most one of resource (a custom resource the operator owns) and watch (objects of any kind it reacts to without owning them)")
		return nil
	}
	storage := validateResource(l, op, d)
	if storage == nil {
		// Expressions are typed by the schema: without a valid resource
		// they would only add noise.
		return nil
	}
	for i := range op.Spec.Resource.Versions {
		checkImmutable(l, i, &op.Spec.Resource.Versions[i])
	}
	// Last, whatever else is found: the API server's own check of the
	// CRD reports only what no check of opkit's did.
	defer checkCRD(l, d)
	read := readVersion(l, op, storage)
	if read == nil {
		return nil
	}
	d.GVK.Version = read.Name
	errs := len(l.errs)
	childIDs, childSchemas := resolveChildSchemas(l, op, schemas)
	relatedTypes, _ := resolveRelatedSchemas(l, op, schemas)
	if len(l.errs) > errs {
		return nil
	}
	envs, err := newCELEnvs(read.Schema, statusReadSchema(op, read), childIDs, childSchemas, relatedTypes)
	if err != nil {
		l.add(fmt.Sprintf("spec.resource.versions[%d].schema", slices.IndexFunc(op.Spec.Resource.Versions, func(v v1alpha1.ResourceVersion) bool { return v.Name == read.Name })), "%v", err)
		return nil
	}
	compileConversion(l, d, storage)
	relatedIDs := compileRelatedAll(l, envs, op, d)
	ids := compileChildren(l, envs, op, d)
	compileStatusFields(l, envs, op, d)
	dir := ""
	if src.File != "" {
		if abs, err := filepath.Abs(src.File); err == nil {
			dir = filepath.Dir(abs)
		}
	}
	noNamespace := ""
	if op.Spec.Resource.Scope == v1alpha1.ClusterScoped {
		noNamespace = "the resource is cluster-scoped"
	}
	d.Handlers = compileHandlers(l, envs, op.Spec.Handlers, dir, noNamespace, relatedIDs, ownedSubject)
	compileSources(l, d)
	d.Handlers, d.Admission = splitAdmission(d.Handlers)
	compileStates(l, envs, d)
	compileRollout(l, d)
	d.setValueSchemas(childSchemas, relatedTypes)
	checkReferences(l, d, ids, relatedIDs)
	checkStatusSchemas(l, d)
	checkScale(l, d)
	if len(l.errs) == 0 {
		order, err := dependencyOrder(d.Children)
		if err != nil {
			l.add("spec.children", "%v", err)
		}
		d.Children = order
	}
	return d
}

// compileRelatedAll compiles spec.related into d, and returns the ids
// that may be read (those reported wrong are known, so that their readers
// are not reported too).
func compileRelatedAll(l *errorList, envs *celEnvs, op *v1alpha1.Operator, d *Definition) map[string]bool {
	relatedIDs := map[string]bool{}
	for i, r := range op.Spec.Related {
		field := fmt.Sprintf("spec.related[%d]", i)
		rel := compileRelated(l, envs, field, r)
		if rel == nil {
			relatedIDs[r.ID] = r.ID != "" // reported; its readers are not
			continue
		}
		if relatedIDs[r.ID] {
			l.add(field+".id", "duplicate related id %q: each needs its own", r.ID)
			continue
		}
		relatedIDs[r.ID] = true
		d.Related = append(d.Related, rel)
	}
	return relatedIDs
}

// Default fills the fields an Operator may leave out: names derived from
// the kind, scope Namespaced, served versions, and the storage version of a
// single-version resource.
func Default(op *v1alpha1.Operator) {
	r := &op.Spec.Resource
	if r.IsZero() {
		return // a watch or an operator-wide schedule
	}
	if r.Scope == "" {
		r.Scope = v1alpha1.NamespaceScoped
	}
	lower := strings.ToLower(r.Kind)
	if r.Names.Singular == "" {
		r.Names.Singular = lower
	}
	if r.Names.Plural == "" {
		r.Names.Plural = plural(lower)
	}
	if r.Names.ListKind == "" && r.Kind != "" {
		r.Names.ListKind = r.Kind + "List"
	}
	for i := range r.Versions {
		if r.Versions[i].Served == nil {
			r.Versions[i].Served = ptr.To(true)
		}
	}
	if len(r.Versions) == 1 {
		r.Versions[0].Storage = true
	}
}

// plural is the English plural Kubernetes tools derive from a kind.
func plural(s string) string {
	switch {
	case s == "":
		return ""
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case strings.HasSuffix(s, "y") && len(s) > 1 && !strings.ContainsRune("aeiou", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// validateResource checks spec.resource and returns its storage version.
func validateResource(l *errorList, op *v1alpha1.Operator, d *Definition) *v1alpha1.ResourceVersion {
	r := op.Spec.Resource
	if !groupRE.MatchString(r.Group) {
		l.add("spec.resource.group", "%q is not an API group: expected a DNS subdomain with at least one dot, like demo.example.com", r.Group)
	}
	if !kindRE.MatchString(r.Kind) {
		l.add("spec.resource.kind", "%q is not a kind: expected CamelCase starting with an upper-case letter, like Printer", r.Kind)
	}
	if r.Scope != v1alpha1.NamespaceScoped && r.Scope != v1alpha1.ClusterScoped {
		l.add("spec.resource.scope", "%q: expected Namespaced or Cluster", r.Scope)
	}
	for _, n := range []struct{ field, value string }{{"plural", r.Names.Plural}, {"singular", r.Names.Singular}} {
		if msgs := validation.IsDNS1035Label(n.value); len(msgs) > 0 {
			l.add("spec.resource.names."+n.field, "%q: %s", n.value, strings.Join(msgs, "; "))
		}
	}
	if len(r.Versions) == 0 {
		l.add("spec.resource.versions", "at least one version is required")
		return nil
	}
	var storage *v1alpha1.ResourceVersion
	seen := map[string]bool{}
	for i := range r.Versions {
		v := &op.Spec.Resource.Versions[i]
		field := fmt.Sprintf("spec.resource.versions[%d]", i)
		if !versionRE.MatchString(v.Name) {
			l.add(field+".name", "%q is not a version name: expected v1, v2beta1, v1alpha3...", v.Name)
		}
		if seen[v.Name] {
			l.add(field+".name", "duplicate version %q", v.Name)
		}
		seen[v.Name] = true
		if v.Storage {
			if storage != nil {
				l.add(field+".storage", "versions %s and %s both set storage: exactly one may", storage.Name, v.Name)
			}
			storage = v
		}
		if v.Schema != nil && v.Schema.Type != "object" {
			l.add(field+".schema.type", "the schema of .spec must have type: object, not %q", v.Schema.Type)
		}
		for j, c := range v.PrinterColumns {
			cf := fmt.Sprintf("%s.printerColumns[%d]", field, j)
			if !strings.HasPrefix(c.JSONPath, ".") {
				l.add(cf+".jsonPath", "%q: a column path starts with a dot, like .spec.text", c.JSONPath)
			}
			if !slices.Contains([]string{"integer", "number", "string", "boolean", "date"}, c.Type) {
				l.add(cf+".type", "%q: expected integer, number, string, boolean or date", c.Type)
			}
		}
	}
	if storage == nil {
		l.add("spec.resource.versions", "no version sets storage: true; exactly one must")
		return nil
	}
	d.GVK = schema.GroupVersionKind{Group: r.Group, Version: storage.Name, Kind: r.Kind}
	d.StorageVersion = storage.Name
	d.Plural = r.Names.Plural
	if builtin, ok := builtinKinds[r.Names.Plural]; ok {
		l.warn(d, "spec.resource.kind", "kind %s in group %s shadows the built-in %s: `kubectl get %s` will show the built-in one, and yours only as %s.%s; prefer a kind of your own, or give it names of its own (spec.resource.names.plural, shortNames)",
			r.Kind, r.Group, builtin, r.Names.Plural, r.Names.Plural, r.Group)
	}
	return storage
}

// builtinKinds are the resources of a cluster that kubectl users name by
// their plural, with their group/kind.
var builtinKinds = map[string]string{
	"pods": "v1 Pod", "services": "v1 Service", "configmaps": "v1 ConfigMap", "secrets": "v1 Secret",
	"namespaces": "v1 Namespace", "nodes": "v1 Node", "events": "v1 Event", "serviceaccounts": "v1 ServiceAccount",
	"persistentvolumeclaims": "v1 PersistentVolumeClaim", "persistentvolumes": "v1 PersistentVolume", "endpoints": "v1 Endpoints",
	"deployments": "apps/v1 Deployment", "statefulsets": "apps/v1 StatefulSet", "daemonsets": "apps/v1 DaemonSet", "replicasets": "apps/v1 ReplicaSet",
	"jobs": "batch/v1 Job", "cronjobs": "batch/v1 CronJob", "ingresses": "networking.k8s.io/v1 Ingress",
	"networkpolicies": "networking.k8s.io/v1 NetworkPolicy", "roles": "rbac.authorization.k8s.io/v1 Role",
	"rolebindings": "rbac.authorization.k8s.io/v1 RoleBinding", "clusterroles": "rbac.authorization.k8s.io/v1 ClusterRole",
	"horizontalpodautoscalers": "autoscaling/v2 HorizontalPodAutoscaler", "customresourcedefinitions": "apiextensions.k8s.io/v1 CustomResourceDefinition",
}

// compileConditions compiles boolean expressions, each with or without ${}.
func compileConditions(l *errorList, env *cel.Env, field string, exprs []string) []*Expression {
	var out []*Expression
	for i, src := range exprs {
		if e := compileCondition(l, env, fmt.Sprintf("%s[%d]", field, i), src); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// compileCondition compiles one boolean expression, with or without ${}.
func compileCondition(l *errorList, env *cel.Env, field, src string) *Expression {
	src = strings.TrimSpace(src)
	if strings.HasPrefix(src, "${") && strings.HasSuffix(src, "}") {
		src = strings.TrimSpace(src[2 : len(src)-1])
	}
	e := &Expression{Source: src, Field: field}
	l.expressions++
	if err := compile(env, e); err != nil {
		l.add(field, "%v", err)
		return nil
	}
	if e.Type != cel.BoolType && e.Type != cel.DynType {
		l.add(field, "${%s} is of type %s: a condition must be a bool", src, e.Type)
		return nil
	}
	return e
}

// compileString compiles the expressions of one template string; a string
// without any gives a slot of literals ("$${" already turned into "${").
func compileString(l *errorList, env *cel.Env, field, s string, path []any) *Slot {
	parts, err := splitTemplate(s)
	if err != nil {
		l.add(field, "%v", err)
		return nil
	}
	slot := &Slot{Path: path, parts: parts}
	for _, p := range parts {
		if p.expr == nil {
			continue
		}
		p.expr.Field = field
		l.expressions++
		if err := compile(env, p.expr); err != nil {
			l.add(field, "%v", err)
			return nil
		}
		if len(parts) > 1 && !stringable(p.expr.Type) {
			l.add(field, "${%s} is of type %s and cannot be part of a longer string; make the whole value one ${...}", p.expr.Source, p.expr.Type)
			return nil
		}
	}
	return slot
}

// verbatim reports whether the slot evaluates to s itself: no expression and
// no escape, so the template can keep the string as it is.
func (s *Slot) verbatim(str string) bool {
	switch len(s.parts) {
	case 0:
		return str == ""
	case 1:
		return s.parts[0].expr == nil && s.parts[0].literal == str
	}
	return false
}

// Expressions returns the slot's expressions.
func (s *Slot) Expressions() []*Expression {
	var out []*Expression
	for _, p := range s.parts {
		if p.expr != nil {
			out = append(out, p.expr)
		}
	}
	return out
}

// checkReferences requires every children.<id> to name a child and every
// related.<id> a related object, and records each child's dependencies.
func checkReferences(l *errorList, d *Definition, ids, relatedIDs map[string]bool) {
	check := func(e *Expression) {
		for _, id := range e.Children {
			if !ids[id] {
				l.add(e.Field, "${%s} reads children.%s, but there is no child with id %q (children: %s)", e.Source, id, id, strings.Join(slices.Sorted(maps.Keys(ids)), ", "))
			}
		}
		for _, id := range e.Related {
			if !relatedIDs[id] {
				known := "none: declare it under spec.related"
				if len(relatedIDs) > 0 {
					known = strings.Join(slices.Sorted(maps.Keys(relatedIDs)), ", ")
				}
				l.add(e.Field, "${%s} reads related.%s, but there is no related object with id %q (related: %s)", e.Source, id, id, known)
			}
		}
	}
	for _, c := range d.Children {
		deps := map[string]bool{}
		for _, e := range c.expressions() {
			check(e)
			for _, id := range e.Children {
				if ids[id] {
					deps[id] = true
				}
			}
		}
		c.DependsOn = slices.Sorted(maps.Keys(deps))
	}
	for _, s := range d.Status {
		for _, e := range s.Slot.Expressions() {
			check(e)
		}
	}
	for _, h := range d.Handlers {
		if h.When != nil {
			check(h.When)
		}
	}
	for _, t := range d.States.transitions() {
		if t.When != nil {
			check(t.When)
		}
	}
}

// walkStrings calls fn for every string in v, with its path.
func walkStrings(v any, path []any, fn func(path []any, s string)) {
	switch t := v.(type) {
	case string:
		fn(slices.Clone(path), t)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			walkStrings(t[k], append(path, k), fn)
		}
	case []any:
		for i, item := range t {
			walkStrings(item, append(path, i), fn)
		}
	}
}

// pathString renders a template path as .a.b[0].
func pathString(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch k := p.(type) {
		case string:
			b.WriteString("." + k)
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		}
	}
	return b.String()
}
