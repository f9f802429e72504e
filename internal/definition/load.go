package definition

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
	sigsjson "sigs.k8s.io/json"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Source is an Operator as it was read, with the line of each of its fields
// when it came from a file.
type Source struct {
	Operator *v1alpha1.Operator
	// File is the path it was read from; empty for the cluster.
	File  string
	lines map[string]int
	// yaml11 are the keys of the file that YAML 1.1 tools (kubectl, Helm)
	// read as booleans, by path: a bare on or y, which opkit reads as the
	// strings.
	yaml11 []yaml11Key
	// errs are the problems found while reading the file: values that break
	// the Operator's schema or have the wrong type. Such a value is left out
	// of Operator, and Compile reports them with every other problem.
	errs Errors
}

// FromCluster wraps an Operator read from the API.
func FromCluster(op *v1alpha1.Operator) *Source {
	return &Source{Operator: op}
}

// LoadFile reads every Operator in a YAML file (documents separated by ---).
func LoadFile(path string) ([]*Source, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Message: err.Error()}
	}
	return Load(path, data)
}

// CompileFiles loads every file and compiles every Operator in them. It
// returns the definitions that compiled, in file order, and every problem
// found, each placed by file and line (errors.Join of the files' and
// Operators' errors; nil for none): one bad definition does not hide
// another, nor what the good ones say of each other (Clashes).
func CompileFiles(paths ...string) ([]*Definition, error) {
	var defs []*Definition
	var errs []error
	for _, p := range paths {
		srcs, err := LoadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, src := range srcs {
			d, err := Compile(src)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			defs = append(defs, d)
		}
	}
	return defs, errors.Join(errs...)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlError places a YAML syntax error (PlaceYAMLError).
func yamlError(file string, data []byte, err error) *Error {
	line, msg := PlaceYAMLError(data, err)
	return &Error{File: file, Line: line, Message: msg}
}

// PlaceYAMLError says where a YAML syntax error in data is, and what it
// is: its 1-based line (0 when unknown) and a message for a reader of
// that line. YAML parsers report the line of the construct they were in,
// not always the faulty line; the v2 parser's is the nearer, so it is
// asked for its position. Neither parser gives a line for a tab that
// starts one: it is found here. Scenario files use it too.
func PlaceYAMLError(data []byte, err error) (line int, message string) {
	msg := err.Error()
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	for {
		var v any
		err2 := dec.Decode(&v)
		if err2 == nil {
			continue
		}
		if !errors.Is(err2, io.EOF) && yamlLine.MatchString(err2.Error()) {
			msg = err2.Error()
		}
		break
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		return line, "invalid YAML near this line: " + strings.TrimPrefix(msg, m[0])
	}
	if strings.Contains(msg, "cannot start any token") {
		if i := bytes.Index(append([]byte("\n"), data...), []byte("\n\t")); i >= 0 {
			return bytes.Count(data[:i], []byte("\n")) + 1, "invalid YAML near this line: a tab: YAML indents with spaces only"
		}
	}
	if line, what, ok := badCharacter(data); ok {
		return line, "invalid YAML near this line: " + what
	}
	// Both parsers count lines from 0 and say a line only after the
	// first: a problem without one is on the first (where the value the
	// parser was in began, as an unclosed quote).
	return 1, "invalid YAML near this line: " + strings.TrimPrefix(msg, "yaml: ")
}

// badCharacter finds the first character YAML does not allow in data, for
// the errors of the parsers' readers, which say no line: a byte that is
// not UTF-8, or a control character.
func badCharacter(data []byte) (line int, what string, ok bool) {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return bytes.Count(data[:i], []byte("\n")) + 1, fmt.Sprintf("the byte 0x%02x is not UTF-8 text: a YAML file is UTF-8", data[i]), true
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r >= 0x7f && r < 0xa0 && r != 0x85, r == 0xfffe, r == 0xffff:
			return bytes.Count(data[:i], []byte("\n")) + 1, fmt.Sprintf("the control character %U is not allowed in YAML", r), true
		}
		i += size
	}
	return 0, "", false
}

// Load reads every Operator in YAML data; file names it in errors. A
// document that is not valid YAML or not an Operator is an error naming the
// line. A field the Operator does not define, or a value its schema refuses
// (a wrong type, a bound: maxAttempts 0), is kept in the Source and
// reported by Compile, together with every other problem of the
// definition, so that one run lists them all.
func Load(file string, data []byte) ([]*Source, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*Source
	var errs Errors
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, append(errs, yamlError(file, data, err))
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue // an empty document, or only comments
		}
		src, err := decodeOperator(file, doc.Content[0])
		if err != nil {
			var es Errors
			if errors.As(err, &es) {
				errs = append(errs, es...)
				continue
			}
			return nil, err
		}
		out = append(out, src)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

