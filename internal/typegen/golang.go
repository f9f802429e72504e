package typegen

import (
	"fmt"
	"go/format"
	"strconv"
	"strings"
)

// handlerImport is the Go SDK's package.
const handlerImport = "github.com/opkit-dev/opkit/pkg/handler"

// goWriter writes the Go file: structs and named types for package
// handler (the SDK).
type goWriter struct {
	m    *model
	json bool // encoding/json is used
}

func writeGo(m *model, header, what, pkg string) ([]byte, error) {
	w := &goWriter{m: m}
	var body strings.Builder
	for _, d := range m.decls {
		body.WriteString("\n")
		switch d := d.(type) {
		case *structDecl:
			w.structType(&body, d)
		case *enumDecl:
			w.enum(&body, d)
		case *contextDecl:
			w.context(&body, d)
		case *resultDecl:
			w.result(&body, d)
		}
	}
	var b strings.Builder
	b.WriteString("// " + header + "\n\n")
	w.comment(&b, "", what)
	b.WriteString("\npackage " + pkg + "\n\nimport (\n")
	if w.json {
		b.WriteString("\t\"encoding/json\"\n\n")
	}
	b.WriteString("\t\"" + handlerImport + "\"\n)\n")
	b.WriteString(body.String())
	src, err := format.Source([]byte(b.String()))
	if err != nil {
		return nil, fmt.Errorf("the Go generated does not parse (a bug of opkit's): %w\n%s", err, b.String())
	}
	return src, nil
}

// comment writes text as // comments at indent.
func (w *goWriter) comment(b *strings.Builder, indent, text string) {
	for _, l := range wrap(text, 76) {
		if l == "" {
			b.WriteString(indent + "//\n")
			continue
		}
		b.WriteString(indent + "// " + l + "\n")
	}
}

// typ is the Go type of t; optional: for a field that may be absent,
// which makes a scalar or a struct a pointer.
func (w *goWriter) typ(t *typeRef, optional bool) string {
	if t == nil {
		return "struct{}"
	}
	var s string
	pointer := optional || t.nullable
	switch t.kind {
	case tString:
		s = "string"
	case tConst:
		s = "string"
	case tInt:
		s = fmt.Sprintf("int%d", t.bits)
	case tFloat:
		s = "float64"
	case tBool:
		s = "bool"
	case tIntOrString:
		return "any"
	case tJSON:
		w.json = true
		return "json.RawMessage"
	case tMap:
		if t.elem == nil {
			return "map[string]any"
		}
		return "map[string]" + w.typ(t.elem, false)
	case tList:
		return "[]" + w.typ(t.elem, false)
	case tNamed:
		s = t.name
	case tSDK:
		s = "handler." + t.name
	}
	if pointer {
		s = "*" + s
	}
	return s
}

func (w *goWriter) structType(b *strings.Builder, d *structDecl) {
	verb := " is "
	if d.holds {
		verb = " holds "
	}
	doc := d.name + verb + d.what + "."
	if d.open {
		doc = joinDoc(doc, d.doc, "Objects keep fields beside these (x-kubernetes-preserve-unknown-fields), which this type leaves out.")
	} else {
		doc = joinDoc(doc, d.doc)
	}
	w.comment(b, "", doc)
	if len(d.fields) == 0 {
		b.WriteString("type " + d.name + " struct{}\n")
		return
	}
	b.WriteString("type " + d.name + " struct {\n")
	for _, f := range d.fields {
		doc := f.doc
		if f.t.kind == tConst {
			doc = joinDoc(doc, "Always "+quoted(f.t.name)+".")
		}
		if doc != "" {
			w.comment(b, "\t", doc)
		}
		tag := f.json
		switch {
		case !f.required:
			tag += ",omitempty"
		case tag == "-":
			// encoding/json skips a field tagged "-": "-," names it so.
			tag += ","
		}
		tag = "json:" + quoted(tag)
		if strings.Contains(tag, "`") {
			tag = strconv.Quote(tag) // not a raw string
		} else {
			tag = "`" + tag + "`"
		}
		fmt.Fprintf(b, "\t%s %s %s\n", f.goName, w.typ(f.t, !f.required), tag)
	}
	b.WriteString("}\n")
	if d.key != "" {
		w.accessor(b, d)
	}
}

