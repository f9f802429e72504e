package v1alpha1

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// A Rollout (rollouts.opkit.dev, cluster-scoped, named after its
// operator) is where the engine keeps how far a change of an operator's
// definition has reached its custom resources, for an operator with
// spec.rollout: the definition the objects were on (From), the one they
// move to (To), the step, the objects moved, and why it paused. The
// engine writes its status; a person writes spec.request (opkit rollout
// continue, opkit rollout undo), which the engine answers and clears. It
// survives the engine's restarts, and the leader of several replicas
// drives it.
const (
	// RolloutKind is the kind; RolloutResource its plural.
	RolloutKind     = "Rollout"
	RolloutResource = "rollouts"
)

// The phases of a Rollout, in status.phase.
const (
	// RolloutProgressing: steps are being taken.
	RolloutProgressing = "Progressing"
	// RolloutPaused: a moved object is unhealthy; nothing moves until a
	// person continues or undoes it.
	RolloutPaused = "Paused"
	// RolloutComplete: every object is on To.
	RolloutComplete = "Complete"
	// RolloutRolledBack: a person undid it; every object is on From, and
	// To is not rolled out again until the definition changes.
	RolloutRolledBack = "RolledBack"
)

// The requests of a person, in spec.request.
const (
	// RolloutContinue takes the next step of a paused rollout.
	RolloutContinue = "Continue"
	// RolloutUndo moves every object back to the previous definition.
	RolloutUndo = "Undo"
)

// RolloutObject is a Rollout's content.
type RolloutObject struct {
	Spec   RolloutRequest `json:"spec,omitzero"`
	Status RolloutStatus  `json:"status,omitzero"`
}

// RolloutRequest is what a person asks of a rollout.
type RolloutRequest struct {
	// Request is RolloutContinue or RolloutUndo; empty once answered.
	Request string `json:"request,omitempty"`
	// RequestedBy is who asked: the Kubernetes user the client runs as.
	RequestedBy string `json:"requestedBy,omitempty"`
}

// RolloutDefinition is one definition of a rollout.
type RolloutDefinition struct {
	// Hash identifies the definition: a digest of its spec without
	// rollout.
	Hash string `json:"hash"`
	// Operator is the Operator, as JSON, for the engine to run it again
	// after a restart.
	Operator string `json:"operator"`
}

// RolloutStatus is how far a rollout is.
type RolloutStatus struct {
	Phase string `json:"phase,omitempty"`
	// From is the definition the objects were on; To the one they move
	// to. A Complete rollout's objects are on To, a RolledBack one's on
	// From.
	From RolloutDefinition `json:"from,omitzero"`
	To   RolloutDefinition `json:"to,omitzero"`
	// Step is how many of the steps have been taken; Steps how many
	// there are (the implied 100 percent included).
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Moved are the objects on To, as namespace/name (name alone for a
	// cluster-scoped kind), sorted; MovedCount their number.
	Moved      []string `json:"moved,omitempty"`
	MovedCount int      `json:"movedCount"`
	// Accepted are moved objects a person continued the rollout over
	// while they were unhealthy: they pause it no more, until they are
	// healthy again.
	Accepted []string `json:"accepted,omitempty"`
	// Reason says why it paused, or what it did last.
	Reason string `json:"reason,omitempty"`
	// StepStarted is when the step last taken was; HealthySince since
	// when every moved object has been healthy (RFC 3339, empty while one
	// is not).
	StepStarted  string `json:"stepStarted,omitempty"`
	HealthySince string `json:"healthySince,omitempty"`
}

// ReadRollout reads a Rollout object.
func ReadRollout(u *unstructured.Unstructured) (*RolloutObject, error) {
	var r RolloutObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil, fmt.Errorf("the Rollout %s: %w", u.GetName(), err)
	}
	return &r, nil
}

// Unstructured writes r into u's spec and status.
func (r *RolloutObject) Unstructured(u *unstructured.Unstructured) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return err
	}
	delete(u.Object, "spec")
	delete(u.Object, "status")
	for k, v := range m {
		u.Object[k] = v
	}
	return nil
}

// RolloutCRD returns the CRD of rollouts.opkit.dev, which the engine
// installs when it first runs an operator with spec.rollout.
func RolloutCRD() *apiextensionsv1.CustomResourceDefinition {
	definitionSchema := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"hash":     str("A digest of the definition's spec without rollout."),
			"operator": str("The Operator, as JSON."),
		},
	}
	request := str("Continue or Undo: what a person asks (opkit rollout); the engine clears it once answered.")
	request.Enum = enum(RolloutContinue, RolloutUndo)
	phase := str("Progressing, Paused, Complete or RolledBack.")
	phase.Enum = enum(RolloutProgressing, RolloutPaused, RolloutComplete, RolloutRolledBack)
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: RolloutResource + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: RolloutResource, Singular: "rollout", Kind: RolloutKind, ListKind: RolloutKind + "List",
				Categories: []string{"opkit"},
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"request":     request,
								"requestedBy": {Type: "string", MaxLength: ptr.To(int64(256))},
							},
						},
						"status": {
							Type: "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"phase":        phase,
								"from":         definitionSchema,
								"to":           definitionSchema,
								"step":         {Type: "integer"},
								"steps":        {Type: "integer"},
								"moved":        {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(str(""))}},
								"movedCount":   {Type: "integer"},
								"accepted":     {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(str(""))}},
								"reason":       str("Why it paused, or what it did last."),
								"stepStarted":  str("When the last step was taken, RFC 3339."),
								"healthySince": str("Since when every moved object has been healthy, RFC 3339."),
							},
						},
					},
				}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
					{Name: "Step", Type: "integer", JSONPath: ".status.step"},
					{Name: "Steps", Type: "integer", JSONPath: ".status.steps"},
					{Name: "Moved", Type: "integer", JSONPath: ".status.movedCount"},
					{Name: "Reason", Type: "string", JSONPath: ".status.reason"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}
