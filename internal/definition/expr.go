package definition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/ptr"
)

// Expression is one compiled ${...} CEL expression.
type Expression struct {
	// Source is the expression without ${ and }.
	Source string
	// Field is where it appears, e.g. spec.children[0].template.metadata.name.
	Field string
	// Children are the ids of the children it reads (children.<id>).
	Children []string
	// Related are the ids of the related objects it reads (related.<id>).
	Related []string
	// Type is its checked output type.
	Type    *cel.Type
	Program cel.Program
	// path is the field the expression reads, when that is all it does
	// (see fieldPath).
	path []string
}

// part is a piece of a template string: literal text or an expression.
type part struct {
	literal string
	expr    *Expression
}

// splitTemplate cuts s into literals and ${...} expressions. The braces of
// CEL map literals and of quoted strings inside an expression do not end
// it; "$${" stands for a literal "${".
func splitTemplate(s string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	i := 0
	for {
		start := strings.Index(s[i:], "${")
		if start < 0 {
			lit.WriteString(s[i:])
			break
		}
		start += i
		if start > i && s[start-1] == '$' { // $${ -> ${
			lit.WriteString(s[i:start-1] + "${")
			i = start + 2
			continue
		}
		lit.WriteString(s[i:start])
		end, err := matchBrace(s, start+2)
		if err != nil {
			return nil, err
		}
		if lit.Len() > 0 {
			parts = append(parts, part{literal: lit.String()})
			lit.Reset()
		}
		src := strings.TrimSpace(s[start+2 : end])
		if src == "" {
			return nil, fmt.Errorf("empty expression ${} at offset %d", start)
		}
		parts = append(parts, part{expr: &Expression{Source: src}})
		i = end + 1
	}
	if lit.Len() > 0 {
		parts = append(parts, part{literal: lit.String()})
	}
	return parts, nil
}

// matchBrace returns the index of the } that closes the ${ before from.
func matchBrace(s string, from int) (int, error) {
	depth := 1
	var quote byte
	for j := from; j < len(s); j++ {
		c := s[j]
		if quote != 0 {
			switch c {
			case '\\':
				j++
			case quote:
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			quote = c
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j, nil
			}
		}
	}
	return 0, fmt.Errorf("unterminated expression: %q has no closing }", s[from-2:])
}

// celEnvs holds the CEL environments of one definition.
type celEnvs struct {
	// object: self is the custom resource (typed by its schema), children
	// holds each child's current object (typed by the child kind's schema
	// when it is known, dyn otherwise).
	object *cel.Env
	// guard is object with run, for the guards of states' transitions:
	// the state's last finished enter run (handler, outcome, error).
	guard *cel.Env
	// child: self is one child object, for readyWhen; by child id, with
	// untyped for children whose schema is not known.
	child   map[string]*cel.Env
	untyped *cel.Env
}

func (e *celEnvs) childEnv(id string) *cel.Env {
	if env := e.child[id]; env != nil {
		return env
	}
	return e.untyped
}

// SchemaResolver returns the OpenAPI schema of a kind, such as the API
// server publishes at /openapi/v3. The resolver of
// k8s.io/apiserver/pkg/cel/openapi/resolver is one.
type SchemaResolver interface {
	ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error)
}

// selfSchema wraps the schema of .spec, and the one of .status the
// expressions read (nil for an open object: see statusReadSchema), into
// the whole object's schema.
func selfSchema(spec, status *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strMap := apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &str}}
	if spec == nil {
		spec = &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	}
	return &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": str,
			"kind":       str,
			"metadata": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"name": str, "namespace": str, "uid": str, "generateName": str,
				"creationTimestamp": str,
				"generation":        {Type: "integer", Format: "int64"},
				"labels":            strMap,
				"annotations":       strMap,
			}},
			"spec":   *spec,
			"status": *cmp.Or(status, &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}),
		},
	}
}

// newCELEnvs builds the environments from the storage version's schema
// and the schemas of the children (by id; nil for untyped), with the
// Kubernetes CEL libraries (quantities, URLs, regex, lists...).
func newCELEnvs(specSchema, statusSchema *apiextensionsv1.JSONSchemaProps, ids []string, childSchemas map[string]*spec.Schema, related []relatedType) (*celEnvs, error) {
	structural, err := objectStructural(specSchema, statusSchema)
	if err != nil {
		return nil, err
	}
	return newEnvs(model.SchemaDeclType(structural, false).MaybeAssignTypeName("__opkit_self"), ids, childSchemas, related)
}

// watchedEnvs builds the environments of an operator without a custom
// resource: self is a watched object of a kind whose schema is s (dyn
// when s is nil, or for an operator-wide schedule); there are no children
// and no related objects.
func watchedEnvs(s *spec.Schema) (*celEnvs, error) {
	selfType := apiservercel.DynType
	if s != nil {
		selfType = common.SchemaDeclType(&openapi.Schema{Schema: s}, false).MaybeAssignTypeName("__opkit_self")
	}
	return newEnvs(selfType, nil, nil, nil)
}

