package compat_test

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/internal/compat"
)

// A field removed from v1's schema is breaking: the API server prunes it.
func ExampleCompare() {
	installed := crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": object(map[string]apiextensionsv1.JSONSchemaProps{
		"size": {Type: "string"}, "text": {Type: "string"},
	})})
	updated := crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": object(map[string]apiextensionsv1.JSONSchemaProps{
		"size": {Type: "string"},
	})})
	for _, f := range compat.Compare(installed, updated) {
		fmt.Println(f.At("operator.yaml", 12))
		fmt.Println(f.DefinitionField)
	}
	// Output:
	// operator.yaml:12: versions[v1].spec.text: breaking: removed: the API server drops it (pruning) from every object as it is read or written, so its values are lost, and clients that set it see it dropped
	// spec.resource.versions[0].schema.properties.text
}
