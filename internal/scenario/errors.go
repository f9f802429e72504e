package scenario

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/opkit-dev/opkit/internal/definition"
)

// Error is one problem in a scenario file: where it is and what is wrong.
type Error struct {
	// File is the file at fault: the scenario file, or a file one of its
	// apply steps reads.
	File string
	// Line is the 1-based line of the field in File, or 0 when unknown.
	Line int
	// Scenario is the scenario's name, when known.
	Scenario string
	// Field is the path of the field at fault, e.g.
	// steps[2].expect.object.kind; for an object of an apply file, the
	// path within that object.
	Field string
	// Message says what is wrong and what to do.
	Message string

	// at is where in the scenario file the error belongs, which orders a
	// document's errors.
	at position
}

// position is where a field is in its file.
type position struct{ line, column int }

func (e *Error) Error() string {
	owner := ""
	if e.Scenario != "" {
		owner = "scenario " + e.Scenario
	}
	return definition.Located(e.File, e.Line, owner, e.Field, e.Message)
}

// Errors is every problem found in one scenario file, in line order. Its
// message lists them one per line.
type Errors []*Error

func (es Errors) Error() string { return definition.JoinLines(es) }

// errorList collects the errors of one document, placing each at its
// field's line, at most one per field.
type errorList struct {
	file     string
	scenario string
	lines    map[string]position // field path -> where it is
	errs     Errors
	fields   map[string]bool // fields with an error
}

func newErrorList(file string) *errorList {
	return &errorList{file: file, lines: map[string]position{}, fields: map[string]bool{}}
}

// add reports a problem of field, unless it has one already.
func (l *errorList) add(field, format string, args ...any) {
	l.addAt(field, l.pos(field), format, args...)
}

// addAt reports a problem of field at a position of its own.
func (l *errorList) addAt(field string, at position, format string, args ...any) {
	if l.fields[field] {
		return
	}
	l.fields[field] = true
	l.errs = append(l.errs, &Error{
		File: l.file, Line: at.line, Field: field,
		Message: fmt.Sprintf(format, args...), at: at,
	})
}

// has reports whether field has an error.
func (l *errorList) has(field string) bool { return l.fields[field] }

// addFrom adds errors found in another file (an apply step's file of
// objects), ordered at the line of field.
func (l *errorList) addFrom(field string, es Errors) {
	at := l.pos(field)
	for _, e := range es {
		e.at = at
		l.errs = append(l.errs, e)
	}
	if len(es) > 0 {
		l.fields[field] = true
	}
}

// line finds the line of field, or of its nearest parent that has one.
func (l *errorList) line(field string) int { return l.pos(field).line }

// pos finds the position of field, or of its nearest parent that has one.
func (l *errorList) pos(field string) position {
	for p := field; ; p = definition.ParentPath(p) {
		if at, ok := l.lines[p]; ok {
			return at
		}
		if p == "" {
			return position{}
		}
	}
}

// sorted gives the errors in the order of their fields in the file, each
// named after the scenario.
func (l *errorList) sorted() Errors {
	slices.SortStableFunc(l.errs, func(a, b *Error) int {
		if c := cmp.Or(cmp.Compare(a.at.line, b.at.line), cmp.Compare(a.at.column, b.at.column)); c != 0 {
			return c
		}
		if a.File != l.file || b.File != l.file {
			return 0 // an apply file's errors, in that file's order
		}
		return cmp.Compare(a.Field, b.Field) // the schema's, found in no set order
	})
	for _, e := range l.errs {
		e.Scenario = l.scenario
	}
	return l.errs
}

// keyPath is the path of the field key of the map at p.
func keyPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

// itemPath is the path of the item i of the list at p.
func itemPath(p string, i int) string { return fmt.Sprintf("%s[%d]", p, i) }
