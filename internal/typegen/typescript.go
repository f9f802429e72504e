package typegen

import (
	"fmt"
	"strings"
)

// tsLine is the longest line the TypeScript file has where it can help
// it (prettier's default).
const tsLine = 80

// tsWriter writes the TypeScript module: interfaces and types for
// opkit.ts (the SDK, imported as opkit).
type tsWriter struct {
	m *model
}

func writeTypeScript(m *model, header, what string) []byte {
	w := &tsWriter{m: m}
	var b strings.Builder
	b.WriteString("// " + header + "\n\n")
	w.doc(&b, "", what)
	b.WriteString("\nimport type * as opkit from \"./opkit.js\";\n")
	for _, d := range m.decls {
		b.WriteString("\n")
		switch d := d.(type) {
		case *structDecl:
			w.iface(&b, d)
		case *enumDecl:
			w.enum(&b, d)
		case *contextDecl:
			w.context(&b, d)
		case *resultDecl:
			w.result(&b, d)
		}
	}
	return []byte(b.String())
}

// doc writes a JSDoc comment at indent: on one line when it fits.
func (w *tsWriter) doc(b *strings.Builder, indent, text string) {
	text = strings.ReplaceAll(strings.TrimSpace(text), "*/", `*\/`)
	if text == "" {
		return
	}
	if one := indent + "/** " + text + " */"; !strings.Contains(text, "\n") && len([]rune(one)) <= tsLine {
		b.WriteString(one + "\n")
		return
	}
	b.WriteString(indent + "/**\n")
	for _, l := range wrap(text, tsLine-len(indent)-3) {
		if l == "" {
			b.WriteString(indent + " *\n")
			continue
		}
		b.WriteString(indent + " * " + l + "\n")
	}
	b.WriteString(indent + " */\n")
}

// typ is the TypeScript type of t.
func (w *tsWriter) typ(t *typeRef) string {
	if t == nil {
		return "null"
	}
	var s string
	switch t.kind {
	case tString:
		s = "string"
	case tConst:
		s = quoted(t.name)
	case tInt, tFloat:
		s = "number"
	case tBool:
		s = "boolean"
	case tIntOrString:
		s = "number | string"
	case tJSON:
		return "unknown"
	case tMap:
		if t.elem == nil {
			s = "Record<string, unknown>"
		} else {
			s = "Record<string, " + w.typ(t.elem) + ">"
		}
	case tList:
		e := w.typ(t.elem)
		if strings.Contains(e, " | ") {
			e = "(" + e + ")"
		}
		s = e + "[]"
	case tNamed:
		s = t.name
	case tSDK:
		s = "opkit." + t.name
	}
	if t.nullable {
		s += " | null"
	}
	return s
}

func (w *tsWriter) key(k string) string {
	if tsIdentifier(k) {
		return k
	}
	return quoted(k)
}

func (w *tsWriter) iface(b *strings.Builder, d *structDecl) {
	doc := joinDoc(sentence(d.what), d.doc)
	if d.open {
		doc = joinDoc(doc, "Objects keep fields beside these (x-kubernetes-preserve-unknown-fields).")
	}
	w.doc(b, "", doc)
	if len(d.fields) == 0 && !d.open {
		// An empty interface would take any object: this takes none.
		fmt.Fprintf(b, "export type %s = Record<string, never>;\n", d.name)
		return
	}
	end := "}\n"
	if d.key != "" {
		// A type literal, not an interface: the SDK's context types
		// related and children as records, which an interface is not
		// assignable to.
		fmt.Fprintf(b, "export type %s = {\n", d.name)
		end = "};\n"
	} else {
		fmt.Fprintf(b, "export interface %s {\n", d.name)
	}
	for _, f := range d.fields {
		w.doc(b, "  ", f.doc)
		opt := ""
		if !f.required {
			opt = "?"
		}
		fmt.Fprintf(b, "  %s%s: %s;\n", w.key(f.json), opt, w.typ(f.t))
	}
	if d.open {
		b.WriteString("  [field: string]: unknown;\n")
	}
	b.WriteString(end)
}

func (w *tsWriter) enum(b *strings.Builder, d *enumDecl) {
	w.doc(b, "", joinDoc(sentence(d.what), d.doc))
	var lits []string
	for _, v := range d.values {
		lits = append(lits, v.literal)
	}
	w.alias(b, d.name, lits)
}

// alias writes export type name = the union of parts, on one line when
// it fits, else one part a line, as prettier does.
func (w *tsWriter) alias(b *strings.Builder, name string, parts []string) {
	union := strings.Join(parts, " | ")
	one := "export type " + name + " = " + union + ";"
	if len([]rune(one)) <= tsLine || len(parts) == 1 {
		b.WriteString(one + "\n")
		return
	}
	if len([]rune(union))+3 <= tsLine {
		b.WriteString("export type " + name + " =\n  " + union + ";\n")
		return
	}
	b.WriteString("export type " + name + " =\n")
	for i, p := range parts {
		end := ""
		if i == len(parts)-1 {
			end = ";"
		}
		b.WriteString("  | " + p + end + "\n")
	}
}

