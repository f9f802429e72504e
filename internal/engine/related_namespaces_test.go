package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/manifests"
)

// narrowOperator reads the ConfigMap "shared" of the namespace its custom
// resource names, as a related object of the namespace %s alone.
const narrowOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: narrow}
spec:
  resource:
    group: narrow.example.com
    kind: Narrow
    versions:
    - name: v1
      schema: {type: object, properties: {from: {type: string}}}
  related:
  - id: config
    apiVersion: v1
    kind: ConfigMap
    name: shared
    namespace: "${self.spec.from}"
    namespaces: [%s]
  status:
    value: "${related.config.data.value}"
`

// runAsRules runs an engine as a user granted the rules opkit generate
// manifests computes for defs, and nothing else.
func runAsRules(t *testing.T, env *clustertest.Env, defs ...*definition.Definition) *engine.Engine {
	t.Helper()
	rules, _ := manifests.ComputeRules(defs, manifests.Options{Operators: manifests.FromFiles})
	user := "opkit-rules-" + env.Namespace[len(env.Namespace)-6:]
	subjects := []rbacv1.Subject{{Kind: "User", Name: user}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: manifests.PolicyRules(rules.Cluster)}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   subjects,
	}
	for _, obj := range []client.Object{role, binding} {
		create(t, env, obj)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	for ns, rs := range rules.Namespaces {
		create(t, env, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: manifests.PolicyRules(rs)})
		create(t, env, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
			Subjects:   subjects,
		})
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	e, _ := runEngineWith(t, engine.Options{Config: cfg})
	return e
}

// TestRelatedObjectsAreReadOnlyInTheNamespacesTheirReferencesList runs the
// engine with no more rights than the rules computed for the definition:
// ConfigMaps in one namespace. It reads the related ConfigMap there, and
// a reference to one in another namespace is an error of its custom
// resource that names the list, with nothing read, though the ConfigMap
// exists.
func TestRelatedObjectsAreReadOnlyInTheNamespacesTheirReferencesList(t *testing.T) {
	a, b := clustertest.New(t), clustertest.New(t)
	ctx := t.Context()
	d := compileYAML(t, fmt.Sprintf(narrowOperator, a.Namespace))
	e := runAsRules(t, a, d)
	if err := e.Apply(ctx, d); err != nil {
		t.Fatalf("the engine, with the rules computed for the operator: %v", err)
	}
	for _, env := range []*clustertest.Env{a, b} {
		create(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "shared"}, Data: map[string]string{"value": "from " + env.Namespace}})
	}
	narrow := func(name, from string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "narrow.example.com/v1", "kind": "Narrow",
			"metadata": map[string]any{"name": name, "namespace": a.Namespace},
			"spec":     map[string]any{"from": from},
		}}
		create(t, a, obj)
		return obj
	}
	listed, other := narrow("listed", a.Namespace), narrow("other", b.Namespace)
	read := func(obj *unstructured.Unstructured) *unstructured.Unstructured {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		if err := a.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	eventually(t, time.Minute, "the related ConfigMap of the listed namespace in status", func(context.Context) (bool, error) {
		v, _, _ := unstructured.NestedString(read(listed).Object, "status", "value")
		return v == "from "+a.Namespace, nil
	})
	var message string
	eventually(t, time.Minute, "the reference to another namespace refused in a condition", func(context.Context) (bool, error) {
		for _, typ := range []string{"Ready", "Degraded"} {
			if m := conditionMessage(read(other), typ); strings.Contains(m, "not among spec.related[0].namespaces") {
				message = m
				return true, nil
			}
		}
		return false, nil
	})
	if want := fmt.Sprintf("ConfigMap in namespace %s: not among spec.related[0].namespaces (%s)", b.Namespace, a.Namespace); !strings.Contains(message, want) {
		t.Errorf("condition message %q lacks %q", message, want)
	}
	if v, found, _ := unstructured.NestedString(read(other).Object, "status", "value"); found {
		t.Errorf("status.value = %q: the ConfigMap of the namespace not listed was read", v)
	}
}
