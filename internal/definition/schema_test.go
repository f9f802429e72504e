package definition

import (
	"encoding/json"
	"testing"

	"github.com/google/cel-go/common/types"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// nestedSchema has every kind of sub-schema valueSchema builds once:
// properties, list items, and additionalProperties with and without a
// schema.
const nestedSchema = `{
  "type": "object",
  "properties": {
    "metadata": {"type": "object", "properties": {
      "name": {"type": "string"},
      "creationTimestamp": {"type": "string", "format": "date-time"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}}
    }},
    "ports": {"type": "array", "items": {"type": "object", "properties": {
      "port": {"type": "integer"},
      "expires": {"type": "string", "format": "date-time"}
    }}},
    "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {
      "since": {"type": "string", "format": "date-time"}
    }}},
    "open": {"type": "object", "additionalProperties": true}
  }
}`

func TestValueSchemaReadsValuesAsOpenAPISchemaDoes(t *testing.T) {
	var s spec.Schema
	if err := json.Unmarshal([]byte(nestedSchema), &s); err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{
		"metadata": map[string]any{"name": "a", "creationTimestamp": "2026-11-22T01:02:03Z", "labels": map[string]any{"app": "x"}},
		"ports":    []any{map[string]any{"port": int64(80), "expires": "2027-01-01T00:00:00Z"}},
		"byName":   map[string]any{"b": map[string]any{"since": "2026-01-01T00:00:00Z"}},
		"open":     map[string]any{"anything": []any{true, 1.5}},
	}
	memo := newValueSchema(&s)
	for i := range 2 { // the second time through the built sub-schemas
		got := common.UnstructuredToVal(obj, memo)
		want := openapi.UnstructuredToVal(obj, &s)
		if got.Equal(want) != types.True {
			t.Fatalf("read %d: valueSchema gives %v, openapi.Schema %v", i, got, want)
		}
	}
	// Typed as the schema says, at every depth.
	since := memo.Properties()["byName"].AdditionalProperties().Schema().Properties()["since"]
	expires := memo.Properties()["ports"].Items().Properties()["expires"]
	for name, sub := range map[string]common.Schema{"byName.*.since": since, "ports[].expires": expires} {
		if sub == nil || sub.Format() != "date-time" {
			t.Errorf("%s: got %v, want the date-time schema", name, sub)
		}
	}
	if memo.Properties()["open"].AdditionalProperties().Schema() != nil || !memo.Properties()["open"].AdditionalProperties().Allows() {
		t.Error("additionalProperties: true: want no schema and Allows")
	}
	if memo.Properties()["metadata"].Items() != nil || memo.AdditionalProperties() != nil {
		t.Error("sub-schemas the schema does not have are not nil")
	}
}

// BenchmarkStatusFromTypedChild is the engine's most frequent evaluation:
// a status field reading a typed child's name.
func BenchmarkStatusFromTypedChild(b *testing.B) {
	d, err := compileTyped(b, base+`  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}"}
  status:
    configMap: "${children.config.metadata.name}"
`)
	if err != nil {
		b.Fatal(err)
	}
	vars := Vars{
		Self: map[string]any{"metadata": map[string]any{"name": "a"}, "spec": map[string]any{"image": "x"}},
		Children: map[string]map[string]any{"config": {
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "a", "resourceVersion": "42", "creationTimestamp": "2026-11-22T01:02:03Z"},
		}},
	}
	for b.Loop() {
		if v, err := d.Status[0].Evaluate(vars); err != nil || v != "a" {
			b.Fatalf("got %v, %v", v, err)
		}
	}
}
