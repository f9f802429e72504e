package scenario

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"

	"github.com/opkit-dev/opkit/internal/definition"
)

//go:embed scenario.schema.json
var schemaJSON []byte

// schemaURL is the schema's $id.
const schemaURL = "https://opkit.dev/schemas/scenario.schema.json"

// Schema returns the JSON Schema (draft 2020-12) of one scenario document,
// for editors and `opkit test --schema`. Load checks every document
// against it first. It is a copy: the caller may change it.
func Schema() []byte { return slices.Clone(schemaJSON) }

// compiledSchema is the schema, compiled once.
var compiledSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
})

// schemaTree is the schema as a YAML node tree, which keeps the order of
// its properties, for messages that list them.
var schemaTree = sync.OnceValue(func() *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(schemaJSON, &doc); err != nil || len(doc.Content) == 0 {
		panic(fmt.Sprintf("scenario: the embedded schema does not parse: %v", err))
	}
	return doc.Content[0]
})

// schemaAt finds the schema node at a location such as
// https://opkit.dev/schemas/scenario.schema.json#/$defs/step, plus the
// keywords after it; nil when there is none.
func schemaAt(url string, keywords ...string) *yaml.Node {
	_, fragment, _ := strings.Cut(url, "#")
	tokens := append(strings.Split(strings.TrimPrefix(fragment, "/"), "/"), keywords...)
	n := schemaTree()
	for _, tok := range tokens {
		if tok == "" {
			continue
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next = n.Content[i+1]
				}
			}
			n = next
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
		if n == nil {
			return nil
		}
	}
	return n
}

// propertyNames lists the properties of the schema at url, in order.
func propertyNames(url string) []string {
	props := schemaAt(url, "properties")
	if props == nil || props.Kind != yaml.MappingNode {
		return nil
	}
	var names []string
	for i := 0; i < len(props.Content); i += 2 {
		names = append(names, props.Content[i].Value)
	}
	return names
}

// propertyTitle is the title of a property of the schema at url, or of the
// schema it refers to; empty when neither has one.
func propertyTitle(url, name string) string {
	prop := schemaAt(url, "properties", name)
	for range 4 {
		if t := definition.MappingValue(prop, "title"); t != nil {
			return t.Value
		}
		ref := definition.MappingValue(prop, "$ref")
		if ref == nil {
			return ""
		}
		prop = schemaAt(ref.Value)
	}
	return ""
}

// choices are the properties a oneOf or anyOf of the schema at url asks
// for, one per branch ({"required": [name]}).
func choices(url, keyword string) []string {
	branches := schemaAt(url, keyword)
	if branches == nil {
		return nil
	}
	var names []string
	for _, b := range branches.Content {
		if req := definition.MappingValue(b, "required"); req != nil && len(req.Content) == 1 {
			names = append(names, req.Content[0].Value)
		}
	}
	return names
}

// schemaProblem is one failed keyword of the schema.
type schemaProblem struct {
	loc  []string // the instance location, as JSON pointer tokens
	url  string   // the location of the schema holding the keyword
	kind jsonschema.ErrorKind
}

// flatten collects the failed keywords under e. A oneOf or anyOf is one
// problem, not its branches'.
func flatten(e *jsonschema.ValidationError, out []schemaProblem) []schemaProblem {
	switch e.ErrorKind.(type) {
	case *kind.OneOf, *kind.AnyOf:
		return append(out, schemaProblem{e.InstanceLocation, e.SchemaURL, e.ErrorKind})
	}
	if len(e.Causes) == 0 {
		return append(out, schemaProblem{e.InstanceLocation, e.SchemaURL, e.ErrorKind})
	}
	for _, c := range e.Causes {
		out = flatten(c, out)
	}
	return out
}

