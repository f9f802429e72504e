package definition

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// staticSchemas resolves the ConfigMap kind from a fixed schema, a subset of
// what the API server publishes.
type staticSchemas map[schema.GroupVersionKind]string

func (s staticSchemas) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	src, ok := s[gvk]
	if !ok {
		return nil, fmt.Errorf("cannot resolve %s", gvk)
	}
	out := &spec.Schema{}
	return out, json.Unmarshal([]byte(src), out)
}

var configMapSchema = staticSchemas{{Version: "v1", Kind: "ConfigMap"}: `{
  "type": "object",
  "properties": {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object", "properties": {
      "name": {"type": "string"},
      "resourceVersion": {"type": "string"},
      "creationTimestamp": {"type": "string", "format": "date-time"}
    }},
    "data": {"type": "object", "additionalProperties": {"type": "string"}}
  }
}`}

const typedChildren = base + `  children:
  - id: config
    readyWhen: ["size(self.data) > 0"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}"}
      data: {image: "${self.spec.image}"}
  - id: copy
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-copy"}
      data:
        version: "${children.config.metadata.resourceVersion}"
        created: "${string(children.config.metadata.creationTimestamp)}"
        year: "${string(children.config.metadata.creationTimestamp.getFullYear())}"
`

func compileTyped(t testing.TB, yaml string) (*Definition, error) {
	t.Helper()
	srcs, err := Load("typed.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return CompileWithSchemas(srcs[0], configMapSchema)
}

func TestChildrenAreTypedByTheirKindsSchema(t *testing.T) {
	d, err := compileTyped(t, typedChildren)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Typed() {
		t.Error("Typed() is false")
	}
	// At run time the fields have their schema's types: the date-time is a
	// timestamp.
	config := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "resourceVersion": "42", "creationTimestamp": "2026-11-22T01:02:03Z"},
		"data":     map[string]any{"image": "x"},
	}
	vars := Vars{Self: map[string]any{"metadata": map[string]any{"name": "a"}, "spec": map[string]any{"image": "x"}}, Children: map[string]map[string]any{"config": config}}
	obj, err := child(d, "copy").Render(vars)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"version": "42", "created": "2026-11-22T01:02:03Z", "year": "2026"}
	if got := obj["data"]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("data = %v, want %v", got, want)
	}
	if ready, err := child(d, "config").Ready(config); err != nil || !ready {
		t.Errorf("Ready = %v, %v", ready, err)
	}
}

func TestChildFieldsTheKindDoesNotHaveAreErrors(t *testing.T) {
	for name, tc := range map[string]struct{ from, to, want string }{
		"template":  {`${children.config.metadata.resourceVersion}`, `${children.config.spec.replicas}`, `spec.children[1].template.data.version: ${children.config.spec.replicas}: ERROR: <input>:1:16: undefined field 'spec'`},
		"readyWhen": {`size(self.data) > 0`, `self.dataa == null`, `spec.children[0].readyWhen[0]: ${self.dataa == null}: ERROR: <input>:1:5: undefined field 'dataa'`},
		"type":      {`${string(children.config.metadata.creationTimestamp)}`, `${children.config.metadata.creationTimestamp + 1}`, `spec.children[1].template.data.created`},
		"kind":      {"kind: ConfigMap\n      metadata: {name: \"${self.metadata.name}\"}", "kind: Widget\n      metadata: {name: \"${self.metadata.name}\"}", `typed.yaml:20: spec.children[0].template.kind: kind v1 Widget is not served by the cluster`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := compileTyped(t, strings.Replace(typedChildren, tc.from, tc.to, 1))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	// Untyped, the same definition compiles: the cluster is not known.
	srcs, _ := Load("typed.yaml", []byte(strings.Replace(typedChildren, "metadata.resourceVersion", "spec.replicas", 1)))
	if _, err := Compile(srcs[0]); err != nil {
		t.Errorf("untyped: %v", err)
	}
}
