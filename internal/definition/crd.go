package definition

import (
	"slices"

	"github.com/google/cel-go/cel"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// OperatorLabel is set on the CRDs opkit installs, to the Operator's name.
const OperatorLabel = "opkit.dev/operator"

// CRDOptions are what only the engine knows of a CRD it installs.
type CRDOptions struct {
	// ConversionWebhook is how the API server reaches the engine's
	// conversion webhook: a URL or Service whose path is
	// ConversionPath(operator), and the CA bundle of the server's
	// certificate. Used when the definition declares conversion
	// (Conversion is not nil); such a CRD without it has no clientConfig,
	// and the API server refuses it. Defaults to nil.
	ConversionWebhook *apiextensionsv1.WebhookClientConfig
}

// CRD builds the CustomResourceDefinition of the definition's resource
// with no CRDOptions (see CRDWith).
func (d *Definition) CRD() *apiextensionsv1.CustomResourceDefinition {
	return d.CRDWith(CRDOptions{})
}

// CRDWith builds the CustomResourceDefinition of the definition's
// resource: each version's schema under .spec, with the rules of its
// immutable fields and of the fields its states refuse to change, an open
// .status (opkit's fields, status.state for an Operator with states, and
// the Operator's status fields), the status subresource, scale when
// asked, the printer columns (after State, for an Operator with states)
// followed by Age, and the conversion strategy: Webhook
// (ConversionReview v1, opts.ConversionWebhook) when a version declares
// conversion, None otherwise.
func (d *Definition) CRDWith(opts CRDOptions) *apiextensionsv1.CustomResourceDefinition {
	crd, _ := d.buildCRD(opts)
	return crd
}

// buildCRD is CRDWith, and the rules opkit wrote into it by the definition
// field the API server's errors about each map to (see crdField).
func (d *Definition) buildCRD(opts CRDOptions) (*apiextensionsv1.CustomResourceDefinition, map[string]generatedRule) {
	generated := map[string]generatedRule{}
	r := d.Operator.Spec.Resource
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   r.Names.Plural + "." + r.Group,
			Labels: map[string]string{OperatorLabel: d.Operator.Name},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: r.Names.Plural, Singular: r.Names.Singular, Kind: r.Kind, ListKind: r.Names.ListKind,
				ShortNames: r.Names.ShortNames, Categories: r.Names.Categories,
			},
			Scope:      apiextensionsv1.ResourceScope(r.Scope),
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
	}
	if d.Conversion != nil {
		// Set either way: a server-side apply that leaves the field out
		// would keep the strategy applied before.
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{
				ConversionReviewVersions: []string{"v1"},
				ClientConfig:             opts.ConversionWebhook.DeepCopy(),
			},
		}
	}
	for i, v := range r.Versions {
		spec := v.Schema
		if spec == nil {
			spec = &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
		}
		columns := d.withStateColumn(append([]apiextensionsv1.CustomResourceColumnDefinition{}, v.PrinterColumns...))
		columns = append(columns, apiextensionsv1.CustomResourceColumnDefinition{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"})
		sub := &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
		if v.Scale != nil {
			sub.Scale = v.Scale.DeepCopy()
		}
		root := &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec":   *spec.DeepCopy(),
				"status": d.statusSchema(&v),
			},
		}
		addImmutableRules(root, i, &v, generated)
		d.addRefuseRules(root, i, v.Schema, generated)
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v.Name, Served: v.Served == nil || *v.Served, Storage: v.Storage,
			Schema:                   &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: root},
			Subresources:             sub,
			AdditionalPrinterColumns: columns,
		})
	}
	return crd, generated
}

// statusSchema is an open object (opkit's fields and the handlers' are
// kept) in which each spec.status field whose expression has a scalar
// type is declared with that type, and the version's statusSchema fields
// with theirs: a handler's status patch that gives one another type is
// refused by the API server.
func (d *Definition) statusSchema(v *v1alpha1.ResourceVersion) apiextensionsv1.JSONSchemaProps {
	s := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	for _, f := range append(slices.Clone(d.Status), d.States.setFields()...) {
		t := f.schemaType()
		if t == "" {
			continue
		}
		if s.Properties == nil {
			s.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		}
		if _, done := s.Properties[f.Name]; done {
			continue // set by several transitions: the first types it
		}
		prop := apiextensionsv1.JSONSchemaProps{Type: t, Description: "${...} " + f.Field}
		if t == "integer" {
			prop.Format = "int64"
		}
		s.Properties[f.Name] = prop
	}
	mergeStatusSchema(&s, v)
	if d.States != nil {
		if s.Properties == nil {
			s.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		}
		s.Properties[stateStatus] = objectStateSchema(true)
	}
	return s
}

// schemaType is the OpenAPI type of a CEL scalar type, or "" for others.
func schemaType(t *cel.Type) string {
	switch {
	case t == nil:
		return ""
	case t.IsExactType(cel.StringType):
		return "string"
	case t.IsExactType(cel.IntType), t.IsExactType(cel.UintType):
		return "integer"
	case t.IsExactType(cel.DoubleType):
		return "number"
	case t.IsExactType(cel.BoolType):
		return "boolean"
	}
	return ""
}

// OperatorName returns the name of the Operator that owns a CRD, or "".
func OperatorName(crd *apiextensionsv1.CustomResourceDefinition) string {
	return crd.Labels[OperatorLabel]
}
