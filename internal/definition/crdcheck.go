package definition

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// checkCRD runs the API server's own validation of a
// CustomResourceDefinition over the CRD the definition makes, as creating
// it would, and reports each error at the definition's field it comes
// from: everything the API server would refuse is an error at load, with
// its line, before anything is applied. That covers the schemas'
// x-kubernetes-validations rules: a rule or messageExpression that does
// not compile, a messageExpression that is not a string, a transition
// rule (one reading oldSelf) where the old value cannot be known, a
// rule over the cost budget, a reason or fieldPath the API server does
// not accept. An error about a rule opkit wrote (an immutable field's) is
// placed at the immutable entry. A field another check already reported
// a problem at, or in, is left to that check.
func checkCRD(l *errorList, d *Definition) {
	// The engine fills in where its conversion webhook is; any address
	// stands for it here, where only the CRD's shape is checked.
	crd, generated := d.buildCRD(CRDOptions{ConversionWebhook: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://opkit.invalid" + ConversionPath(d.Operator.Name))}})
	// Through JSON, as the API server gets it, then defaulted and
	// converted as it does (identical versions' schemas move to the top).
	data, err := json.Marshal(crd)
	if err != nil {
		l.add("spec.resource", "%v", err)
		return
	}
	var external apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(data, &external); err != nil {
		l.add("spec.resource", "%v", err)
		return
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&external)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&external, &internal, nil); err != nil {
		l.add("spec.resource", "%v", err)
		return
	}
	errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal)
	known := make([]string, 0, len(l.errs))
	for _, e := range l.errs {
		known = append(known, e.Field)
	}
	added := map[string]bool{}
	for _, e := range errs {
		f := crdField(e.Field)
		if f == "" {
			continue
		}
		msg := crdMessage(e)
		if g, ok := generatedAt(generated, f); ok {
			f, msg = g.Entry, fmt.Sprintf("the rule opkit makes of it, %q on %s, is refused by the API server: %s", g.Rule, g.Node, msg)
		}
		if i := strings.Index(f, crdRoot); i >= 0 {
			f = f[:i] // a problem of the whole object's schema: the version's
		}
		if overlaps(known, f) || (added[f] && strings.HasPrefix(e.Detail, "contributed to estimated rule cost total")) {
			continue // said, or the rule's own cost said it
		}
		added[f] = true
		l.add(f, "%s", msg)
	}
}

// crdRoot marks, in a mapped field, the root of a version's object schema,
// which the definition does not write (opkit does).
const crdRoot = ".<root>"

var (
	crdVersionRE = regexp.MustCompile(`^spec\.versions\[(\d+)\]`)
	crdKeyRE     = regexp.MustCompile(`\[([^\]0-9][^\]]*)\]`)
)

// crdField maps the path of an error in the CRD to the definition's field:
// spec.versions[i].schema.openAPIV3Schema.properties[spec].properties[a]
// is spec.resource.versions[i].schema.properties.a, the top-level fields a
// single version's (or identical versions') schema, subresources and
// columns move to are version 0's, status is the version's statusSchema,
// subresources.scale its scale, additionalPrinterColumns its
// printerColumns; group, names and scope are spec.resource's. The CRD's
// own name (plural.group, each checked with its field) and its status give
// "".
func crdField(p string) string {
	version := "spec.resource.versions[0]"
	rest := ""
	switch {
	case crdVersionRE.MatchString(p):
		m := crdVersionRE.FindString(p)
		version = "spec.resource.versions" + m[len("spec.versions"):]
		rest = p[len(m):]
	case strings.HasPrefix(p, "spec.validation"), strings.HasPrefix(p, "spec.subresources"), strings.HasPrefix(p, "spec.additionalPrinterColumns"):
		rest = "." + strings.TrimPrefix(p, "spec.")
		rest = strings.Replace(rest, ".validation", ".schema", 1)
	case strings.HasPrefix(p, "spec.names.kind"), strings.HasPrefix(p, "spec.names.listKind"):
		return "spec.resource.kind" // both come from the kind
	case strings.HasPrefix(p, "spec.group"), strings.HasPrefix(p, "spec.names"), strings.HasPrefix(p, "spec.scope"), strings.HasPrefix(p, "spec.versions"):
		return "spec.resource." + strings.TrimPrefix(p, "spec.")
	case strings.HasPrefix(p, "metadata"), strings.HasPrefix(p, "status"):
		return "" // the CRD's name (plural.group: each is checked) and status (the API server's)
	default:
		return "spec.resource"
	}
	rest = crdKeyRE.ReplaceAllString(rest, ".$1")
	switch {
	case strings.HasPrefix(rest, ".schema.openAPIV3Schema.properties.spec"):
		return version + ".schema" + strings.TrimPrefix(rest, ".schema.openAPIV3Schema.properties.spec")
	case strings.HasPrefix(rest, ".schema.openAPIV3Schema.properties.status"):
		return version + ".statusSchema" + strings.TrimPrefix(rest, ".schema.openAPIV3Schema.properties.status")
	case strings.HasPrefix(rest, ".schema.openAPIV3Schema"):
		return version + crdRoot + strings.TrimPrefix(rest, ".schema.openAPIV3Schema")
	case strings.HasPrefix(rest, ".subresources.scale"):
		return version + ".scale" + strings.TrimPrefix(rest, ".subresources.scale")
	case strings.HasPrefix(rest, ".additionalPrinterColumns"):
		return version + ".printerColumns" + strings.TrimPrefix(rest, ".additionalPrinterColumns")
	case strings.HasPrefix(rest, ".name"):
		return version + ".name"
	}
	return version
}