// accessor writes the function that reads a context's related objects
// or children as their type: the SDK's context holds them as JSON.
func (w *goWriter) accessor(b *strings.Builder, d *structDecl) {
	w.json = true
	name := w.m.names.claimGo(d.name+"Of", "the function that reads "+d.name)
	field := "Related"
	what := "related objects"
	empty := "empty when c has none: in a delete run or when none exists"
	if d.key == "children" {
		field, what, empty = "Children", "children", "empty in a delete run"
	}
	b.WriteString("\n")
	w.comment(b, "", fmt.Sprintf("%s reads the %s of c's object, c.%s, as a %s (%s).", name, what, field, d.name, empty))
	fmt.Fprintf(b, "func %s[O, Old any](c *handler.Context[O, Old]) (*%s, error) {\n", name, d.name)
	fmt.Fprintf(b, "\traw, err := json.Marshal(c.%s)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n", field)
	fmt.Fprintf(b, "\tvar v %s\n\tif err := json.Unmarshal(raw, &v); err != nil {\n\t\treturn nil, err\n\t}\n\treturn &v, nil\n}\n", d.name)
}

func (w *goWriter) enum(b *strings.Builder, d *enumDecl) {
	base := "string"
	switch d.base {
	case tInt:
		base = fmt.Sprintf("int%d", d.bits)
	case tFloat:
		base = "float64"
	}
	w.comment(b, "", joinDoc(d.name+" is "+d.what+".", d.doc))
	fmt.Fprintf(b, "type %s %s\n\n", d.name, base)
	fmt.Fprintf(b, "// The values of %s.\nconst (\n", d.name)
	for _, v := range d.values {
		fmt.Fprintf(b, "\t%s %s = %s\n", v.goName, d.name, v.literal)
	}
	b.WriteString(")\n")
}

func (w *goWriter) context(b *strings.Builder, d *contextDecl) {
	var expr, table string
	switch {
	case d.admission:
		expr = "handler.AdmissionContext[" + w.typ(d.object, false) + "]"
		table = "handler.Admission[" + w.typ(d.object, false) + "]"
	case d.object == nil:
		expr = "handler.Context[struct{}, struct{}]"
	default:
		expr = "handler.Context[" + w.typ(d.object, false) + ", " + w.typ(d.old, false) + "]"
	}
	doc := fmt.Sprintf("%s is the binding context of handler %s: %s.", d.name, d.handler, d.what)
	switch {
	case d.event:
		doc = joinDoc(doc, "Its Event is the delivery; its Object is nil.")
	case d.operatorWideSchedule:
		doc = joinDoc(doc, "Its Schedule is the slot; its Object is nil.")
	}
	var reads []string
	if d.related != nil {
		reads = append(reads, d.related.name+"Of(c) reads its related objects")
	}
	if d.children != nil {
		reads = append(reads, d.children.name+"Of(c) its children")
	}
	if len(reads) > 0 {
		doc = joinDoc(doc, sentence(strings.Join(reads, ", ")))
	}
	w.comment(b, "", doc)
	fmt.Fprintf(b, "type %s = %s\n", d.name, expr)
	if table == "" {
		table = "handler.Handlers[" + w.typ(d.object, false) + ", " + w.typ(d.old, false) + ", " + w.statusOf(d) + "]"
	}
	name := w.m.names.claimGo(strings.TrimSuffix(d.name, "Context")+"Handlers", "the table of handler "+d.handler+"'s program")
	b.WriteString("\n")
	w.comment(b, "", fmt.Sprintf("%s is the table of handler %s's program: handler.Main(%s{handler.%s: ...}).", name, d.handler, name, goName("on-"+d.on[0])))
	fmt.Fprintf(b, "type %s = %s\n", name, table)
}

// statusOf is the status type of the result of d's handler.
func (w *goWriter) statusOf(d *contextDecl) string {
	return w.typ(d.result.status, false)
}

func (w *goWriter) result(b *strings.Builder, d *resultDecl) {
	switch {
	case d.admission:
		w.comment(b, "", fmt.Sprintf("%s is the answer of admission handler %s: allowed, message, patch, warnings.", d.name, d.handler))
		fmt.Fprintf(b, "type %s = handler.AdmissionResult\n", d.name)
	case d.status == nil:
		w.comment(b, "", fmt.Sprintf("%s is the result of handler %s. It sets no Status: %s.", d.name, d.handler, d.why))
		fmt.Fprintf(b, "type %s = handler.Result[struct{}]\n", d.name)
	default:
		w.comment(b, "", fmt.Sprintf("%s is the result of handler %s.", d.name, d.handler))
		fmt.Fprintf(b, "type %s = handler.Result[%s]\n", d.name, w.typ(d.status, false))
	}
}
