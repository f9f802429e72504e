package scenario

import (
	"bytes"
	"errors"
	"io"
	"math"

	"go.yaml.in/yaml/v3"

	"github.com/opkit-dev/opkit/internal/definition"
)

// readDocuments calls fn with the root node of each non-empty YAML
// document of data, in order. A syntax error ends the reading: it is
// returned, placed at its line, after the documents before it were read.
func readDocuments(file string, data []byte, fn func(root *yaml.Node)) *Error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return yamlError(file, data, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
			continue // an empty document, or only comments
		}
		fn(doc.Content[0])
	}
}

// yamlError places a YAML syntax error, as definitions place theirs.
func yamlError(file string, data []byte, err error) *Error {
	e := &Error{File: file}
	e.Line, e.Message = definition.PlaceYAMLError(data, err)
	e.at = position{line: e.Line}
	return e
}

// jsonValue converts a YAML node to the JSON values of Object, recording
// the line of each field under its path (a.b[0].c) in l.lines. A value
// JSON cannot hold (a key that is not a string, a duplicate key, a number
// out of range, an unknown tag) is reported to l and left out; ok is false
// for such a value.
func jsonValue(l *errorList, n *yaml.Node, path string) (v any, ok bool) {
	if _, seen := l.lines[path]; !seen {
		l.lines[path] = position{n.Line, n.Column} // a key's, when there is one, comes first
	}
	switch n.Kind {
	case yaml.AliasNode:
		return jsonValue(l, n.Alias, path)
	case yaml.MappingNode:
		return jsonMap(l, n, path), true
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			if v, ok := jsonValue(l, item, itemPath(path, i)); ok {
				s = append(s, v)
			} else {
				s = append(s, nil) // keeps the positions of the others
			}
		}
		return s, true
	case yaml.ScalarNode:
		return jsonScalar(l, n, path)
	}
	l.addAt(path, position{n.Line, n.Column}, "unsupported YAML")
	return nil, false
}

func jsonMap(l *errorList, n *yaml.Node, path string) map[string]any {
	m := make(map[string]any, len(n.Content)/2)
	keyLines := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			field := keyPath(path, k.Value)
			if k.Kind != yaml.ScalarNode {
				field = path
			}
			l.addAt(field, position{k.Line, k.Column}, "a key must be a string, not %s: quote it (\"%s\")", describeNode(k), k.Value)
			continue
		}
		child := keyPath(path, k.Value)
		if first, dup := keyLines[k.Value]; dup {
			l.addAt(child, position{k.Line, k.Column}, "duplicate key %q (first at line %d): give it once", k.Value, first)
			continue
		}
		keyLines[k.Value] = k.Line
		if _, seen := l.lines[child]; !seen {
			l.lines[child] = position{k.Line, k.Column}
		}
		if val, ok := jsonValue(l, v, child); ok {
			m[k.Value] = val
		}
	}
	// Merge keys (<<: *anchor): the keys given in the mapping win.
	for _, v := range merges {
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			merged, ok := jsonValue(l, src, path)
			mm, isMap := merged.(map[string]any)
			if !ok || !isMap {
				l.addAt(path, position{src.Line, src.Column}, "a merge key (<<) must refer to a mapping")
				continue
			}
			for k, val := range mm {
				if _, set := m[k]; !set {
					m[k] = val
				}
			}
		}
	}
	return m
}

func jsonScalar(l *errorList, n *yaml.Node, path string) (any, bool) {
	switch n.ShortTag() {
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			l.addAt(path, position{n.Line, n.Column}, "%v", err)
			return nil, false
		}
		return b, true
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			l.addAt(path, position{n.Line, n.Column}, "the integer %s does not fit in 64 bits: quote it to keep it as text", n.Value)
			return nil, false
		}
		return i, true
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			l.addAt(path, position{n.Line, n.Column}, "%s is not a number JSON can hold: quote it to keep it as text", n.Value)
			return nil, false
		}
		return f, true
	case "!!str", "!!timestamp", "!!binary":
		// JSON has no timestamps or binary: keep their text.
		return n.Value, true
	}
	l.addAt(path, position{n.Line, n.Column}, "the YAML tag %s is not supported: remove it", n.Tag)
	return nil, false
}

// describeNode names what a YAML node holds, for messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return n.ShortTag()
}