// newEnvs builds the environments with self of type selfType.
func newEnvs(selfType *apiservercel.DeclType, ids []string, childSchemas map[string]*spec.Schema, related []relatedType) (*celEnvs, error) {
	var declTypes []*apiservercel.DeclType
	if selfType != apiservercel.DynType {
		declTypes = append(declTypes, selfType)
	}
	childrenType := cel.MapType(cel.StringType, cel.DynType)
	childTypes := map[string]*apiservercel.DeclType{}
	if len(childSchemas) > 0 {
		// children is an object with one field per child: children.<id>
		// is then checked against the child kind's schema.
		fields := map[string]*apiservercel.DeclField{}
		for _, id := range ids {
			t := apiservercel.DynType
			if s := childSchemas[id]; s != nil {
				t = common.SchemaDeclType(&openapi.Schema{Schema: s}, false).MaybeAssignTypeName("__opkit_child_" + id)
				childTypes[id] = t
				declTypes = append(declTypes, t)
			}
			fields[id] = apiservercel.NewDeclField(id, t, false, nil, nil)
		}
		obj := apiservercel.NewObjectType("__opkit_children", fields)
		declTypes = append(declTypes, obj)
		childrenType = obj.CelType()
	}
	relatedVar := cel.MapType(cel.StringType, cel.DynType)
	if slices.ContainsFunc(related, func(r relatedType) bool { return r.schema != nil }) {
		// related is an object with one field per id: an object of the
		// kind's schema, or a list of them.
		fields := map[string]*apiservercel.DeclField{}
		for _, r := range related {
			t := apiservercel.DynType
			if r.schema != nil {
				t = common.SchemaDeclType(&openapi.Schema{Schema: r.schema}, false).MaybeAssignTypeName("__opkit_related_" + r.id)
				declTypes = append(declTypes, t)
				if r.list {
					t = apiservercel.NewListType(t, -1)
				}
			}
			fields[r.id] = apiservercel.NewDeclField(r.id, t, false, nil, nil)
		}
		obj := apiservercel.NewObjectType("__opkit_related", fields)
		declTypes = append(declTypes, obj)
		relatedVar = obj.CelType()
	}
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	objectSet, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable("self", selfType.CelType()),
			cel.Variable("children", childrenType),
			cel.Variable("related", relatedVar),
		},
		DeclTypes: declTypes,
	})
	if err != nil {
		return nil, err
	}
	envs := &celEnvs{object: objectSet.NewExpressionsEnv(), child: map[string]*cel.Env{}}
	if envs.guard, err = envs.object.Extend(cel.Variable("run", cel.MapType(cel.StringType, cel.StringType))); err != nil {
		return nil, err
	}
	childSet, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable("self", cel.DynType)},
	})
	if err != nil {
		return nil, err
	}
	envs.untyped = childSet.NewExpressionsEnv()
	for id, t := range childTypes {
		set, err := base.Extend(environment.VersionedOptions{
			IntroducedVersion: version.MajorMinor(1, 0),
			EnvOptions:        []cel.EnvOption{cel.Variable("self", t.CelType())},
			DeclTypes:         []*apiservercel.DeclType{t},
		})
		if err != nil {
			return nil, err
		}
		envs.child[id] = set.NewExpressionsEnv()
	}
	return envs, nil
}

// compile parses and type-checks e in env and finds the children it reads.
func compile(env *cel.Env, e *Expression) error {
	ast, iss := env.Compile(e.Source)
	if iss.Err() != nil {
		return fmt.Errorf("${%s}: %s", e.Source, strings.ReplaceAll(iss.Err().Error(), "\n", "\n  "))
	}
	prog, err := env.Program(ast, cel.CostLimit(1_000_000), cel.InterruptCheckFrequency(100))
	if err != nil {
		return fmt.Errorf("${%s}: %w", e.Source, err)
	}
	e.Type, e.Program, e.path = ast.OutputType(), prog, fieldPath(ast)
	e.Children = references(ast.NativeRep(), "children")
	e.Related = references(ast.NativeRep(), "related")
	return nil
}

// references returns the ids in <name>.<id> and <name>["<id>"], name being
// children or related.
func references(ast *celast.AST, name string) []string {
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	isChildren := func(e celast.Expr) bool {
		return e.Kind() == celast.IdentKind && e.AsIdent() == name
	}
	celast.PostOrderVisit(ast.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			if sel := e.AsSelect(); isChildren(sel.Operand()) {
				add(sel.FieldName())
			}
		case celast.CallKind:
			call := e.AsCall()
			if call.FunctionName() == "_[_]" && len(call.Args()) == 2 && isChildren(call.Args()[0]) &&
				call.Args()[1].Kind() == celast.LiteralKind {
				if s, ok := call.Args()[1].AsLiteral().Value().(string); ok {
					add(s)
				}
			}
		}
	}))
	return ids
}

// stringable reports whether a value of type t can be spliced into a string.
func stringable(t *cel.Type) bool {
	switch t.Kind() {
	case types.StringKind, types.IntKind, types.UintKind, types.DoubleKind, types.BoolKind, types.DynKind, types.AnyKind:
		return true
	}
	return false
}
