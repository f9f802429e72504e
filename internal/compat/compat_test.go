package compat_test

import (
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/definition"
)

// compile loads the one Operator of a file of the corpus.
func compile(t *testing.T, file string) *definition.Definition {
	t.Helper()
	defs, err := definition.CompileFiles(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 {
		t.Fatalf("%s: %d definitions, want 1", file, len(defs))
	}
	return defs[0]
}

// corpus compares the before.yaml and after.yaml of testdata/KIND/NAME, and
// returns the findings with the new definition.
func corpus(t *testing.T, kind, name string) (compat.Findings, *definition.Definition) {
	t.Helper()
	dir := filepath.Join("testdata", kind, name)
	before, after := compile(t, filepath.Join(dir, "before.yaml")), compile(t, filepath.Join(dir, "after.yaml"))
	return compat.Compare(before.CRD(), after.CRD()), after
}

func TestEachBreakingChangeOfTheCorpusIsFlaggedWithItsFieldAndReason(t *testing.T) {
	for _, c := range []struct{ name, field, reason string }{
		{"removed-field", "versions[v1].spec.text", "removed: the API server drops it (pruning) from every object"},
		{"narrowed-type", "versions[v1].spec.replicas", "the type changes from number to integer"},
		{"new-required-field", "versions[v1].spec.region", "a new required field: objects made before lack it"},
		{"optional-becomes-required", "versions[v1].spec.owner", "an optional field becomes required"},
		{"tighter-enum", "versions[v1].spec.size", `enum value "large" is removed`},
		{"tighter-bounds", "versions[v1].spec.text", "maxLength falls from 256 to 64: values beyond it are refused"},
		{"pattern-added", "versions[v1].spec.owner", `a pattern "^[a-z]+$" is added`},
		{"format-added", "versions[v1].spec.owner", "format email is added"},
		{"preserve-unknown-fields-removed", "versions[v1].spec.extra", "x-kubernetes-preserve-unknown-fields is removed"},
		{"removed-stored-version", "versions[v1]", "version v1 is removed, and objects are still stored as v1 (status.storedVersions)"},
		{"version-no-longer-served", "versions[v2].served", "v2 is no longer served: its clients get 404"},
		{"storage-changed-without-conversion", "versions[v2].storage", "the storage version changes from v1 to v2, whose schema differs, and the CRD has no conversion"},
		{"scope-changed", "scope", "the scope changes from Namespaced to Cluster"},
		{"group-changed", "group", "the group changes from demo.example.com to caches.example.com: this is another CRD, caches.caches.example.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			findings, after := corpus(t, "breaking", c.name)
			breaking := findings.Breaking()
			if len(breaking) != 1 {
				t.Fatalf("%d breaking findings, want 1 at %s:\n%v", len(breaking), c.field, findings)
			}
			f := breaking[0]
			if f.Field != c.field || !strings.Contains(f.Reason, c.reason) {
				t.Errorf("found %s, want %s: ...%s...", f, c.field, c.reason)
			}
			if line := after.Line(f.DefinitionField); line == 0 {
				t.Errorf("%s: no line in after.yaml for %q", f.Field, f.DefinitionField)
			}
		})
	}
}

func TestTheSafeChangesOfTheCorpusPass(t *testing.T) {
	for _, name := range []string{"new-optional-field", "wider-enum", "looser-bounds", "new-version", "columns-descriptions-default", "transition-rule"} {
		t.Run(name, func(t *testing.T) {
			if findings, _ := corpus(t, "safe", name); len(findings) > 0 {
				t.Errorf("a safe change is flagged:\n%v", findings)
			}
		})
	}
}

func TestANewValidationRuleIsAWarning(t *testing.T) {
	findings, after := corpus(t, "warning", "new-validation-rule")
	if len(findings) != 1 || findings[0].Severity != compat.Warning || findings[0].Field != "versions[v1].spec.owner" ||
		!strings.Contains(findings[0].Reason, `a new validation rule "self.size() <= 63"`) {
		t.Fatalf("findings %v, want one warning at versions[v1].spec.owner", findings)
	}
	// The rule's own line: the line of "- {rule: ...}".
	if got := after.Line(findings[0].DefinitionField); got != 20 {
		t.Errorf("the rule is placed at line %d (%s), want 20", got, findings[0].DefinitionField)
	}
}

