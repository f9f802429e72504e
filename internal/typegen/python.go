package typegen

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// pythonLine is the longest line the Python file has where it can help
// it (ruff's and black's default).
const pythonLine = 88

// pyWriter writes the Python module: TypedDicts and Literal aliases for
// opkit_handler (the SDK, imported as opkit).
type pyWriter struct {
	m      *model
	b      strings.Builder
	typing map[string]bool // names imported from typing
}

func writePython(m *model, header, what string) []byte {
	w := &pyWriter{m: m, typing: map[string]bool{}}
	var body strings.Builder
	for _, d := range m.dependencyOrder() {
		body.WriteString("\n\n")
		switch d := d.(type) {
		case *structDecl:
			w.class(&body, d)
		case *enumDecl:
			w.enum(&body, d)
		case *contextDecl:
			w.context(&body, d)
		case *resultDecl:
			w.result(&body, d)
		}
	}
	b := &w.b
	b.WriteString("# " + header + "\n")
	w.docstring(b, "", what)
	b.WriteString("\n")
	if len(w.typing) > 0 {
		names := slices.Sorted(maps.Keys(w.typing))
		b.WriteString("from typing import " + strings.Join(names, ", ") + "\n\n")
	}
	b.WriteString("import opkit_handler as opkit\n")
	// After the imports, one empty line before a statement, two before a
	// class or a function (isort's, and ruff's, rule); two between the
	// others.
	rest := body.String()
	if !strings.HasPrefix(rest, "\n\nclass ") && !strings.HasPrefix(rest, "\n\ndef ") {
		rest = strings.TrimPrefix(rest, "\n")
	}
	b.WriteString(rest)
	return []byte(b.String())
}