// generatedAt finds the generated rule a mapped field is at or in.
func generatedAt(generated map[string]generatedRule, f string) (generatedRule, bool) {
	for key, g := range generated {
		if f == key || strings.HasPrefix(f, key+".") {
			return g, true
		}
	}
	return generatedRule{}, false
}

// overlaps reports whether f is one of known or in one of them, or is
// spec.resource or its versions, over one of them: the API server's
// problems of the whole CRD (two storage versions) are what opkit's own
// check of the resource said, with its field.
func overlaps(known []string, f string) bool {
	coarse := f == "spec.resource" || f == "spec.resource.versions"
	for _, k := range known {
		if k != "" && (f == k || strings.HasPrefix(f, k+".") || strings.HasPrefix(f, k+"[") ||
			(coarse && (strings.HasPrefix(k, f+".") || strings.HasPrefix(k, f+"[")))) {
			return true
		}
	}
	return false
}

// crdMessage says what the API server said, in the definition's terms.
func crdMessage(e *field.Error) string {
	rule := ""
	switch v := e.BadValue.(type) {
	case apiextensions.ValidationRule:
		rule = v.Rule
	case string:
		rule = v
	}
	detail := strings.TrimSpace(e.Detail)
	switch {
	case strings.HasPrefix(detail, "compilation failed: "):
		return fmt.Sprintf("%q does not compile: %s", rule, strings.TrimPrefix(detail, "compilation failed: "))
	case strings.HasPrefix(detail, "messageExpression compilation failed: "):
		return "does not compile: " + strings.TrimPrefix(detail, "messageExpression compilation failed: ")
	case strings.HasPrefix(detail, "messageExpression must evaluate to a string"):
		return "a messageExpression must evaluate to a string, the message"
	case strings.HasPrefix(detail, "cel expression must evaluate to a bool"):
		return fmt.Sprintf("%q must evaluate to a bool: true when the value is valid", rule)
	case strings.HasPrefix(detail, "oldSelf cannot be used on the uncorrelatable portion of the schema within "):
		within := crdField(strings.TrimPrefix(detail, "oldSelf cannot be used on the uncorrelatable portion of the schema within "))
		return fmt.Sprintf("%q reads oldSelf, which the API server cannot know here: below %s the old and the new values are not paired (the items of a list that is not x-kubernetes-list-type: map, or the fields of an x-kubernetes-map-type: atomic object); put the transition rule on %s itself, or make the list x-kubernetes-list-type: map",
			rule, within, within)
	case e.Type == field.ErrorTypeForbidden:
		return "the API server refuses it: " + detail
	case e.Type == field.ErrorTypeInvalid:
		switch e.BadValue.(type) {
		case string, bool, int, int32, int64, float64:
			return e.ErrorBody()
		}
		return detail
	}
	return e.ErrorBody()
}