// checkSchema validates a document against the schema and reports each
// problem at its field, in words: at most one per field.
func checkSchema(l *errorList, doc any) {
	sch, err := compiledSchema()
	if err != nil {
		l.add("", "opkit's own scenario schema does not load: %v", err)
		return
	}
	err = sch.Validate(doc)
	if err == nil {
		return
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		l.add("", "%v", err)
		return
	}
	problems := flatten(verr, nil)
	// A mistyped key is what most often leaves an object without the
	// choice a oneOf or anyOf asks for, or a field without the one it
	// goes with: say only the former.
	unknown := map[string]bool{}
	for _, p := range problems {
		if _, ok := p.kind.(*kind.AdditionalProperties); ok {
			unknown[strings.Join(p.loc, "/")] = true
		}
	}
	// One problem per field is said: a value of the wrong type, which says
	// more than what else it breaks, or else the same one on every run
	// (the validator finds them in map order).
	slices.SortFunc(problems, func(a, b schemaProblem) int {
		_, at := a.kind.(*kind.Type)
		_, bt := b.kind.(*kind.Type)
		return cmp.Or(
			-cmp.Compare(boolRank(at), boolRank(bt)),
			slices.Compare(a.loc, b.loc),
			cmp.Compare(fmt.Sprintf("%T", a.kind), fmt.Sprintf("%T", b.kind)),
			cmp.Compare(a.url, b.url),
		)
	})
	for _, p := range problems {
		field, value := locate(doc, p.loc)
		if unknown[strings.Join(p.loc, "/")] && missesAKey(p.kind) {
			continue
		}
		reportSchemaProblem(l, p, field, value)
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// missesAKey reports whether a failed keyword asks for a key that is not
// there.
func missesAKey(k jsonschema.ErrorKind) bool {
	switch k := k.(type) {
	case *kind.OneOf:
		return k.Subschemas == nil
	case *kind.AnyOf, *kind.DependentRequired:
		return true
	}
	return false
}

// locate turns an instance location into a field path (steps[2].expect)
// and the value there.
func locate(doc any, loc []string) (string, any) {
	field := ""
	v := doc
	for _, tok := range loc {
		switch c := v.(type) {
		case []any:
			i, _ := strconv.Atoi(tok)
			field = itemPath(field, i)
			if i >= 0 && i < len(c) {
				v = c[i]
			} else {
				v = nil
			}
		case map[string]any:
			field = keyPath(field, tok)
			v = c[tok]
		default:
			field = keyPath(field, tok)
			v = nil
		}
	}
	return field, v
}

// reportSchemaProblem says what a failed keyword means for the field.
func reportSchemaProblem(l *errorList, p schemaProblem, field string, value any) {
	def := p.url[strings.LastIndex(p.url, "/")+1:] // the $defs name, for most
	switch k := p.kind.(type) {
	case *kind.AdditionalProperties:
		for _, name := range k.Properties {
			f := keyPath(field, name)
			switch {
			case strings.HasSuffix(p.url, "/$defs/step"):
				l.add(f, "unknown step %q: a step is one of %s; its other fields are name and refused", name, strings.Join(stepKinds, ", "))
			case strings.HasSuffix(p.url, "/$defs/ref") && name == "namespace":
				l.add(f, "an object's namespace is the scenario's own: remove namespace")
			default:
				l.add(f, "unknown field %q; known: %s", name, strings.Join(propertyNames(p.url), ", "))
			}
		}
	case *kind.Required:
		for _, name := range k.Missing {
			if strings.HasSuffix(p.url, "/$defs/expectRun/else") && name == "handler" {
				l.add(keyPath(field, name), "required: a handler's name; only a state transition's record (trigger: %s) has none", strings.Join(TransitionTriggers, ", "))
				continue
			}
			if title := propertyTitle(p.url, name); title != "" {
				l.add(keyPath(field, name), "required: %s", title)
			} else {
				l.add(keyPath(field, name), "required")
			}
		}
	case *kind.Type:
		l.add(field, "%s", typeMessage(field, def, k, value))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		msg := fmt.Sprintf("must be one of %s, not %s", strings.Join(want, ", "), describeValue(value))
		if _, ok := value.(bool); ok {
			msg += ": quote it (YAML reads True and False unquoted as booleans)"
		}
		l.add(field, "%s", msg)
	case *kind.Const:
		if strings.HasSuffix(field, ".absent") {
			l.add(field, "must be true, to expect that the object does not exist; to wait until it exists, use matches: {} instead")
			return
		}
		l.add(field, "must be %v", k.Want)
	case *kind.MinItems:
		l.add(field, "must not be empty: give at least %d", k.Want)
	case *kind.MinLength, *kind.MinProperties:
		l.add(field, "must not be empty")
	case *kind.MaxLength:
		l.add(field, "is %d characters long; at most %d are allowed", k.Got, k.Want)
	case *kind.Pattern:
		switch def {
		case "duration":
			l.add(field, "%s", durationSyntaxMessage(k.Got))
		case "name":
			l.add(field, "%s", nameMessage(k.Got))
		default:
			l.add(field, "%q does not match %s", k.Got, k.Want)
		}
	case *kind.Minimum:
		l.add(field, "must be at least %s", k.Want.RatString())
	case *kind.Maximum:
		l.add(field, "must be at most %s", k.Want.RatString())
	case *kind.UniqueItems:
		l.add(itemPath(field, k.Duplicates[1]), "listed twice (also as %s): give it once", itemPath(field, k.Duplicates[0]))
	case *kind.DependentRequired:
		l.add(keyPath(field, k.Prop), "only with %s: add %s, or remove %s", strings.Join(k.Missing, ", "), strings.Join(k.Missing, ", "), k.Prop)
	default:
		if !reportCombinatorProblem(l, p, field, value) {
			l.add(field, "breaks the schema's %s (see docs/scenarios.md)", strings.Join(p.kind.KeywordPath(), "/"))
		}
	}
}

// reportCombinatorProblem reports a problem of a schema's combinators (a
// false schema, oneOf, anyOf), and whether p is one.
func reportCombinatorProblem(l *errorList, p schemaProblem, field string, value any) bool {
	switch p.kind.(type) {
	case *kind.FalseSchema:
		switch {
		case strings.Contains(p.url, "/$defs/expect/then/"):
			l.add(field, "cannot go with absent: true: an absent object has nothing to check; remove one of them")
		case strings.Contains(p.url, "/$defs/expectRun/then/"):
			l.add(field, "a state transition (trigger: %s) is opkit's, not a handler's run: remove handler, or give a handler's trigger", strings.Join(TransitionTriggers, ", "))
		case strings.Contains(p.url, "/$defs/expectRun/else/"):
			l.add(field, "names a state of a transition: only with a transition's trigger (%s), and without handler", strings.Join(TransitionTriggers, ", "))
		case strings.HasSuffix(field, ".metadata.namespace"):
			l.add(field, "%s", namespaceMessage)
		default:
			l.add(field, "not allowed here")
		}
	case *kind.OneOf:
		names := choices(p.url, "oneOf")
		given := givenKeys(value, names)
		switch {
		case strings.HasSuffix(p.url, "/$defs/step") && len(given) == 0:
			l.add(field, "a step needs an action: one of %s", strings.Join(names, ", "))
		case strings.HasSuffix(p.url, "/$defs/step"):
			l.add(field, "a step has one action, and this one has %d (%s): split it into steps", len(given), strings.Join(given, ", "))
		case len(given) == 0:
			l.add(field, "needs one of %s", strings.Join(names, ", "))
		default:
			l.add(field, "has %s: give only one of %s", strings.Join(given, " and "), strings.Join(names, ", "))
		}
	case *kind.AnyOf:
		msg := "needs at least one of " + strings.Join(choices(p.url, "anyOf"), ", ")
		switch {
		case strings.HasSuffix(p.url, "/dependentSchemas/object"):
			msg = "an expect of an object needs a check: at least one of " + strings.Join(choices(p.url, "anyOf"), ", ")
		case strings.HasSuffix(p.url, "/$defs/step/dependentSchemas/refused"):
			// Said at refused, which is what does not fit, unless the step
			// has no action at all, which the step's oneOf says.
			if kinds := givenKeys(value, stepKinds); len(kinds) > 0 {
				l.add(keyPath(field, "refused"), "only with apply, patch or delete, whose request the API server may refuse; not with %s", kinds[0])
			}
			return true
		}
		l.add(field, "%s", msg)
	default:
		return false
	}
	return true
}

// givenKeys are the names that a map value has as keys.
func givenKeys(value any, names []string) []string {
	m, _ := value.(map[string]any)
	var given []string
	for _, n := range names {
		if _, ok := m[n]; ok {
			given = append(given, n)
		}
	}
	return given
}

func typeMessage(field, def string, k *kind.Type, value any) string {
	want := make([]string, len(k.Want))
	for i, w := range k.Want {
		want[i] = article(w)
	}
	got := describeValue(value)
	switch {
	case field == "":
		return fmt.Sprintf("a scenario is a mapping of scenario:, operators: and steps:, not %s", got)
	case def == "duration":
		return fmt.Sprintf("must be a Go duration with its unit, such as 30s, 5m or 1h30m, not %s", got)
	case len(k.Want) == 1 && k.Want[0] == "string" && (k.Got == "number" || k.Got == "boolean" || k.Got == "integer"):
		return fmt.Sprintf("must be a string, not %s: quote it", got)
	}
	return fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), got)
}

// article names a JSON Schema type for a YAML author.
func article(typ string) string {
	switch typ {
	case "object":
		return "a mapping"
	case "array":
		return "a list"
	case "integer":
		return "an integer"
	case "boolean":
		return "true or false"
	case "null":
		return "null"
	}
	return "a " + typ
}

// describeValue names a value for a message: its type, and a scalar's
// value.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	}
	return fmt.Sprintf("the number %v", v)
}