// docstring writes a docstring at indent: on one line when it fits.
func (w *pyWriter) docstring(b *strings.Builder, indent, text string) {
	text = strings.TrimSpace(text)
	if text == "" {
		return
	}
	esc := func(s string) string {
		s = strings.ReplaceAll(s, `\`, `\\`)
		return strings.ReplaceAll(s, `"""`, `\"\"\"`)
	}
	if one := indent + `"""` + esc(text) + `"""`; !strings.Contains(text, "\n") && len([]rune(one)) <= pythonLine && !strings.HasSuffix(text, `"`) {
		b.WriteString(one + "\n")
		return
	}
	lines := wrap(esc(text), min(72, pythonLine-len(indent)-3))
	b.WriteString(indent + `"""` + lines[0] + "\n")
	for _, l := range lines[1:] {
		if l == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(indent + l + "\n")
	}
	b.WriteString(indent + `"""` + "\n")
}

// comment writes text as # comments at indent.
func (w *pyWriter) comment(b *strings.Builder, indent, text string) {
	for _, l := range wrap(text, pythonLine-len(indent)-2) {
		if l == "" {
			b.WriteString(indent + "#\n")
			continue
		}
		b.WriteString(indent + "# " + l + "\n")
	}
}

// typ is the annotation of a type.
func (w *pyWriter) typ(t *typeRef) string {
	var s string
	switch t.kind {
	case tString:
		s = "str"
	case tConst:
		w.typing["Literal"] = true
		s = "Literal[" + quoted(t.name) + "]"
	case tInt:
		s = "int"
	case tFloat:
		s = "float"
	case tBool:
		s = "bool"
	case tIntOrString:
		s = "int | str"
	case tJSON:
		w.typing["Any"] = true
		s = "Any"
	case tMap:
		if t.elem == nil {
			w.typing["Any"] = true
			s = "dict[str, Any]"
		} else {
			s = "dict[str, " + w.typ(t.elem) + "]"
		}
	case tList:
		s = "list[" + w.typ(t.elem) + "]"
	case tNamed:
		s = t.name
	case tSDK:
		s = "opkit." + t.name
	}
	if t.nullable && t.kind != tJSON {
		s += " | None"
	}
	return s
}

func (w *pyWriter) fieldType(f *field) string {
	t := w.typ(f.t)
	if !f.required {
		w.typing["NotRequired"] = true
		t = "NotRequired[" + t + "]"
	}
	return t
}

func (w *pyWriter) class(b *strings.Builder, d *structDecl) {
	w.typing["TypedDict"] = true
	doc := joinDoc(sentence(d.what), d.doc)
	if d.open {
		doc = joinDoc(doc, "Objects keep fields beside these (x-kubernetes-preserve-unknown-fields); read them with .get().")
	}
	functional := slices.ContainsFunc(d.fields, func(f *field) bool { return !pythonIdentifier(f.json) })
	if functional {
		// A field that is not an identifier: the functional syntax.
		b.WriteString(d.name + " = TypedDict(\n")
		b.WriteString("    " + quoted(d.name) + ",\n")
		b.WriteString("    {\n")
		for _, f := range d.fields {
			if f.doc != "" {
				w.comment(b, "        ", f.doc)
			}
			b.WriteString(w.split("        "+quoted(f.json)+": ", w.fieldType(f), ",") + "\n")
		}
		b.WriteString("    },\n")
		b.WriteString(")\n")
		w.docstring(b, "", doc)
		return
	}
	if line := "class " + d.name + "(TypedDict):"; len(line) <= pythonLine {
		b.WriteString(line + "\n")
	} else {
		b.WriteString("class " + d.name + "(\n    TypedDict\n):\n")
	}
	w.docstring(b, "    ", doc)
	if len(d.fields) > 0 {
		b.WriteString("\n")
	}
	for _, f := range d.fields {
		b.WriteString(w.split("    "+f.json+": ", w.fieldType(f), "") + "\n")
		if f.doc != "" {
			w.docstring(b, "    ", f.doc)
		}
	}
	if d.key != "" {
		w.accessor(b, d)
	}
}

// accessor writes the function that reads a context's related objects
// or children as their type: the SDK's context types them as any
// object's.
func (w *pyWriter) accessor(b *strings.Builder, d *structDecl) {
	w.typing["Any"], w.typing["cast"] = true, true
	read := `ctx["children"]`
	doc := "Return the children of the object of ctx, by id: ctx[\"children\"], typed (empty in a delete run)."
	if d.key == "related" {
		read = `ctx.get("related", {})`
		doc = "Return the related objects of the object of ctx, by id: ctx[\"related\"], typed (empty when ctx has none: in a delete run or when none exists)."
	}
	b.WriteString("\n\n")
	if line := "def " + snake(d.name) + "(ctx: opkit.Context[Any, Any]) -> " + d.name + ":"; len(line) <= pythonLine {
		b.WriteString(line + "\n")
	} else {
		b.WriteString("def " + snake(d.name) + "(\n    ctx: opkit.Context[Any, Any],\n) -> " + d.name + ":\n")
	}
	w.docstring(b, "    ", doc)
	var lists []string
	for _, f := range d.fields {
		if d.key == "related" && f.t.kind == tList {
			lists = append(lists, f.json)
		}
	}
	if len(lists) == 0 {
		b.WriteString("    return cast(" + d.name + ", " + read + ")\n")
		return
	}
	// A context without related (a delete run, or none exists) has no
	// list either, which the type says is there: an empty one.
	b.WriteString("    related: dict[str, Any] = dict(" + read + ")\n")
	for _, id := range lists {
		b.WriteString("    related.setdefault(" + quoted(id) + ", [])\n")
	}
	b.WriteString("    return cast(" + d.name + ", related)\n")
}

// split writes prefix+expr+suffix on one line when it fits, as black
// does; otherwise with expr's outermost brackets split over lines.
func (w *pyWriter) split(prefix, expr, suffix string) string {
	line := prefix + expr + suffix
	if len([]rune(line)) <= pythonLine {
		return line
	}
	open := strings.IndexByte(expr, '[')
	if open < 0 || !strings.HasSuffix(expr, "]") {
		return line
	}
	indent := prefix[:len(prefix)-len(strings.TrimLeft(prefix, " "))]
	inner := expr[open+1 : len(expr)-1]
	head := prefix + expr[:open+1]
	parts := splitTop(inner)
	if len(parts) == 1 {
		return head + "\n" + w.split(indent+"    ", inner, "") + "\n" + indent + "]" + suffix
	}
	var out strings.Builder
	out.WriteString(head + "\n")
	for _, p := range parts {
		out.WriteString(indent + "    " + p + ",\n")
	}
	out.WriteString(indent + "]" + suffix)
	return out.String()
}

// splitTop splits s at its commas outside brackets and quotes.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	inString := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '(':
			depth++
		case c == ']' || c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

func (w *pyWriter) enum(b *strings.Builder, d *enumDecl) {
	var lits []string
	for _, v := range d.values {
		lits = append(lits, v.literal)
	}
	if d.base == tFloat {
		// Literal takes no floats.
		b.WriteString(d.name + " = float\n")
		w.docstring(b, "", joinDoc(sentence(d.what), d.doc, "One of "+strings.Join(lits, ", ")+"."))
		return
	}
	w.typing["Literal"] = true
	b.WriteString(w.split(d.name+" = ", "Literal["+strings.Join(lits, ", ")+"]", "") + "\n")
	w.docstring(b, "", joinDoc(sentence(d.what), d.doc))
}

func (w *pyWriter) context(b *strings.Builder, d *contextDecl) {
	var expr string
	switch {
	case d.admission:
		expr = "opkit.AdmissionContext[" + w.typ(d.object) + "]"
	case d.event:
		expr = "opkit.EventContext"
	case d.operatorWideSchedule:
		expr = "opkit.ScheduleContext"
	default:
		expr = "opkit.Context[" + w.typ(d.object) + ", " + w.typ(d.old) + "]"
	}
	b.WriteString(w.split(d.name+" = ", expr, "") + "\n")
	w.docstring(b, "", w.contextDoc(d))
}

func (w *pyWriter) contextDoc(d *contextDecl) string {
	doc := fmt.Sprintf("The binding context of handler %s: %s.", d.handler, d.what)
	var more []string
	if d.related != nil {
		how := ""
		if d.relatedOptional {
			how = " (empty in a delete run, which gets none)"
		}
		more = append(more, fmt.Sprintf("%s(ctx) gives its related objects typed%s.", snake(d.related.name), how))
	}
	if d.children != nil {
		more = append(more, fmt.Sprintf("%s(ctx) gives its children typed.", snake(d.children.name)))
	}
	return joinDoc(doc, strings.Join(more, " "))
}

func (w *pyWriter) result(b *strings.Builder, d *resultDecl) {
	var expr, doc string
	switch {
	case d.admission:
		expr = "opkit.AdmissionResult"
		doc = fmt.Sprintf("The result of admission handler %s: allowed, message, patch, warnings.", d.handler)
	case d.status == nil:
		w.typing["Never"] = true
		expr = "opkit.Result[Never]"
		doc = fmt.Sprintf("The result of handler %s: no status (%s).", d.handler, d.why)
	default:
		expr = "opkit.Result[" + w.typ(d.status) + "]"
		doc = fmt.Sprintf("The result of handler %s.", d.handler)
	}
	b.WriteString(w.split(d.name+" = ", expr, "") + "\n")
	w.docstring(b, "", doc)
}
