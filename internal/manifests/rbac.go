package manifests

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The engine's RBAC: what it may do, and what readers of the runs API may.

// rbac is the ClusterRole, the Roles, and their bindings.
func (m *Manifests) rbac() []runtime.Object {
	o := m.Options
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: o.Name, Namespace: o.Namespace}}
	name := m.ClusterRoleName()
	objs := []runtime.Object{
		&rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: m.meta(name, false), Rules: PolicyRules(m.Rules.Cluster)},
		&rbacv1.ClusterRoleBinding{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: m.meta(name, false),
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}, Subjects: subjects,
		},
	}
	role := func(namespace, name string, rules []Rule) []runtime.Object {
		om := m.meta(name, true)
		om.Namespace = namespace
		return []runtime.Object{
			&rbacv1.Role{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: om, Rules: PolicyRules(rules)},
			&rbacv1.RoleBinding{
				TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: om,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subjects,
			},
		}
	}
	if len(m.Rules.Engine) > 0 {
		objs = append(objs, role(o.Namespace, o.Name, m.Rules.Engine)...)
	}
	for _, ns := range slices.Sorted(maps.Keys(m.Rules.Namespaces)) {
		objs = append(objs, role(ns, name, m.Rules.Namespaces[ns])...)
	}
	if o.RunsAPI {
		objs = append(objs, m.runsAPIRBAC(subjects)...)
	}
	return objs
}

// runsAPIRBAC is what the runs API needs beyond the engine's rules, as
// every aggregated API server: a ClusterRoleBinding to
// system:auth-delegator (create of SubjectAccessReviews, to ask the API
// server whether each user may read what they ask, and TokenReviews), a
// RoleBinding in kube-system to extension-apiserver-authentication-reader
// (the ConfigMap of the CA of the API server's client certificate, which
// proves that a request came through the aggregator), and the ClusterRole
// RunsViewerRole that grants people the runs.
func (m *Manifests) runsAPIRBAC(subjects []rbacv1.Subject) []runtime.Object {
	name := m.ClusterRoleName()
	reader := m.meta(name+":auth-reader", true)
	reader.Namespace = "kube-system"
	viewer := m.meta(RunsViewerRole, false)
	// The built-in view role reads pods/log and Events in its
	// namespaces: the runs of the objects there are of the same kind.
	// view is aggregated into edit and admin; each is named, as the
	// CRDs' roles do, so that it holds where a cluster changed that.
	for _, role := range []string{"view", "edit", "admin"} {
		viewer.Labels["rbac.authorization.k8s.io/aggregate-to-"+role] = "true"
	}
	return []runtime.Object{
		&rbacv1.ClusterRoleBinding{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: m.meta(name+":auth-delegator", false),
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"}, Subjects: subjects,
		},
		&rbacv1.RoleBinding{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: reader,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"}, Subjects: subjects,
		},
		&rbacv1.ClusterRole{
			TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: viewer,
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{RunsAPIGroup}, Resources: []string{"runs", "runs/log", "deliveries"}, Verbs: []string{"get", "list", "watch"}}},
		},
	}
}

// runsAPI is the runs API's Service, the Secret of its certificates and
// its APIService. The Service selects every replica: each serves reads
// from the archive (a standby too). The Secret is made empty, and the
// APIService without a caBundle, so that applying the manifests again
// never takes the certificates or their CA from the engine, which fills
// both (until it does, the APIService is not Available).
func (m *Manifests) runsAPI() []runtime.Object {
	o := m.Options
	svc := &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"), ObjectMeta: m.meta(RunsAPIService(o.Name), true),
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: m.labels(), Ports: []corev1.ServicePort{{
			Name: "https", Port: 443, TargetPort: intstr.FromString("runs-api"), Protocol: corev1.ProtocolTCP,
		}}},
	}
	secret := &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: m.meta(RunsAPISecret(o.Name), true), Type: corev1.SecretTypeOpaque}
	labels := map[string]any{}
	for k, v := range m.labels() {
		labels[k] = v
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": RunsAPIName, "labels": labels},
		"spec": map[string]any{
			"group": RunsAPIGroup, "version": "v1alpha1",
			// aggregate.API's defaults, which the engine applies.
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": o.Namespace, "name": RunsAPIService(o.Name), "port": int64(443)},
		},
	}}
	return []runtime.Object{svc, secret, apiService}
}