func TestTheRemovedFieldIsPlacedAtItsParentsLine(t *testing.T) {
	findings, after := corpus(t, "breaking", "removed-field")
	// properties: is line 13 of after.yaml; text was on line 16 of before.yaml.
	if got := after.Line(findings[0].DefinitionField); got != 13 {
		t.Errorf("line %d for %s, want 13 (properties:)", got, findings[0].DefinitionField)
	}
}

// crd is a CRD of one or two versions whose .spec schemas are given.
func crd(storage string, specs map[string]apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Name = "caches.demo.example.com"
	c.Spec.Group, c.Spec.Scope = "demo.example.com", apiextensionsv1.NamespaceScoped
	c.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "caches", Singular: "cache", Kind: "Cache"}
	for _, name := range []string{"v1", "v2"} {
		spec, ok := specs[name]
		if !ok {
			continue
		}
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: name == storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
			}},
		})
	}
	return c
}

func object(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
}

func TestAVersionStoredPerTheInstalledCRDsStatusCannotBeRemoved(t *testing.T) {
	spec := object(map[string]apiextensionsv1.JSONSchemaProps{"a": {Type: "string"}})
	installed := crd("v2", map[string]apiextensionsv1.JSONSchemaProps{"v1": spec, "v2": spec})
	installed.Spec.Versions[0].Served = false
	updated := crd("v2", map[string]apiextensionsv1.JSONSchemaProps{"v2": spec})

	installed.Status.StoredVersions = []string{"v2"}
	if got := compat.Compare(installed, updated); len(got) != 0 {
		t.Errorf("v1, neither served nor stored, removed: %v; want nothing", got)
	}
	installed.Status.StoredVersions = []string{"v1", "v2"}
	got := compat.Compare(installed, updated).Breaking()
	if len(got) != 1 || got[0].Field != "versions[v1]" || !strings.Contains(got[0].Reason, "opkit migrate") {
		t.Errorf("v1, still stored, removed: %v; want one breaking finding that says to migrate", got)
	}
}

func TestAChangeOfStorageVersionPassesWithConversionOrTheSameSchema(t *testing.T) {
	v1 := object(map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "string"}})
	v2 := object(map[string]apiextensionsv1.JSONSchemaProps{"memory": {Type: "string"}})
	installed := crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": v1, "v2": v2})
	updated := crd("v2", map[string]apiextensionsv1.JSONSchemaProps{"v1": v1, "v2": v2})
	if got := compat.Compare(installed, updated).Breaking(); len(got) != 1 || got[0].Field != "versions[v2].storage" {
		t.Fatalf("storage v1 -> v2 without conversion: %v; want versions[v2].storage", got)
	}
	updated.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter}
	if got := compat.Compare(installed, updated); len(got) != 0 {
		t.Errorf("storage v1 -> v2 with a conversion webhook: %v; want nothing", got)
	}
	described := *v1.DeepCopy()
	described.Description = "the same fields, described"
	same := crd("v2", map[string]apiextensionsv1.JSONSchemaProps{"v1": v1, "v2": described})
	if got := compat.Compare(crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": v1, "v2": v1}), same); len(got) != 0 {
		t.Errorf("storage v1 -> v2 of the same schema: %v; want nothing", got)
	}
}

