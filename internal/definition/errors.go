package definition

import (
	"fmt"
	"strings"
)

// Error is one problem in a definition: where it is and what is wrong.
type Error struct {
	// File is the file the definition came from; empty for one read from
	// the cluster.
	File string
	// Line is the 1-based line of the field in File, or 0 when unknown.
	Line int
	// Operator is the Operator's name, when known.
	Operator string
	// Field is the path of the field at fault, e.g. spec.children[1].id.
	Field string
	// Message says what is wrong and what was expected.
	Message string

	// fallback: found by the Operator's schema, and left out when a check
	// of Compile's own reports the same field.
	fallback bool
}

func (e *Error) Error() string {
	owner := ""
	if e.Operator != "" {
		owner = "operator " + e.Operator
	}
	return Located(e.File, e.Line, owner, e.Field, e.Message)
}

// Located is a problem's message as opkit says one in a file it reads
// (a definition, a scenario): "file:line: field: message", with what is
// known of where (owner, e.g. "operator x", when there is no file).
func Located(file string, line int, owner, field, message string) string {
	var b strings.Builder
	switch {
	case file != "" && line > 0:
		fmt.Fprintf(&b, "%s:%d: ", file, line)
	case file != "":
		fmt.Fprintf(&b, "%s: ", file)
	case owner != "":
		b.WriteString(owner + ": ")
	}
	if field != "" {
		b.WriteString(field + ": ")
	}
	b.WriteString(message)
	return b.String()
}

// Errors is every problem found in one definition, in field order. Its
// message lists them one per line.
type Errors []*Error

func (es Errors) Error() string { return JoinLines(es) }

// JoinLines is the messages of errs, one per line.
func JoinLines[E error](errs []E) string {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// errorList collects errors, placing each at its field's line.
type errorList struct {
	file     string
	operator string
	lines    map[string]int // field path -> line
	errs     Errors
	// reported are the fields a problem was found at while the file was
	// read; later checks say nothing more of them.
	reported map[string]bool
	// expressions counts the CEL expressions compiled.
	expressions int
}

func (l *errorList) add(field, format string, args ...any) {
	if l.reported[field] {
		return
	}
	l.errs = append(l.errs, &Error{
		File: l.file, Line: l.line(field), Operator: l.operator, Field: field,
		Message: fmt.Sprintf(format, args...),
	})
}

// warn adds a warning to d: a problem that does not stop the definition,
// named as an error is (file, line, field).
func (l *errorList) warn(d *Definition, field, format string, args ...any) {
	w := &errorList{file: l.file, operator: l.operator, lines: l.lines}
	w.add(field, format, args...)
	d.Warnings = append(d.Warnings, w.errs...)
}

// line finds the line of field, or of its nearest parent that has one.
func (l *errorList) line(field string) int {
	for p := field; p != ""; p = ParentPath(p) {
		if n, ok := l.lines[p]; ok {
			return n
		}
	}
	return 0
}

// Line is the line of field in the file the definition came from: the
// line of its nearest parent that the file spells out, for a field it
// leaves out (a default, or a field another version had); 0 for a
// definition read from the cluster. field is a path as errors name them,
// e.g. spec.resource.versions[0].schema.properties.size.
func (d *Definition) Line(field string) int {
	if d.src == nil {
		return 0
	}
	return (&errorList{lines: d.src.lines}).line(field)
}

// ParentPath is the path of the field holding p, for a field path as
// errors name them (a definition's, a scenario's): spec.children for
// spec.children[1], spec for spec.children, "" for spec.
func ParentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs
}

// withFallbacks adds the schema's findings of fields no other check
// reported.
func (l *errorList) withFallbacks(fallbacks Errors) {
	seen := map[string]bool{}
	for _, e := range l.errs {
		seen[e.Field] = true
	}
	for _, e := range fallbacks {
		if !seen[e.Field] {
			l.errs = append(l.errs, e)
		}
	}
}
