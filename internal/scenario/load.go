package scenario

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// LoadFile reads every scenario in a file (YAML documents separated by
// ---). See Load.
func LoadFile(path string) ([]*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{readError(path, err)}
	}
	return Load(path, data)
}

// Load reads every scenario in YAML data; file names it in errors, and
// the paths in the scenarios are relative to its directory. It checks each
// document against Schema, then what the schema cannot say: durations,
// CEL expressions, that the files named exist, the objects applied, and
// that names are unique. A file with any problem gives no scenarios and
// an Errors of every problem of every document, in line order, at most
// one per field.
func Load(file string, data []byte) ([]*Scenario, error) {
	var out []*Scenario
	var errs Errors
	names := map[string]int{} // scenario name -> line
	applied := map[string][]Object{}
	err := readDocuments(file, data, func(root *yaml.Node) {
		s, es := loadDocument(file, root, names, applied)
		errs = append(errs, es...)
		if s != nil {
			out = append(out, s)
		}
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && len(out) == 0 {
		errs = append(errs, &Error{File: file, Message: "no scenario: a scenario file holds one or more YAML documents (separated by ---), each with scenario:, operators: and steps:"})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// loadDocument reads one scenario. It returns the scenario when the
// document has no problem, and the document's errors otherwise.
func loadDocument(file string, root *yaml.Node, names map[string]int, applied map[string][]Object) (*Scenario, Errors) {
	l := newErrorList(file)
	doc, _ := jsonValue(l, root, "")
	obj, _ := doc.(map[string]any)
	l.scenario, _ = obj["scenario"].(string)
	checkSchema(l, doc)
	d := &decoder{l: l, dir: filepath.Dir(file), applied: applied}
	s := d.scenario(obj)
	s.File, s.Line = file, root.Line
	if s.Name != "" {
		if first, dup := names[s.Name]; dup {
			l.add("scenario", "the scenario at line %d has this name already: give each scenario of a file its own", first)
		} else {
			names[s.Name] = l.line("scenario")
		}
	}
	if len(l.errs) > 0 {
		return nil, l.sorted()
	}
	return s, nil
}

// readError is an error reading a file, without the path it names twice.
func readError(path string, err error) *Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{File: path, Message: err.Error()}
}