func (w *tsWriter) context(b *strings.Builder, d *contextDecl) {
	doc := fmt.Sprintf("The binding context of handler %s: %s.", d.handler, d.what)
	var expr string
	switch {
	case d.admission:
		expr = "opkit.AdmissionContext<" + w.typ(d.object) + ">"
	case d.event:
		expr = "opkit.EventContext"
	case d.operatorWideSchedule:
		expr = "opkit.ScheduleContext"
	default:
		expr = "opkit.Context<" + w.typ(d.object) + ", " + w.typ(d.old) + ">"
	}
	if d.related == nil && d.children == nil {
		w.doc(b, "", doc)
		b.WriteString(tsGeneric("export type "+d.name+" = ", expr, ";") + "\n")
		return
	}
	// The SDK types related and children as any object's: typed here.
	var omit []string
	if d.related != nil {
		omit = append(omit, `"related"`)
	}
	if d.children != nil {
		omit = append(omit, `"children"`)
	}
	w.doc(b, "", doc)
	b.WriteString(tsGeneric("export type "+d.name+" = ", "Omit<"+expr+", "+strings.Join(omit, " | ")+">", " & {") + "\n")
	if d.related != nil {
		// Optional in every run: opkit leaves related out when none of
		// the objects it names exists, as well as in a delete run.
		if d.relatedOptional {
			w.doc(b, "  ", "The related objects, by id; absent in a delete run or when none exists.")
		} else {
			w.doc(b, "  ", "The related objects, by id; absent when none exists.")
		}
		fmt.Fprintf(b, "  related?: %s;\n", d.related.name)
	}
	if d.children != nil {
		w.doc(b, "  ", "Each child's current object, by id; empty in a delete run.")
		fmt.Fprintf(b, "  children: %s;\n", d.children.name)
	}
	b.WriteString("};\n")
}

func (w *tsWriter) result(b *strings.Builder, d *resultDecl) {
	switch {
	case d.admission:
		w.doc(b, "", fmt.Sprintf("The answer of admission handler %s: allowed, message, patch, warnings.", d.handler))
		b.WriteString(tsGeneric("export type "+d.name+" = ", "opkit.AdmissionResult<"+w.typ(d.object)+">", ";") + "\n")
	case d.status == nil:
		w.doc(b, "", fmt.Sprintf("The result of handler %s. It sets no status: %s.", d.handler, d.why))
		fmt.Fprintf(b, "export type %s = opkit.Result<never>;\n", d.name)
	default:
		w.doc(b, "", fmt.Sprintf("The result of handler %s.", d.handler))
		b.WriteString(tsGeneric("export type "+d.name+" = ", "opkit.Result<"+w.typ(d.status)+">", ";") + "\n")
	}
}

// tsGeneric writes prefix+expr+suffix on one line when it fits, as
// prettier does otherwise: a type of one type argument on the next line
// (prefix ends with "= "), else its type arguments one a line, each
// broken likewise.
func tsGeneric(prefix, expr, suffix string) string {
	line := prefix + expr + suffix
	if len([]rune(line)) <= tsLine {
		return line
	}
	head, args := typeArgs(expr)
	if len(args) < 2 && strings.HasSuffix(prefix, "= ") {
		return strings.TrimSuffix(prefix, " ") + "\n  " + expr + suffix
	}
	if len(args) == 0 {
		return line
	}
	indent := strings.Repeat(" ", len(prefix)-len(strings.TrimLeft(prefix, " ")))
	var b strings.Builder
	b.WriteString(prefix + head + "<\n")
	for i, a := range args {
		end := ","
		if i == len(args)-1 {
			end = ""
		}
		b.WriteString(tsGeneric(indent+"  ", a, end) + "\n")
	}
	b.WriteString(indent + ">" + suffix)
	return b.String()
}

// typeArgs splits Name<A, B> into Name and its arguments; none for a
// type that is not generic.
func typeArgs(expr string) (string, []string) {
	open := strings.IndexByte(expr, '<')
	if open < 0 || !strings.HasSuffix(expr, ">") {
		return expr, nil
	}
	var args []string
	depth, start := 0, open+1
	inner := expr[:len(expr)-1]
	for i := open + 1; i < len(inner); i++ {
		switch inner[i] {
		case '<', '(', '[', '{':
			depth++
		case '>', ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(inner[start:i]))
				start = i + 1
			}
		}
	}
	return expr[:open], append(args, strings.TrimSpace(inner[start:]))
}