func decodeOperator(file string, root *yaml.Node) (*Source, error) {
	r := &nodeReader{lines: map[string]int{}, expanding: map[*yaml.Node]bool{}}
	value, err := r.read(root, "", false)
	if err != nil {
		line := root.Line
		var ne *nodeError
		if errors.As(err, &ne) && ne.line > 0 {
			line = ne.line
		}
		return nil, Errors{{File: file, Line: line, Message: err.Error()}}
	}
	lines, yaml11 := r.lines, r.yaml11
	l := &errorList{file: file, lines: lines}
	obj, ok := value.(map[string]any)
	if !ok {
		// At the document's line: it has no field to be placed by.
		return nil, Errors{{File: file, Line: root.Line, Message: fmt.Sprintf("a document must be a mapping (an Operator), not %T", value)}}
	}
	if name, ok := obj["metadata"].(map[string]any); ok {
		l.operator, _ = name["name"].(string)
	}
	if obj["apiVersion"] != v1alpha1.SchemeGroupVersion.String() || obj["kind"] != v1alpha1.Kind {
		l.add("kind", "opkit reads Operators (apiVersion: %s, kind: %s); this document is apiVersion: %v, kind: %v",
			v1alpha1.SchemeGroupVersion, v1alpha1.Kind, obj["apiVersion"], obj["kind"])
		return nil, l.errs
	}
	checkSchema(l, obj)
	data, err := json.Marshal(obj)
	if err != nil {
		l.add("", "%v", err)
		return nil, l.errs
	}
	op := &v1alpha1.Operator{}
	strict, err := sigsjson.UnmarshalStrict(data, op, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		// An error the decoder does not place (a duration's, "10mx") is
		// of a value the schema refused, which its error places: said.
		if field, msg := jsonErrorField(err.Error()); field != "" || len(l.errs) == 0 {
			l.add(field, "%s", msg)
		}
	}
	for _, s := range strict {
		field, msg := jsonErrorField(s.Error())
		l.add(field, "%s", msg)
	}
	return &Source{Operator: op, File: file, lines: lines, yaml11: yaml11, errs: l.errs}, nil
}

var (
	unknownField = regexp.MustCompile(`^unknown field "(.+)"$`)
	// A field's path has dashes (x-kubernetes-validations).
	typeMismatch = regexp.MustCompile(`^json: cannot unmarshal (\w+) into Go struct field \w+\.([\w.-]+) of type (.+)$`)
)

// jsonErrorField turns a decoding error into a field path and a message.
func jsonErrorField(msg string) (field, message string) {
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		if message, ok := yaml11Field(m[1]); ok {
			return m[1], message
		}
		return m[1], "unknown field: an Operator has no such field (check its spelling in docs/operators.md)"
	}
	if m := typeMismatch.FindStringSubmatch(msg); m != nil {
		return m[2], fmt.Sprintf("expected %s, got a %s", m[3], m[1])
	}
	return "", msg
}

// nodeReader converts YAML nodes to JSON-compatible values, recording
// the line of each field under its path (a.b[0].c), and the keys YAML 1.1
// reads otherwise in yaml11.
type nodeReader struct {
	lines  map[string]int
	yaml11 []yaml11Key
	// expanding are the anchored nodes whose aliases are being read: an
	// alias to one of them is inside the value it names.
	expanding map[*yaml.Node]bool
	// aliased counts the values read through aliases (maxAliased).
	aliased int
}

// maxAliased is how many values a document's aliases may expand to: far
// more than a definition repeats of itself, far fewer than a few nested
// aliases make (each alias of a list of aliases multiplies them).
const maxAliased = 100_000

// nodeError is a problem of a YAML document at one of its lines.
type nodeError struct {
	line int
	msg  string
}

func (e *nodeError) Error() string { return e.msg }

// read converts n, at path; aliased says it is read through an alias.
func (r *nodeReader) read(n *yaml.Node, path string, aliased bool) (any, error) {
	if _, ok := r.lines[path]; !ok && path != "" {
		r.lines[path] = n.Line // a key's line, when there is one, comes first
	}
	if aliased {
		if r.aliased++; r.aliased > maxAliased {
			return nil, &nodeError{n.Line, fmt.Sprintf("the document's aliases (*name) expand to over %d values: an Operator repeats far less of itself", maxAliased)}
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, &nodeError{n.Line, fmt.Sprintf("the alias *%s names no anchor", n.Value)}
		}
		if r.expanding[n.Alias] {
			return nil, &nodeError{n.Line, fmt.Sprintf("the alias *%s is inside the value its anchor names: it would repeat without end", n.Value)}
		}
		r.expanding[n.Alias] = true
		defer delete(r.expanding, n.Alias)
		return r.read(n.Alias, path, true)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, &nodeError{k.Line, "mapping keys must be strings"}
			}
			if k.Value == "" {
				// Nothing of an Operator, nor of a Kubernetes object it
				// makes, has a field without a name.
				return nil, &nodeError{k.Line, "a key is empty: every field has a name"}
			}
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			r.lines[child] = k.Line
			if b, ok := yaml11Bool(k); ok {
				r.yaml11 = append(r.yaml11, yaml11Key{path: child, key: k.Value, value: b})
			}
			val, err := r.read(v, child, aliased)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, item := range n.Content {
			val, err := r.read(item, fmt.Sprintf("%s[%d]", path, i), aliased)
			if err != nil {
				return nil, err
			}
			s[i] = val
		}
		return s, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, &nodeError{n.Line, strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		// JSON has no timestamps, binary, NaN or infinities: keep their
		// text (a field that wants a number says so, at its line).
		switch v := v.(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return n.Value, nil
			}
			return v, nil
		case nil, bool, int, int64, uint64, string:
			return v, nil
		}
		return n.Value, nil
	}
	return nil, &nodeError{n.Line, "unsupported YAML node"}
}

// MappingValue returns the value of key in a YAML mapping node, or nil:
// for the readers of a definition's YAML as written (its comments and
// order kept).
func MappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
