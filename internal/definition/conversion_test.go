package definition

import (
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// twoVersions is an App with v1 (spec.size) and v2 (spec.memory, stored);
// v1's conversion is appended by each test.
const twoVersions = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: app}
spec:
  resource:
    group: demo.example.com
    kind: App
    versions:
    - name: v2
      storage: true
      schema:
        type: object
        properties:
          image: {type: string}
          replicas: {type: integer}
          memory: {type: string}
          items: {type: array, items: {type: object, properties: {name: {type: string}}}}
    - name: v1
      schema:
        type: object
        properties:
          image: {type: string}
          replicas: {type: integer}
          size: {type: string}
`

func TestConversionCompilesTypedBothWays(t *testing.T) {
	d, err := compileFile(t, "app.yaml", twoVersions+`      conversion:
        fields:
        - field: spec.size
          storageField: spec.memory
          toStorage: "self == 'small' ? '512Mi' : '2Gi'"
          fromStorage: "self == '512Mi' ? 'small' : 'large'"
`)
	if err != nil {
		t.Fatal(err)
	}
	if d.Conversion == nil || d.Conversion.Storage != "v2" || len(d.Conversion.Versions) != 2 {
		t.Fatalf("conversion %+v", d.Conversion)
	}
	m := d.Conversion.Versions["v1"].Fields
	if len(m) != 1 || m[0].StorageField != "spec.memory" || m[0].ToStorage == nil || m[0].FromStorage == nil || m[0].Schema.Type != "string" {
		t.Fatalf("mappings %+v", m)
	}
	crd := d.CRDWith(CRDOptions{ConversionWebhook: &apiextensionsv1.WebhookClientConfig{URL: new("https://127.0.0.1:9443" + ConversionPath("app"))}})
	c := crd.Spec.Conversion
	if c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ConversionReviewVersions[0] != "v1" || *c.Webhook.ClientConfig.URL != "https://127.0.0.1:9443/convert/app" {
		t.Errorf("CRD conversion %+v", c)
	}
}

func TestWithoutConversionTheCRDSaysNoneAndDifferingSchemasAreWarned(t *testing.T) {
	d, err := compileFile(t, "app.yaml", twoVersions)
	if err != nil {
		t.Fatal(err)
	}
	if d.Conversion != nil || d.CRD().Spec.Conversion.Strategy != apiextensionsv1.NoneConverter {
		t.Errorf("conversion %+v, CRD %+v; want none", d.Conversion, d.CRD().Spec.Conversion)
	}
	if len(d.Warnings) != 1 || d.Warnings[0].Field != "spec.resource.versions[1].schema" || d.Warnings[0].Line != 19 ||
		!strings.Contains(d.Warnings[0].Message, "spec.size has no place in v2") ||
		!strings.Contains(d.Warnings[0].Message, "declares no conversion") {
		t.Errorf("warnings %v", d.Warnings)
	}
}

func TestReadVersionTypesSelfAndIsTheDefinitionsGVK(t *testing.T) {
	d, err := compileFile(t, "app.yaml", strings.Replace(twoVersions, "    kind: App\n", "    kind: App\n    readVersion: v1\n", 1)+`      conversion: {}
  status:
    size: "${self.spec.size}"
`)
	if err != nil {
		t.Fatal(err)
	}
	if d.GVK.Version != "v1" || d.StorageVersion != "v2" {
		t.Errorf("GVK %v, storage %s; want v1 read, v2 stored", d.GVK, d.StorageVersion)
	}
}

func TestBadConversionsNameTheFieldAndLine(t *testing.T) {
	mapping := func(lines ...string) string {
		return "      conversion:\n        fields:\n" + strings.Join(lines, "\n") + "\n"
	}
	for _, tc := range []struct {
		name, yaml string
		line       int
		field      string
		message    string
	}{
		{"on the storage version", strings.Replace(twoVersions, "      storage: true\n", "      storage: true\n      conversion: {}\n", 1), 11, "spec.resource.versions[0].conversion", "v2 is the storage version"},
		{"no such field", twoVersions + mapping("        - {field: spec.sizes, storageField: spec.memory}"), 27, "spec.resource.versions[1].conversion.fields[0].field", "spec has no field sizes in v1 (it has: image, replicas, size)"},
		{"no such storage field", twoVersions + mapping("        - {field: spec.size, storageField: spec.mem}"), 27, "spec.resource.versions[1].conversion.fields[0].storageField", "spec has no field mem in v2"},
		{"inside a list", twoVersions + mapping("        - {field: spec.size, storageField: spec.items.name}"), 27, "spec.resource.versions[1].conversion.fields[0].storageField", "spec.items is a list"},
		{"not a spec path", twoVersions + mapping("        - {field: metadata.name, storageField: spec.memory}"), 27, "spec.resource.versions[1].conversion.fields[0].field", "a path of the spec's fields"},
		{"does not compile", twoVersions + mapping("        - field: spec.size", "          storageField: spec.memory", `          toStorage: "self +"`, `          fromStorage: "self"`), 29, "spec.resource.versions[1].conversion.fields[0].toStorage", "Syntax error"},
		{"wrong type", twoVersions + mapping("        - field: spec.size", "          storageField: spec.memory", `          toStorage: "self == 'small' ? 512 : 2048"`, `          fromStorage: "self"`), 29, "spec.resource.versions[1].conversion.fields[0].toStorage", "gives int, but spec.memory is a string in v2"},
		{"wrong field read", twoVersions + mapping("        - field: spec.size", "          storageField: spec.memory", `          toStorage: "self"`, `          fromStorage: "object.spec.size"`), 30, "spec.resource.versions[1].conversion.fields[0].fromStorage", "undefined field 'size'"},
		{"one way only", twoVersions + mapping("        - field: spec.size", "          storageField: spec.memory", `          toStorage: "self"`), 27, "spec.resource.versions[1].conversion.fields[0]", "toStorage and fromStorage together"},
		{"two fields to one", twoVersions + mapping("        - {field: spec.size, storageField: spec.memory}", "        - {field: spec.image, storageField: spec.memory}"), 28, "spec.resource.versions[1].conversion.fields[1].storageField", "each storage field is converted from one field"},
		{"a rename across types", twoVersions + mapping("        - {field: spec.size, storageField: spec.replicas}"), 27, "spec.resource.versions[1].conversion.fields[0]", "a rename needs the same type"},
		{"a field that changed type", strings.Replace(twoVersions, "          replicas: {type: integer}\n          size", "          replicas: {type: string}\n          size", 1) + "      conversion: {}\n", 25, "spec.resource.versions[1].conversion", "spec.replicas is a string in v1 and an integer in v2"},
		{"an unknown read version", strings.Replace(twoVersions, "    kind: App\n", "    kind: App\n    readVersion: v3\n", 1), 8, "spec.resource.readVersion", `"v3" is not a version of the resource (versions: v2, v1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileFile(t, "bad.yaml", tc.yaml)
			es, ok := errors.AsType[Errors](err)
			if !ok {
				t.Fatalf("error %T %v, want Errors", err, err)
			}
			e := es[0]
			if e.File != "bad.yaml" || e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Message, tc.message) {
				t.Errorf("got %s (line %d, field %q)\nwant line %d, field %q, message containing %q", err, e.Line, e.Field, tc.line, tc.field, tc.message)
			}
		})
	}
}
