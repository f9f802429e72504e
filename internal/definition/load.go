package definition

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

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
	return 0, "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")
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
	lines := map[string]int{}
	var yaml11 []yaml11Key
	value, err := nodeValue(root, "", lines, &yaml11)
	if err != nil {
		return nil, Errors{{File: file, Line: root.Line, Message: err.Error()}}
	}
	l := &errorList{file: file, lines: lines}
	obj, ok := value.(map[string]any)
	if !ok {
		l.add("", "a document must be a mapping (an Operator), not %T", value)
		return nil, l.errs
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
		field, msg := jsonErrorField(err.Error())
		l.add(field, "%s", msg)
	}
	for _, s := range strict {
		field, msg := jsonErrorField(s.Error())
		l.add(field, "%s", msg)
	}
	return &Source{Operator: op, File: file, lines: lines, yaml11: yaml11, errs: l.errs}, nil
}

var (
	unknownField = regexp.MustCompile(`^unknown field "([^"]+)"$`)
	typeMismatch = regexp.MustCompile(`^json: cannot unmarshal (\w+) into Go struct field \w+\.([\w.]+) of type (.+)$`)
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

// nodeValue converts a YAML node to JSON-compatible values, recording the
// line of each field under its path (a.b[0].c), and the keys YAML 1.1
// reads otherwise in yaml11.
func nodeValue(n *yaml.Node, path string, lines map[string]int, yaml11 *[]yaml11Key) (any, error) {
	if _, ok := lines[path]; !ok && path != "" {
		lines[path] = n.Line // a key's line, when there is one, comes first
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nodeValue(n.Alias, path, lines, yaml11)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be strings", k.Line)
			}
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			lines[child] = k.Line
			if b, ok := yaml11Bool(k); ok {
				*yaml11 = append(*yaml11, yaml11Key{path: child, key: k.Value, value: b})
			}
			val, err := nodeValue(v, child, lines, yaml11)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, item := range n.Content {
			val, err := nodeValue(item, fmt.Sprintf("%s[%d]", path, i), lines, yaml11)
			if err != nil {
				return nil, err
			}
			s[i] = val
		}
		return s, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		// JSON has no timestamps or binary: keep their text.
		switch v.(type) {
		case nil, bool, int, int64, uint64, float64, string:
			return v, nil
		}
		return n.Value, nil
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}
