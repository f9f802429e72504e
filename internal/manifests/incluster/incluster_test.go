// Package incluster_test applies what opkit generate manifests gives to
// the local control plane and runs the engine as the Pod it describes,
// on the dev node, under its own ServiceAccount: the examples must work
// with the rules generated for them, and requests they do not need must
// be denied.
//
// The dev node runs a Pod's container as a process of the host, so four
// things of the generated Deployment are adapted to it, and only these:
//   - a toleration of the dev node's taint (opkit.dev/dev-node);
//   - the command: images are ignored, so the container runs this test
//     binary, which is opkit's CLI when $OPKIT_TEST_AS_OPKIT is set (see
//     TestMain);
//   - the credentials: the dev node mounts the ServiceAccount's token
//     under the Pod's root ($OPKIT_POD_ROOT/var/run/secrets/...), not at
//     /var/run/secrets/kubernetes.io/serviceaccount, where client-go's
//     in-cluster configuration reads it, and the API server is not at the
//     kubernetes Service's address. So the Pod gets $KUBECONFIG, a
//     kubeconfig from a ConfigMap whose user is that same token file (a
//     path relative to the kubeconfig): the engine authenticates as its
//     ServiceAccount, with the token the node projected for its Pod;
//   - paths of the host: the SQLite archive is put on the archive volume
//     as the dev node mounts it, the working directory is the handlers
//     example's (its exec handlers are ./greet.py...), and HOME is the
//     test's own (the Go handler's build cache).
//
// Everything else — ServiceAccount, ClusterRole, Roles, bindings, the
// Operator CRD and the Operators — is applied as generated.
package incluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cli"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/manifests"
)

// asOpkit makes this test binary opkit's CLI: the engine's Pod runs it.
const asOpkit = "OPKIT_TEST_AS_OPKIT"

func TestMain(m *testing.M) {
	if os.Getenv(asOpkit) == "1" {
		clustertest.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	clustertest.Main(m)
}

const examples = "../../../examples"

func compile(t *testing.T, files ...string) []*definition.Definition {
	t.Helper()
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(examples, f)
	}
	defs, err := definition.CompileFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// freePorts returns n ports free on the host now: the engine's Pod binds
// the host's, as every process of the dev node does.
func freePorts(t *testing.T, n int) []int32 {
	t.Helper()
	var out []int32
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, int32(ln.Addr().(*net.TCPAddr).Port))
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return out
}

// engineKubeconfig is a kubeconfig for the plane whose user is the token
// file the dev node projects into the Pod, two directories above the
// kubeconfig's mount (/etc/opkit-kubeconfig).
func engineKubeconfig(t *testing.T, env *clustertest.Env) string {
	t.Helper()
	ca := env.Config.CAData
	if len(ca) == 0 {
		var err error
		if ca, err = os.ReadFile(env.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["plane"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: ca, TLSServerName: env.Config.ServerName}
	kc.AuthInfos["engine"] = &clientcmdapi.AuthInfo{TokenFile: "../../var/run/secrets/kubernetes.io/serviceaccount/token"}
	kc.Contexts["engine"] = &clientcmdapi.Context{Cluster: "plane", AuthInfo: "engine", Namespace: env.Namespace}
	kc.CurrentContext = "engine"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// onDevNode adapts the generated Deployment to the dev node (see the
// package doc), and only that.
func onDevNode(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	workDir, err := filepath.Abs(filepath.Join(examples, "handlers"))
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	spec["tolerations"] = []any{map[string]any{"key": "opkit.dev/dev-node", "operator": "Exists", "effect": "NoSchedule"}}
	containers := spec["containers"].([]any)
	c := containers[0].(map[string]any)
	c["command"] = []any{self}
	c["workingDir"] = workDir
	var env []any
	for _, e := range c["env"].([]any) {
		if e.(map[string]any)["name"] == "OPKIT_ARCHIVE" {
			e = map[string]any{"name": "OPKIT_ARCHIVE", "value": "$(OPKIT_MOUNT_ARCHIVE)/runs.db"}
		}
		env = append(env, e)
	}
	c["env"] = append(env,
		map[string]any{"name": asOpkit, "value": "1"},
		map[string]any{"name": "KUBECONFIG", "value": "$(OPKIT_MOUNT_KUBECONFIG)/kubeconfig"},
		map[string]any{"name": "HOME", "value": home},
	)
	c["volumeMounts"] = append(c["volumeMounts"].([]any), map[string]any{"name": "kubeconfig", "mountPath": "/etc/opkit-kubeconfig", "readOnly": true})
	spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": "kubeconfig", "configMap": map[string]any{"name": "opkit-kubeconfig"}})
	if err := unstructured.SetNestedMap(u.Object, spec, "spec", "template", "spec"); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, env *clustertest.Env, obj client.Object) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, "create "+obj.GetObjectKind().GroupVersionKind().Kind+" "+obj.GetName(), func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) && obj.GetNamespace() == "" {
			return true, nil // cluster-wide, from an earlier test of this binary
		}
		return err == nil, nil
	})
}

