package definition

import (
	"fmt"
	"regexp"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// An Operator is a Kubernetes manifest, and most tools that apply one
// (kubectl, Helm, Argo CD, Flux, kustomize) read YAML as YAML 1.1, where a
// bare on, off, yes, no, y or n is a boolean, even as a key: a handler's
// on: reaches the API server as true, and a schema's property y as true.
// opkit reads YAML 1.2, where they are strings, so a file it runs can be
// refused, or changed, when applied by another tool. The loader notes such
// keys (yaml11Key), and Compile warns of each, naming the quoted key that
// every tool reads alike.

// yaml11Key is a key of a file that YAML 1.1 reads as a boolean.
type yaml11Key struct {
	path  string // its field, e.g. spec.handlers[0].on
	key   string // as written, e.g. on
	value bool   // what YAML 1.1 reads
}

// yaml11Bool reports whether k, a mapping key, is a string that YAML 1.1
// reads as a boolean, and which: a plain (unquoted, untagged) scalar that
// YAML 1.2 resolves to a string and go-yaml v2, kubectl's parser, to a
// bool.
func yaml11Bool(k *yaml.Node) (value, ok bool) {
	if k.Kind != yaml.ScalarNode || k.Style != 0 || k.ShortTag() != "!!str" {
		return false, false
	}
	var v any
	if err := yamlv2.Unmarshal([]byte(k.Value), &v); err != nil {
		return false, false
	}
	value, ok = v.(bool)
	return value, ok
}

// warnYAML11 warns of each key of src that YAML 1.1 tools read as a
// boolean.
func warnYAML11(l *errorList, d *Definition, src *Source) {
	for _, k := range src.yaml11 {
		l.warn(d, k.path, "kubectl and other YAML 1.1 tools read a bare %s as %t: write %q:", k.key, k.value, k.key)
	}
}

// handlerTrue is the field a handler's on becomes in a YAML 1.1 tool.
var handlerTrue = regexp.MustCompile(`^spec\.handlers\[\d+\]\.true$`)

// yaml11Field is the message of an unknown field that a YAML 1.1 tool
// made of a bare key, if field is one.
func yaml11Field(field string) (string, bool) {
	if handlerTrue.MatchString(field) {
		return fmt.Sprintf("a handler has no field true: %s", v1alpha1.BareOnMessage), true
	}
	return "", false
}
