package definition

import (
	"errors"
	"strings"
	"testing"
)

// ruled is a definition whose lines the tests below count on: a rule
// appended at the spec's node is on line 23, a field of the version
// appended on line 22.
const ruled = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: site}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions:
    - name: v1
      schema:
        type: object
        properties:
          replicas: {type: integer}
          region: {type: string}
          tags: {type: array, items: {type: string}}
          labels: {type: object, additionalProperties: {type: string}}
          storage:
            type: object
            properties:
              class: {type: string}
              ip-range: {type: string}
`

// specRule appends one rule at the spec's node (line 23).
func specRule(rule string) string {
	return ruled + "        x-kubernetes-validations:\n        - " + rule + "\n"
}

// versionField appends a field of the version (line 22).
func versionField(field string) string { return ruled + "      " + field + "\n" }

func TestEverythingTheAPIServerWouldRefuseInRulesImmutableAndScaleIsAnErrorAtItsLine(t *testing.T) {
	const rule0 = "spec.resource.versions[0].schema.x-kubernetes-validations[0]"
	for _, tc := range []struct {
		name    string
		yaml    string
		line    int
		field   string
		message string
	}{
		{"a rule that does not compile", specRule(`{rule: "self.replica > 1"}`), 23, rule0 + ".rule",
			`"self.replica > 1" does not compile: ERROR: <input>:1:5: undefined field 'replica'`},
		{"a rule that is not a condition", specRule(`{rule: "self.replicas"}`), 23, rule0 + ".rule",
			`"self.replicas" must evaluate to a bool`},
		{"a messageExpression that does not compile", specRule(`{rule: "self.replicas > 0", messageExpression: "'at least one, not ' + self.replicas"}`), 23, rule0 + ".messageExpression",
			"does not compile: ERROR: <input>:1:22: found no matching overload for '_+_'"},
		{"a messageExpression that is not a string", specRule(`{rule: "self.replicas > 0", messageExpression: "self.replicas"}`), 23, rule0 + ".messageExpression",
			"a messageExpression must evaluate to a string"},
		{"optionalOldSelf on a rule without oldSelf", specRule(`{rule: "self.replicas > 0", optionalOldSelf: true}`), 23, rule0 + ".optionalOldSelf",
			"may not be set if oldSelf is not used in rule"},
		{"a reason the API server does not know", specRule(`{rule: "self.replicas > 0", reason: FieldValueWrong}`), 23, rule0 + ".reason",
			`Unsupported value: "FieldValueWrong"`},
		{"a fieldPath to no field", specRule(`{rule: "self.replicas > 0", fieldPath: .replica}`), 23, rule0 + ".fieldPath",
			"must be a valid path"},
		{"a transition rule on a list's items", strings.Replace(ruled, "items: {type: string}}", `items: {type: string, x-kubernetes-validations: [{rule: "self == oldSelf"}]}}`, 1), 15,
			"spec.resource.versions[0].schema.properties.tags.items.x-kubernetes-validations[0].rule",
			`"self == oldSelf" reads oldSelf, which the API server cannot know here: below spec.resource.versions[0].schema.properties.tags the old and the new values are not paired`},
		{"a rule over the cost budget", strings.Replace(ruled, "items: {type: string}}", `items: {type: string}, x-kubernetes-validations: [{rule: "self.all(x, self.all(y, x != y || true))"}]}`, 1), 15,
			"spec.resource.versions[0].schema.properties.tags.x-kubernetes-validations[0].rule",
			"the API server refuses it: estimated rule cost exceeds budget by factor of"},

		{"an immutable field the schema lacks", versionField("immutable: [spec.nosuch]"), 22, "spec.resource.versions[0].immutable[0]",
			`"spec.nosuch": the schema has no field spec.nosuch (it has labels, region, replicas, storage, tags)`},
		{"an immutable field deeper, the schema lacks", versionField("immutable: [spec.storage.nosuch]"), 22, "spec.resource.versions[0].immutable[0]",
			`"spec.storage.nosuch": the schema has no field spec.storage.nosuch (it has class, ip-range)`},
		{"an immutable field in a list", versionField("immutable: [spec.tags.name]"), 22, "spec.resource.versions[0].immutable[0]",
			`"spec.tags.name" goes through spec.tags, a list`},
		{"an immutable field in a map", versionField("immutable: [spec.labels.team]"), 22, "spec.resource.versions[0].immutable[0]",
			`"spec.labels.team" goes through spec.labels, a map`},
		{"an immutable field outside spec", versionField("immutable: [metadata.name]"), 22, "spec.resource.versions[0].immutable[0]",
			`"metadata.name": an immutable field is a field of spec`},
		{"an immutable field twice", versionField("immutable: [spec.region, spec.region]"), 22, "spec.resource.versions[0].immutable[1]",
			`"spec.region" is listed twice`},

		{"scale of a field the schema lacks", versionField("scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.replicas}\n      statusSchema: {properties: {replicas: {type: integer}}}"), 22,
			"spec.resource.versions[0].scale.specReplicasPath", `".spec.size": the schema has no field spec.size; declare it with type: integer`},
		{"scale of a string", versionField("scale: {specReplicasPath: .spec.region, statusReplicasPath: .status.replicas}\n      statusSchema: {properties: {replicas: {type: integer}}}"), 22,
			"spec.resource.versions[0].scale.specReplicasPath", `".spec.region" has type string, but the scale subresource reads it as type integer`},
		{"scale of spec replicas in the status", versionField("scale: {specReplicasPath: .status.replicas, statusReplicasPath: .status.replicas}\n      statusSchema: {properties: {replicas: {type: integer}}}"), 22,
			"spec.resource.versions[0].scale.specReplicasPath", `".status.replicas": expected a path of field names under .spec, like .spec.replicas`},
		{"scale of a status nothing writes", versionField("scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}"), 22,
			"spec.resource.versions[0].scale.statusReplicasPath", `".status.replicas": nothing writes status.replicas: compute it in spec.status`},
		{"scale of a status of unknown type", versionField("scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}") +
			"  status:\n    replicas: \"${dyn(self.spec.replicas)}\"\n", 22,
			"spec.resource.versions[0].scale.statusReplicasPath", `".status.replicas": spec.status.replicas computes it, but its type is not known at load`},
		{"scale with a selector that is not a string", versionField("scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.replicas}") +
			"  status:\n    replicas: \"${self.spec.replicas}\"\n", 22,
			"spec.resource.versions[0].scale.labelSelectorPath", `".status.replicas" has type integer, but the scale subresource reads it as type string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileFile(t, "site.yaml", tc.yaml)
			if err == nil {
				t.Fatal("compiled")
			}
			es, ok := errors.AsType[Errors](err)
			if !ok {
				t.Fatalf("error %T %v, want Errors", err, err)
			}
			for _, e := range es {
				if e.File == "site.yaml" && e.Line == tc.line && e.Field == tc.field && strings.Contains(e.Message, tc.message) {
					return
				}
			}
			t.Errorf("no error at site.yaml:%d %s with %q; got:\n%v", tc.line, tc.field, tc.message, err)
		})
	}
}

