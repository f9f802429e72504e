package engine

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
)

// finalizerPolicyName names the MutatingAdmissionPolicy and its binding
// that give an operator's custom resources its finalizer at creation:
// opkit-finalizer.<operator>, and .<namespace> for an engine that acts in
// one namespace (Options.Namespace), whose policy is its own, bound to
// that namespace, so that engines of several namespaces neither share
// nor remove each other's.
func (e *Engine) finalizerPolicyName(operator string) string {
	if e.opts.Namespace != "" {
		return "opkit-finalizer." + operator + "." + e.opts.Namespace
	}
	return "opkit-finalizer." + operator
}

// applyFinalizerPolicy makes the API server itself add the operator's
// finalizer to each custom resource it creates, with a
// MutatingAdmissionPolicy (Kubernetes 1.36+): an object created and deleted
// before the engine reconciles it (during an outage, or while the engine
// is away) still gets its delete handlers. Operators without delete
// handlers have no policy.
func (e *Engine) applyFinalizerPolicy(ctx context.Context, d *definition.Definition) error {
	name := e.finalizerPolicyName(d.Operator.Name)
	if !hasDeleteHandler(d) {
		return e.removeFinalizerPolicy(ctx, d.Operator.Name)
	}
	labels := map[string]string{definition.OperatorLabel: d.Operator.Name}
	match := &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule:       admissionv1.Rule{APIGroups: []string{d.GVK.Group}, APIVersions: []string{"*"}, Resources: []string{d.Plural}},
		},
	}}}
	if ns := e.opts.Namespace; ns != "" {
		// The engine's namespace alone (scope.go).
		match.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	policy := &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: match,
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				// finalizers is a set: the entry joins those given.
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: fmt.Sprintf(`Object{metadata: Object.metadata{finalizers: [%q]}}`, FinalizerName(d.Operator.Name))},
			}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	for _, obj := range []client.Object{policy, binding} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
		if err := e.client.Apply(ctx, apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, name, err)
		}
	}
	return nil
}

// removeFinalizerPolicy deletes an operator's finalizer policy, if any.
func (e *Engine) removeFinalizerPolicy(ctx context.Context, operator string) error {
	name := e.finalizerPolicyName(operator)
	return deleteAll(ctx, e.client,
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// deleteAll deletes each of objs in turn, those already gone included,
// and stops at the first other error.
func deleteAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