// review asks the API server whether the engine's ServiceAccount may make
// a request.
func review(t *testing.T, cs kubernetes.Interface, namespace string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + namespace + ":opkit",
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

func attrs(verb, group, resource, namespace, name string) authorizationv1.ResourceAttributes {
	resource, sub, _ := strings.Cut(resource, "/")
	return authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: namespace, Name: name}
}

func TestGeneratedManifestsRunThePrinterAndTheGreetingsAsALeaderUnderTheEnginesOwnServiceAccount(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	m, err := manifests.New(compile(t, "printer/operator.yaml", "handlers/operator.yaml"), manifests.Options{
		Namespace: env.Namespace, MetricsPort: ports[0], HooksPort: ports[1],
		// With its Lease, in a Role of its namespace: one replica suffices.
		LeaderElection: true,
		// With the hooks Service and the right to write its EndpointSlice.
		Hooks: true,
		// The handlers example's exec handlers name no image: the dev
		// node runs them on the host, as --allow-host-exec says.
		AllowHostExec: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := m.Objects()
	if err != nil {
		t.Fatal(err)
	}
	create(t, env, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "opkit-kubeconfig", Namespace: env.Namespace},
		Data:       map[string]string{"kubeconfig": engineKubeconfig(t, env)},
	})
	t.Cleanup(func() {
		// The engine stops before its namespace goes; what is cluster-wide
		// goes with the test.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, u := range slices.Backward(objs) {
			if u.GetKind() == "CustomResourceDefinition" || (u.GetNamespace() != "" && u.GetKind() != "Deployment") {
				continue
			}
			if err := env.Client.Delete(ctx, u); client.IgnoreNotFound(err) != nil && !meta.IsNoMatchError(err) {
				t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		_ = waitNoPods(ctx, cs, env.Namespace, "app.kubernetes.io/name=opkit")
	})
	refusedBefore := forbidden(t, cs)
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			onDevNode(t, u)
		case v1alpha1.Kind:
			waitEstablished(t, env, "operators.opkit.dev")
		}
		create(t, env, u)
	}

	var pod corev1.Pod
	clustertest.Eventually(t, 2*time.Minute, "the engine's Pod runs", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit"})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		pod = pods.Items[0]
		return pod.Status.Phase == corev1.PodRunning, nil
	})
	if pod.Spec.ServiceAccountName != "opkit" {
		t.Fatalf("the engine's Pod runs as ServiceAccount %q", pod.Spec.ServiceAccountName)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the engine's log:\n%s", engineLog(t, cs, pod))
		}
	}()
	// (Its identity is its host's name, which on the dev node is not the
	// Pod's.)
	clustertest.Eventually(t, time.Minute, "the engine holds the Lease", func(ctx context.Context) (bool, error) {
		lease, err := cs.CoordinationV1().Leases(env.Namespace).Get(ctx, manifests.LeaseName, metav1.GetOptions{})
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	for _, name := range []string{"printer", "greetings"} {
		clustertest.Eventually(t, 2*time.Minute, "Operator "+name+" is Ready", func(ctx context.Context) (bool, error) {
			var op v1alpha1.Operator
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &op); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady)
			if c != nil && c.Status != metav1.ConditionTrue && c.Reason != "" {
				t.Logf("Operator %s: %s: %s", name, c.Reason, c.Message)
			}
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
	}

	// The Printer: a child Pod, applied by the engine.
	printer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Printer",
		"metadata": map[string]any{"name": "hello", "namespace": env.Namespace},
		"spec":     map[string]any{"text": "hello from the engine's Pod"},
	}}
	create(t, env, printer)
	clustertest.Eventually(t, time.Minute, "the Printer's Pod is made and prints", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(printer), printer); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(printer.Object, "status", "phase")
		return phase == string(corev1.PodSucceeded), nil
	})
	if _, err := cs.CoreV1().Pods(env.Namespace).Get(ctx, "hello-print", metav1.GetOptions{}); err != nil {
		t.Errorf("the Printer's child Pod: %v", err)
	}

	// The Greetings: exec handlers, their status patch, Events, the
	// finalizer and the delete handler.
	greeting := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "world", "namespace": env.Namespace},
		"spec":     map[string]any{"name": "World"},
	}}
	create(t, env, greeting)
	clustertest.Eventually(t, time.Minute, "status.greeting is set by greet.py", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(greeting), greeting); err != nil {
			return false, err
		}
		got, _, _ := unstructured.NestedString(greeting.Object, "status", "greeting")
		return got == "Hello, World!" && slices.Contains(greeting.GetFinalizers(), "opkit.dev/greetings"), nil
	})
	clustertest.Eventually(t, 30*time.Second, "the Greeted and Audited Events", func(ctx context.Context) (bool, error) {
		events, err := cs.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		return reasons["Greeted"] && reasons["Audited"], nil
	})
	if err := env.Client.Delete(ctx, greeting); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 3*time.Minute, "the Greeting is gone after its Go delete handler", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(greeting), greeting)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// What the definitions need is allowed; what they do not, denied.
	ns := env.Namespace
	for _, a := range []authorizationv1.ResourceAttributes{
		attrs("list", "demo.example.com", "printers", "", ""),
		attrs("patch", "demo.example.com", "greetings", ns, "world"),
		attrs("patch", "demo.example.com", "printers/status", ns, "hello"),
		attrs("create", "", "pods", ns, ""),
		attrs("delete", "", "pods", "other", "hello-print"),
		attrs("patch", "apiextensions.k8s.io", "customresourcedefinitions", "", "printers.demo.example.com"),
		attrs("create", "events.k8s.io", "events", ns, ""),
		attrs("update", "coordination.k8s.io", "leases", ns, manifests.LeaseName),
		attrs("patch", "discovery.k8s.io", "endpointslices", ns, manifests.HooksName),
	} {
		if !review(t, cs, ns, a) {
			t.Errorf("the engine may not %s %s/%s %s in %q, which it needs", a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace)
		}
	}
	for _, a := range []authorizationv1.ResourceAttributes{
		attrs("list", "", "secrets", "", ""),
		attrs("get", "", "secrets", ns, "opkit-kubeconfig"),
		attrs("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "printers.demo.example.com"),
		attrs("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "websites.demo.example.com"),
		attrs("patch", "apiextensions.k8s.io", "customresourcedefinitions", "", "websites.demo.example.com"),
		attrs("create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""),
		attrs("update", "demo.example.com", "printers", ns, "hello"),
		attrs("create", "batch", "jobs", ns, ""),
		attrs("create", "", "serviceaccounts/token", ns, "opkit"),
		attrs("create", "rbac.authorization.k8s.io", "clusterroles", "", ""),
		attrs("update", "coordination.k8s.io", "leases", ns, "another-lease"),
		attrs("patch", "discovery.k8s.io", "endpointslices", ns, "another-service"),
		attrs("create", "discovery.k8s.io", "endpointslices", ns, ""),
		attrs("get", "coordination.k8s.io", "leases", "kube-system", "opkit-engine"),
		attrs("create", "", "pods/exec", ns, "hello-print"),
	} {
		if review(t, cs, ns, a) {
			t.Errorf("the engine may %s %s/%s %s in %q, which it does not need", a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace)
		}
	}
	// And the engine was refused nothing it tried: client-go logs a
	// refused list, watch or Event; a refused write fails a reconcile.
	if log := engineLog(t, cs, pod); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the engine was refused a request:\n%s", log)
	}
	// The engine does not log a refused write (its controllers log no
	// reconcile error): the API server's own counters say what it refused
	// since the engine started, to whom it was the only client to refuse.
	for series, n := range forbidden(t, cs) {
		if d := n - refusedBefore[series]; d > 0 {
			t.Errorf("the API server refused %v requests %s", d, series)
		}
	}
}

// forbidden returns the API server's count of requests it refused with
// 403, by series (verb, resource...).
func forbidden(t *testing.T, cs kubernetes.Interface) map[string]float64 {
	t.Helper()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for series, v := range clustertest.Samples(string(body)) {
		if strings.HasPrefix(series, "apiserver_request_total{") && strings.Contains(series, `code="403"`) {
			out[series] = v
		}
	}
	return out
}

func waitEstablished(t *testing.T, env *clustertest.Env, name string) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, "CRD "+name+" is established", func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func engineLog(t *testing.T, cs kubernetes.Interface, pod corev1.Pod) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(data)
}

func waitNoPods(ctx context.Context, cs kubernetes.Interface, namespace, selector string) error {
	for {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