func TestValidRulesAndTransitionRulesCompile(t *testing.T) {
	for name, rule := range map[string]string{
		"a rule with a message":                  `{rule: "self.replicas <= 10", message: "at most 10 replicas"}`,
		"a messageExpression, fieldPath, reason": `{rule: "self.replicas <= 10", messageExpression: "'at most 10 replicas in ' + self.region", fieldPath: .replicas, reason: FieldValueForbidden}`,
		"a transition rule":                      `{rule: "self.region == oldSelf.region", message: "the region stays"}`,
		"a transition rule with optionalOldSelf": `{rule: "!oldSelf.hasValue() || self.replicas >= oldSelf.value().replicas", optionalOldSelf: true, message: "replicas never go down"}`,
	} {
		if _, err := compileFile(t, "site.yaml", specRule(rule)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestImmutableFieldsBecomeTransitionRulesInTheCRD(t *testing.T) {
	d, err := compileFile(t, "site.yaml", versionField("immutable: [spec.region, spec.storage.ip-range]"))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Operator.Spec.Resource.Versions[0].Schema; len(s.Properties["region"].XValidations) != 0 {
		t.Errorf("the definition's schema gained rules: %+v", s.Properties["region"])
	}
	root := d.CRD().Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	for _, tc := range []struct {
		path  string
		rules []string
	}{
		{"spec.region", []string{spec.Properties["region"].XValidations[0].Rule, spec.Properties["region"].XValidations[0].Message}},
		{"spec.storage.ip-range", []string{spec.Properties["storage"].Properties["ip-range"].XValidations[0].Rule, spec.Properties["storage"].Properties["ip-range"].XValidations[0].Message}},
	} {
		if want := "self == oldSelf"; tc.rules[0] != want {
			t.Errorf("%s: rule %q, want %q", tc.path, tc.rules[0], want)
		}
		if want := tc.path + " is immutable: it cannot change once the object is created; delete and re-create the object to change it"; tc.rules[1] != want {
			t.Errorf("%s: message %q, want %q", tc.path, tc.rules[1], want)
		}
	}
	if len(root.XValidations) != 2 {
		t.Fatalf("root rules %+v, want one per immutable field", root.XValidations)
	}
	for i, want := range []struct{ rule, fieldPath, message string }{
		{"(has(self.spec) && has(self.spec.region)) == (has(oldSelf.spec) && has(oldSelf.spec.region))", ".spec.region",
			"spec.region is immutable: it cannot be added or removed once the object is created; delete and re-create the object to change it"},
		{"(has(self.spec) && has(self.spec.storage) && has(self.spec.storage.ip__dash__range)) == (has(oldSelf.spec) && has(oldSelf.spec.storage) && has(oldSelf.spec.storage.ip__dash__range))", ".spec.storage['ip-range']",
			"spec.storage.ip-range is immutable: it cannot be added or removed once the object is created; delete and re-create the object to change it"},
	} {
		got := root.XValidations[i]
		if got.Rule != want.rule || got.FieldPath != want.fieldPath || got.Message != want.message {
			t.Errorf("root rule %d:\n%+v\nwant %+v", i, got, want)
		}
	}
}

func TestCRDErrorPathsMapToTheDefinitionsFields(t *testing.T) {
	for crd, want := range map[string]string{
		"spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[a-b].items.x-kubernetes-validations[0].rule": "spec.resource.versions[1].schema.properties.a-b.items.x-kubernetes-validations[0].rule",
		"spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].messageExpression":                  "spec.resource.versions[0].schema.x-kubernetes-validations[2].messageExpression",
		"spec.validation.openAPIV3Schema.properties[status].properties[replicas].type":                                    "spec.resource.versions[0].statusSchema.properties.replicas.type",
		"spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule":                                                "spec.resource.versions[0]" + crdRoot + ".x-kubernetes-validations[0].rule",
		"spec.validation.openAPIV3Schema":                       "spec.resource.versions[0]" + crdRoot,
		"spec.subresources.scale.specReplicasPath":              "spec.resource.versions[0].scale.specReplicasPath",
		"spec.versions[2].subresources.scale.labelSelectorPath": "spec.resource.versions[2].scale.labelSelectorPath",
		"spec.additionalPrinterColumns[1].jsonPath":             "spec.resource.versions[0].printerColumns[1].jsonPath",
		"spec.versions[1].name":                                 "spec.resource.versions[1].name",
		"spec.versions":                                         "spec.resource.versions",
		"spec.group":                                            "spec.resource.group",
		"spec.names.shortNames[0]":                              "spec.resource.names.shortNames[0]",
		"spec.names.listKind":                                   "spec.resource.kind",
		"metadata.name":                                         "",
		"status.storedVersions[0]":                              "",
		"spec.conversion.strategy":                              "spec.resource",
	} {
		if got := crdField(crd); got != want {
			t.Errorf("crdField(%s) = %s, want %s", crd, got, want)
		}
	}
	generated := map[string]generatedRule{"spec.resource.versions[0].schema.properties.region.x-kubernetes-validations[1]": {Entry: "spec.resource.versions[0].immutable[0]"}}
	if g, ok := generatedAt(generated, "spec.resource.versions[0].schema.properties.region.x-kubernetes-validations[1].rule"); !ok || g.Entry != "spec.resource.versions[0].immutable[0]" {
		t.Errorf("a generated rule's error is not placed at its immutable entry: %+v %v", g, ok)
	}
	if _, ok := generatedAt(generated, "spec.resource.versions[0].schema.properties.region.x-kubernetes-validations[0].rule"); ok {
		t.Error("the user's own rule was taken for a generated one")
	}
}
