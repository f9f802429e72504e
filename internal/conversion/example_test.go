package conversion_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/internal/conversion"
	"github.com/opkit-dev/opkit/internal/definition"
)

// A v2 Website read as v1: 1Gi is large in v1, and tls has no place
// there; both are kept in the annotation, and converting back restores
// them.
func Example() {
	defs, err := definition.CompileFiles("../../docs/examples/website-v2/operator.yaml")
	if err != nil {
		panic(err)
	}
	c, err := conversion.New(defs[0])
	if err != nil {
		panic(err)
	}
	v2 := map[string]any{
		"apiVersion": "demo.example.com/v2", "kind": "Website",
		"metadata": map[string]any{"name": "hello", "namespace": "default", "uid": "1234"},
		"spec": map[string]any{
			"content":   "hi",
			"resources": map[string]any{"memory": "1Gi"},
			"tls":       map[string]any{"enabled": true},
		},
	}
	v1, err := c.Convert(v2, "v1")
	if err != nil {
		panic(err)
	}
	fmt.Println(v1["spec"])
	fmt.Println(v1["metadata"].(map[string]any)["annotations"])
	back, err := c.Convert(v1, "v2")
	if err != nil {
		panic(err)
	}
	fmt.Println(back["spec"], back["metadata"])
	// Output:
	// map[content:hi size:large]
	// map[opkit.dev/conversion.v2:{"fields":{"/spec/tls":{"enabled":true}},"values":{"/spec/resources/memory":{"value":"1Gi","as":"large"}}}]
	// map[content:hi resources:map[memory:1Gi] tls:map[enabled:true]] map[name:hello namespace:default uid:1234]
}
