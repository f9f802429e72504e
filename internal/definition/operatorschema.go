package definition

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// operatorValidator validates an Operator as the API server would, by the
// schema of the Operator CRD (v1alpha1.CustomResourceDefinition): every
// bound it declares (maxAttempts 1 to 1000, at most 64 env variables...)
// holds for a definition read from a file as for one applied to a cluster.
var operatorValidator = sync.OnceValues(func() (validation.SchemaValidator, error) {
	// Through JSON, as the API server gets it: that sets what Go literals
	// leave implicit (additionalProperties with a schema allows).
	data, err := json.Marshal(v1alpha1.CustomResourceDefinition().Spec.Versions[0].Schema.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	var external apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(data, &external); err != nil {
		return nil, err
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&external, &internal, nil); err != nil {
		return nil, err
	}
	v, _, err := validation.NewSchemaValidator(&internal)
	return v, err
})

// checkSchema reports every value of obj, an Operator as read, that the
// Operator's schema refuses, each at its field, and leaves the value out of
// obj so that the rest of the definition can still be checked.
func checkSchema(l *errorList, obj map[string]any) {
	v, err := operatorValidator()
	if err != nil {
		l.add("", "opkit's own Operator schema does not load: %v", err)
		return
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, v) {
		if mustBeType.MatchString(e.Detail) {
			// A value of the wrong type cannot be decoded: leave it out.
			l.add(e.Field, "%s", schemaMessage(e))
			drop(obj, e.Field)
			continue
		}
		// A value out of bounds is kept: Compile's own check of the field,
		// where it has one, says more than the schema.
		l.add(e.Field, "%s", schemaMessage(e))
		l.errs[len(l.errs)-1].fallback = true
	}
}

var mustBeType = regexp.MustCompile(`must be of type (\w+): "(\w+)"$`)

// schemaMessage says what a schema error means, without the path the
// error's field already gives.
func schemaMessage(e *field.Error) string {
	detail := strings.TrimPrefix(e.Detail, e.Field+" in body ")
	switch {
	case e.Type == field.ErrorTypeRequired:
		return "required"
	case mustBeType.MatchString(detail):
		m := mustBeType.FindStringSubmatch(detail)
		return fmt.Sprintf("expected %s, got %s", article(m[1]), article(m[2]))
	case e.Type == field.ErrorTypeNotSupported:
		return e.ErrorBody()
	case e.BadValue != nil && detail != "":
		return fmt.Sprintf("%v: %s", e.BadValue, detail)
	case detail != "":
		return detail
	}
	return e.ErrorBody()
}

func article(typ string) string {
	switch typ {
	case "integer", "object", "array":
		return "an " + typ
	}
	return "a " + typ
}

// drop removes the value at a field path (a.b[1].c) from obj: a map's key
// is deleted, a list's item set to null.
func drop(obj map[string]any, path string) {
	var cur any = obj
	segments := splitPath(path)
	for i, seg := range segments {
		last := i == len(segments)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				delete(c, seg)
				return
			}
			cur = c[seg]
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(c) {
				return
			}
			if last {
				c[n] = nil
				return
			}
			cur = c[n]
		default:
			return
		}
	}
}

// splitPath splits a.b[1].c into a, b, 1, c.
func splitPath(path string) []string {
	return strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == '[' || r == ']' })
}
