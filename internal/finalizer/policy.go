package finalizer

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/run"
)

// Policy gives an operator's custom resources its finalizer at their
// creation, by the API server itself: a MutatingAdmissionPolicy and its
// binding per operator (Kubernetes 1.36+), so that an object created and
// deleted before an engine reconciles it still gets its delete handlers.
type Policy struct {
	// Enabled: the engine runs with --admission-finalizers; without, a
	// policy an earlier engine left is removed (Sync).
	Enabled bool
	// Namespace is the engine's one namespace ("" for all): its policy
	// is its own, bound to it.
	Namespace    string
	Client       client.Client
	FieldManager string
	Log          logr.Logger
}

// Name names the MutatingAdmissionPolicy and its binding
// that give an operator's custom resources its finalizer at creation:
// opkit-finalizer.<operator>, and .<namespace> for an engine that acts in
// one namespace (Policy.Namespace), whose policy is its own, bound to
// that namespace, so that engines of several namespaces neither share
// nor remove each other's.
func (p *Policy) Name(operator string) string {
	if p.Namespace != "" {
		return "opkit-finalizer." + operator + "." + p.Namespace
	}
	return "opkit-finalizer." + operator
}

// Sync gives an operator the finalizer policy it is to
// have: with Enabled, apply's; without, none.
// A policy an earlier engine with AdmissionFinalizers left would make
// every deletion wait for an engine that no longer asks for it: it is
// removed, and the log says so in one line. An engine that may not delete
// policies (its RBAC made without --admission-finalizers), or an API
// server without them, cannot have one to remove: nothing is said.
func (p *Policy) Sync(ctx context.Context, d *definition.Definition) error {
	if p.Enabled {
		return p.apply(ctx, d)
	}
	_, err := p.Remove(ctx, d.Operator.Name, "this engine runs without --admission-finalizers")
	if err != nil && !apierrors.IsForbidden(err) && !meta.IsNoMatchError(err) {
		p.Log.Error(err, "removing the admission policy an engine with --admission-finalizers left; delete it by hand", "operator", d.Operator.Name, "policy", p.Name(d.Operator.Name))
	}
	return nil
}

// apply makes the API server itself add the operator's
// finalizer to each custom resource it creates, with a
// MutatingAdmissionPolicy (Kubernetes 1.36+): an object created and deleted
// before the engine reconciles it (during an outage, or while the engine
// is away) still gets its delete handlers. Operators without delete
// handlers have no policy. The policy of an Operator read from the
// cluster is owned by it: deleting the Operator deletes its policy, even
// while no engine runs.
func (p *Policy) apply(ctx context.Context, d *definition.Definition) error {
	name := p.Name(d.Operator.Name)
	if !run.HasDeleteHandler(d) {
		_, err := p.Remove(ctx, d.Operator.Name, "the operator has no delete handler")
		return err
	}
	labels := map[string]string{definition.OperatorLabel: d.Operator.Name}
	var owners []metav1.OwnerReference
	if op := d.Operator; op.UID != "" {
		owners = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Name: op.Name, UID: op.UID}}
	}
	match := &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule:       admissionv1.Rule{APIGroups: []string{d.GVK.Group}, APIVersions: []string{"*"}, Resources: []string{d.Plural}},
		},
	}}}
	if ns := p.Namespace; ns != "" {
		// The engine's namespace alone.
		match.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	policy := &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: match,
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				// finalizers is a set: the entry joins those given.
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: fmt.Sprintf(`Object{metadata: Object.metadata{finalizers: [%q]}}`, Name(d.Operator.Name))},
			}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	for _, obj := range []client.Object{policy, binding} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
		if err := p.Client.Apply(ctx, apply, client.FieldOwner(p.FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, name, err)
		}
	}
	return nil
}

// Remove deletes an operator's finalizer policy and its
// binding, if any, and reports whether there was one; the log says so in
// one line, with why.
func (p *Policy) Remove(ctx context.Context, operator, why string) (bool, error) {
	name := p.Name(operator)
	removed := false
	for _, obj := range []client.Object{
		&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
	} {
		switch err := p.Client.Delete(ctx, obj); {
		case err == nil:
			removed = true
		case !apierrors.IsNotFound(err):
			return removed, err
		}
	}
	if removed {
		p.Log.Info("removed the admission policy "+name+" that gave new objects the operator's finalizer: "+why+"; deletions no longer wait for an engine", "operator", operator)
	}
	return removed, nil
}
