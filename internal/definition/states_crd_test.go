package definition

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

func TestStatusStateIsTypedByObjectStateInTheCRD(t *testing.T) {
	crd := compileDatabase(t).CRD()
	state := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["state"]
	want := map[string]string{
		"name": "string", "seq": "integer/int64", "since": "string/date-time", "reason": "string", "from": "string",
		"trigger": "string", "by": "string", "message": "string", "run": "string", "question": "string", "choices": "array",
	}
	got := map[string]string{}
	for name, p := range state.Properties {
		got[name] = p.Type
		if p.Format != "" {
			got[name] += "/" + p.Format
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("status.state's properties %v\nwant %v", got, want)
	}
	if n := reflect.TypeFor[v1alpha1.ObjectState]().NumField(); n != len(want) {
		t.Errorf("ObjectState has %d fields, the test knows %d", n, len(want))
	}
	if items := state.Properties["choices"].Items; items == nil || items.Schema.Type != "string" {
		t.Errorf("choices' items %+v", items)
	}
	// Without states, status.state is the handlers' to write.
	if _, ok := compilePrinter(t).CRD().Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["state"]; ok {
		t.Error("status.state typed for an Operator without states")
	}
}

func TestTheStateColumnComesFirstUnlessTheOperatorHasOne(t *testing.T) {
	names := func(crd *apiextensionsv1.CustomResourceDefinition) []string {
		var out []string
		for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			out = append(out, c.Name+"="+c.JSONPath)
		}
		return out
	}
	if got, want := names(compileDatabase(t).CRD()), []string{"State=.status.state.name", "Version=.spec.version", "Running=.status.version", "Age=.metadata.creationTimestamp"}; !slices.Equal(got, want) {
		t.Errorf("columns %v, want %v", got, want)
	}
	own := replace(t, machine, "          replicas: {type: integer}\n", "          replicas: {type: integer}\n      printerColumns:\n      - {name: Image, jsonPath: .spec.image, type: string}\n      - {name: State, jsonPath: .status.state.reason, type: string}\n")
	d, err := compileOne(t, "app.yaml", own, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(d.CRD()), []string{"Image=.spec.image", "State=.status.state.reason", "Age=.metadata.creationTimestamp"}; !slices.Equal(got, want) {
		t.Errorf("columns %v, want %v", got, want)
	}
	if got := names(compilePrinter(t).CRD()); slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "State=") }) {
		t.Errorf("columns of an Operator without states: %v", got)
	}
}

func TestRefusedFieldsBecomeOneTransitionRuleEachAtTheRoot(t *testing.T) {
	rules := func(d *Definition) apiextensionsv1.ValidationRules {
		return d.CRD().Spec.Versions[0].Schema.OpenAPIV3Schema.XValidations
	}
	db := rules(compileDatabase(t))
	if len(db) != 1 {
		t.Fatalf("rules %+v, want one for spec.version", db)
	}
	want := apiextensionsv1.ValidationRule{
		Rule: `!has(oldSelf.status) || !has(oldSelf.status.state) || !has(oldSelf.status.state.name) || ` +
			`!(oldSelf.status.state.name in ["Upgrading", "Verifying", "NeedsAttention", "RollingBack"]) || ` +
			`((has(self.spec) && has(self.spec.version)) == (has(oldSelf.spec) && has(oldSelf.spec.version)) && ` +
			`(!(has(self.spec) && has(self.spec.version)) || self.spec.version == oldSelf.spec.version))`,
		MessageExpression: `"spec.version cannot change while the Database is " + oldSelf.status.state.name + (oldSelf.status.state.name in ["NeedsAttention"] ? ": it waits for a person's decision first (opkit decide)" : ": wait until it leaves " + oldSelf.status.state.name)`,
		FieldPath:         ".spec.version",
	}
	got := db[0]
	got.Reason = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rule\n%+v\nwant\n%+v", got, want)
	}
	if r := db[0].Reason; r == nil || *r != apiextensionsv1.FieldValueForbidden {
		t.Errorf("reason %v, want Forbidden", r)
	}
	// spec whole, and a field two states refuse: one rule each.
	both := replace(t, machine, "    refuses: [spec.image]\n", "    refuses: [spec, spec.image]\n")
	both = replace(t, both, "  - name: Review\n", "  - name: Review\n    refuses: [spec.image]\n")
	d, err := compileOne(t, "app.yaml", both, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := rules(d)
	if len(rs) != 2 || !strings.Contains(rs[0].Rule, `in ["Running"]) || ((has(self.spec)) == (has(oldSelf.spec)) && (!(has(self.spec)) || self.spec == oldSelf.spec))`) ||
		!strings.Contains(rs[1].Rule, `in ["Running", "Review"])`) || rs[0].FieldPath != ".spec" {
		t.Errorf("rules %+v", rs)
	}
}
