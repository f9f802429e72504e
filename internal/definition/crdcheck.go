package definition

import (
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiservercel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// checkRules compiles every x-kubernetes-validations rule of a version's
// spec schema as the API server does when the CRD is installed (its CEL
// environment, its cost limit), and reports each rule that does not
// compile at the rule's field, so that a typo is found at load with its
// line. field is the schema's, spec.resource.versions[i].schema.
func checkRules(l *errorList, field string, schema *apiextensionsv1.JSONSchemaProps) {
	if schema == nil {
		return
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(schema, &internal, nil); err != nil {
		l.add(field, "%v", err)
		return
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return // newCELEnvs reports a schema that is not structural
	}
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	var walk func(path string, s *structuralschema.Structural)
	walk = func(path string, s *structuralschema.Structural) {
		if s == nil {
			return
		}
		if len(s.XValidations) > 0 {
			results, err := apiservercel.Compile(s, model.SchemaDeclType(s, true), cel.PerCallLimit, envSet, apiservercel.NewExpressionsEnvLoader())
			if err != nil {
				l.add(path+".x-kubernetes-validations", "%v", err)
			}
			for i, r := range results {
				if r.Error != nil {
					l.add(fmt.Sprintf("%s.x-kubernetes-validations[%d].rule", path, i), "%q does not compile: %s", s.XValidations[i].Rule, strings.TrimPrefix(strings.TrimSpace(r.Error.Detail), "compilation failed: "))
				}
				if r.MessageExpressionError != nil {
					l.add(fmt.Sprintf("%s.x-kubernetes-validations[%d].messageExpression", path, i), "does not compile: %s", strings.TrimPrefix(strings.TrimSpace(r.MessageExpressionError.Detail), "compilation failed: "))
				}
			}
		}
		for _, name := range sortedKeys(s.Properties) {
			prop := s.Properties[name]
			walk(path+".properties."+name, &prop)
		}
		walk(path+".items", s.Items)
		if s.AdditionalProperties != nil {
			walk(path+".additionalProperties", s.AdditionalProperties.Structural)
		}
	}
	walk(field, s)
}