func TestTypesNarrowAndWiden(t *testing.T) {
	ptrTrue := true
	for _, c := range []struct {
		name          string
		before, after apiextensionsv1.JSONSchemaProps
		breaking      bool
	}{
		{"integer to number widens", apiextensionsv1.JSONSchemaProps{Type: "integer"}, apiextensionsv1.JSONSchemaProps{Type: "number"}, false},
		{"number to integer narrows", apiextensionsv1.JSONSchemaProps{Type: "number"}, apiextensionsv1.JSONSchemaProps{Type: "integer"}, true},
		{"int32 to int64 widens", apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}, apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}, false},
		{"int64 to int32 narrows", apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}, apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}, true},
		{"string to int-or-string widens", apiextensionsv1.JSONSchemaProps{Type: "string"}, apiextensionsv1.JSONSchemaProps{XIntOrString: true}, false},
		{"int-or-string to string narrows", apiextensionsv1.JSONSchemaProps{XIntOrString: true}, apiextensionsv1.JSONSchemaProps{Type: "string"}, true},
		{"any to string narrows", apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: &ptrTrue}, apiextensionsv1.JSONSchemaProps{Type: "string"}, true},
		{"a minimum lowered loosens", apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(5)}, apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(1)}, false},
		{"a minimum made exclusive tightens", apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(1)}, apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(1), ExclusiveMinimum: true}, true},
		{"multipleOf 10 to 5 loosens", apiextensionsv1.JSONSchemaProps{Type: "integer", MultipleOf: ptr(10)}, apiextensionsv1.JSONSchemaProps{Type: "integer", MultipleOf: ptr(5)}, false},
		{"a list becoming a set tightens", apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
			apiextensionsv1.JSONSchemaProps{Type: "array", XListType: new("set"), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}}, true},
		{"a map's values narrowed", apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
			apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &apiextensionsv1.JSONSchemaProps{Type: "integer"}}}, true},
	} {
		installed := crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": object(map[string]apiextensionsv1.JSONSchemaProps{"f": c.before})})
		updated := crd("v1", map[string]apiextensionsv1.JSONSchemaProps{"v1": object(map[string]apiextensionsv1.JSONSchemaProps{"f": c.after})})
		if got := compat.Compare(installed, updated).Breaking(); (len(got) > 0) != c.breaking {
			t.Errorf("%s: breaking findings %v, want breaking %v", c.name, got, c.breaking)
		}
	}
}

func ptr(f float64) *float64 { return &f }

// TestAChangeOfStorageVersionWithDeclaredConversionIsNotBreaking compares
// docs/examples/website-v2 (v2 stored, v1 converting) with its CRD of
// before, v1 stored, as the engine builds it (CRDWith the conversion
// webhook's clientConfig), as the API server returns it once installed
// (with caBundle and storedVersions), and as opkit lint builds it (CRD).
func TestAChangeOfStorageVersionWithDeclaredConversionIsNotBreaking(t *testing.T) {
	d := compile(t, "../../docs/examples/website-v2/operator.yaml")
	cc := &apiextensionsv1.WebhookClientConfig{URL: ptrTo("https://127.0.0.1:7383" + definition.ConversionPath(d.Operator.Name)), CABundle: []byte("a bundle")}
	installed := d.CRDWith(definition.CRDOptions{ConversionWebhook: cc})
	// Before: v1 stored, no conversion.
	installed.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	for i := range installed.Spec.Versions {
		installed.Spec.Versions[i].Storage = installed.Spec.Versions[i].Name == "v1"
	}
	installed.Status.StoredVersions = []string{"v1"}
	readBack := d.CRDWith(definition.CRDOptions{ConversionWebhook: cc})
	readBack.Status.StoredVersions = []string{"v1", "v2"}
	for name, updated := range map[string]*apiextensionsv1.CustomResourceDefinition{
		"CRDWith": d.CRDWith(definition.CRDOptions{ConversionWebhook: cc}),
		"CRD":     d.CRD(),
	} {
		if got := compat.Compare(installed, updated).Breaking(); len(got) != 0 {
			t.Errorf("storage v1 -> v2 with conversion declared (%s): %v; want nothing breaking", name, got)
		}
		if got := compat.Compare(readBack, updated).Breaking(); len(got) != 0 {
			t.Errorf("the installed CRD of the conversion against itself (%s): %v; want nothing breaking", name, got)
		}
	}
	// Without the conversion, the same change is breaking.
	none := d.CRD()
	none.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if got := compat.Compare(installed, none).Breaking(); len(got) != 1 || got[0].Field != "versions[v2].storage" {
		t.Errorf("storage v1 -> v2 without conversion: %v; want versions[v2].storage", got)
	}
}

func ptrTo[T any](v T) *T { return &v }
