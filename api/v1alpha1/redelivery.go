package v1alpha1

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// A Redelivery (redeliveries.opkit.dev, namespaced) asks the engine to
// handle a webhook delivery of its archive again, on purpose: opkit
// events redeliver creates one. It
// goes through the Kubernetes API so that RBAC says who may redeliver
// (create on redeliveries.opkit.dev in a namespace), and so that only the
// acting replica (the leader) answers: the engine that runs the
// delivery's operator, in the Redelivery's namespace (an engine with
// Options.Namespace reads that namespace's only), writes its status once
// (RedeliveryStatus), and never acts on it again. The object stays as the
// record of the request; deleting it changes nothing.
const (
	// RedeliveryKind is the kind; RedeliveryResource its plural.
	RedeliveryKind     = "Redelivery"
	RedeliveryResource = "redeliveries"
)

// The outcomes of a Redelivery, in status.outcome.
const (
	// RedeliveryAccepted: the delivery was recorded again, Pending, as
	// status.redelivery, and is handled as a delivery is.
	RedeliveryAccepted = "Accepted"
	// RedeliveryRefused: nothing was recorded; status.reason says why.
	RedeliveryRefused = "Refused"
)

// RedeliverySpec is what a Redelivery asks.
type RedeliverySpec struct {
	// Delivery is the archive's id of the delivery to handle again
	// (opkit events, the console's delivery page).
	Delivery string `json:"delivery"`
	// By is who asks: the Kubernetes user the client runs as, which the
	// client finds out (a SelfSubjectReview) and writes, as opkit decide
	// does.
	By string `json:"by"`
	// Reason is why, in their words; optional.
	Reason string `json:"reason,omitempty"`
}

// RedeliveryStatus is the engine's answer.
type RedeliveryStatus struct {
	// Outcome is RedeliveryAccepted or RedeliveryRefused; empty until the
	// engine answers.
	Outcome string `json:"outcome,omitempty"`
	// Redelivery is the archive's id of the new delivery record, when
	// accepted.
	Redelivery string `json:"redelivery,omitempty"`
	// Reason says why it was refused.
	Reason string `json:"reason,omitempty"`
	// At is when the engine answered, RFC 3339.
	At string `json:"at,omitempty"`
}

// NewRedelivery is a Redelivery to create in namespace, named after the
// delivery with a suffix the API server chooses.
func NewRedelivery(namespace string, spec RedeliverySpec) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"delivery": spec.Delivery, "by": spec.By, "reason": spec.Reason},
	}}
	u.SetGroupVersionKind(SchemeGroupVersion.WithKind(RedeliveryKind))
	u.SetNamespace(namespace)
	u.SetGenerateName(spec.Delivery + "-")
	return u
}

// ReadRedelivery reads a Redelivery's spec and status.
func ReadRedelivery(u *unstructured.Unstructured) (RedeliverySpec, RedeliveryStatus, error) {
	var spec RedeliverySpec
	var status RedeliveryStatus
	for _, f := range []struct {
		into *string
		path []string
	}{
		{&spec.Delivery, []string{"spec", "delivery"}}, {&spec.By, []string{"spec", "by"}}, {&spec.Reason, []string{"spec", "reason"}},
		{&status.Outcome, []string{"status", "outcome"}}, {&status.Redelivery, []string{"status", "redelivery"}},
		{&status.Reason, []string{"status", "reason"}}, {&status.At, []string{"status", "at"}},
	} {
		v, _, err := unstructured.NestedString(u.Object, f.path...)
		if err != nil {
			return spec, status, fmt.Errorf("the Redelivery %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		*f.into = v
	}
	return spec, status, nil
}

// RedeliveryCRD returns the CRD of redeliveries.opkit.dev, which the
// engine installs when it first runs an operator with a webhook source.
func RedeliveryCRD() *apiextensionsv1.CustomResourceDefinition {
	bounded := func(desc string, n int64) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(n)
		return s
	}
	delivery := bounded("The archive's id of the delivery to handle again (opkit events).", 64)
	delivery.MinLength = ptr.To(int64(1))
	by := bounded("Who asks: the Kubernetes user the client runs as.", 256)
	by.MinLength = ptr.To(int64(1))
	outcome := str("Accepted or Refused; empty until the engine answers.")
	outcome.Enum = []apiextensionsv1.JSON{{Raw: []byte(`"Accepted"`)}, {Raw: []byte(`"Refused"`)}}
	immutable := apiextensionsv1.ValidationRules{{Rule: "self == oldSelf", Message: "a Redelivery's spec cannot change: create another"}}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: RedeliveryResource + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: RedeliveryResource, Singular: "redelivery", Kind: RedeliveryKind, ListKind: RedeliveryKind + "List",
				Categories: []string{"opkit"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:     "object",
					Required: []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type: "object", Required: []string{"delivery", "by"}, XValidations: immutable,
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"delivery": delivery, "by": by,
								"reason": bounded("Why, in the asker's words.", 1024),
							},
						},
						"status": {
							Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"outcome":    outcome,
								"redelivery": bounded("The archive's id of the new delivery record, when accepted.", 64),
								"reason":     bounded("Why it was refused.", 4096),
								"at":         str("When the engine answered, RFC 3339."),
							},
						},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Delivery", Type: "string", JSONPath: ".spec.delivery"},
					{Name: "By", Type: "string", JSONPath: ".spec.by"},
					{Name: "Outcome", Type: "string", JSONPath: ".status.outcome"},
					{Name: "Redelivery", Type: "string", JSONPath: ".status.redelivery"},
					{Name: "Reason", Type: "string", JSONPath: ".status.reason", Priority: 1},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}
