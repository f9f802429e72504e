package crdtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// installDatabase installs the CRD of examples/database and waits until
// it is served.
func installDatabase(t *testing.T, env *clustertest.Env) {
	t.Helper()
	defs, err := definition.CompileFiles("../../../examples/database/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	install(t, env, defs[0])
}

// install installs the CRD of d and waits until it is served.
func install(t *testing.T, env *clustertest.Env, d *definition.Definition) {
	t.Helper()
	crd := d.CRD()
	ctx := t.Context()
	if err := env.Client.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Client.Delete(ctx, crd)
	})
	clustertest.Eventually(t, time.Minute, "the Database CRD is established", func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// setState writes status.state of obj through the status subresource, as
// the engine does.
func setState(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, name string, seq int64) {
	t.Helper()
	ctx := t.Context()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	state := map[string]any{"name": name, "seq": seq, "since": time.Now().UTC().Format(time.RFC3339), "trigger": "guard"}
	if err := unstructured.SetNestedMap(obj.Object, state, "status", "state"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatalf("writing status.state %s: %v", name, err)
	}
}

// applier applies objects of kind with kubectl apply -f, as a person
// would, and returns kubectl's error.
func applier(t *testing.T, env *clustertest.Env, apiVersion, kind string) func(spec string) (string, error) {
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	return func(spec string) (string, error) {
		file := filepath.Join(t.TempDir(), "object.yaml")
		manifest := "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata: {name: obj, namespace: " + env.Namespace + "}\nspec: " + spec + "\n"
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return clustertest.Kubectl(t, kubeconfig, "apply", "-f", file)
	}
}

// box has an optional field that a state refuses to change.
const box = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: box}
spec:
  resource:
    group: crdtest.example.com
    kind: Box
    versions:
    - name: v1
      schema:
        type: object
        properties:
          image: {type: string}
          replicas: {type: integer}
  states:
  - name: Pending
    initial: true
    transitions: [{to: Running, when: "self.spec.replicas > 0"}]
  - name: Running
    refuses: [spec.image]
    transitions: [{to: Pending, when: "self.spec.replicas == 0"}]
`

func TestAddingOrRemovingARefusedFieldIsAChangeAndLeavingItOutIsNot(t *testing.T) {
	env := clustertest.New(t)
	srcs, err := definition.Load("box.yaml", []byte(box))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	install(t, env, d)
	apply := applier(t, env, "crdtest.example.com/v1", "Box")
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("crdtest.example.com/v1")
	obj.SetKind("Box")
	obj.SetNamespace(env.Namespace)
	obj.SetName("obj")
	refused := "spec.image cannot change while the Box is Running: wait until it leaves Running"

	if _, err := apply("{replicas: 1}"); err != nil {
		t.Fatal(err)
	}
	setState(t, env, obj, "Running", 2)
	if _, err := apply(`{replicas: 1, image: "a"}`); err == nil || !strings.Contains(err.Error(), refused) {
		t.Errorf("adding spec.image while Running: %v; want %q", err, refused)
	}
	if _, err := apply("{replicas: 2}"); err != nil {
		t.Errorf("changing another field, spec.image absent before and after: %v", err)
	}
	setState(t, env, obj, "Pending", 3)
	if _, err := apply(`{replicas: 2, image: "a"}`); err != nil {
		t.Fatalf("adding spec.image while Pending: %v", err)
	}
	setState(t, env, obj, "Running", 4)
	if _, err := apply("{replicas: 2}"); err == nil || !strings.Contains(err.Error(), refused) {
		t.Errorf("removing spec.image while Running: %v; want %q", err, refused)
	}
}

func TestAFieldAStateRefusesCannotChangeWhileTheObjectIsInIt(t *testing.T) {
	env := clustertest.New(t)
	installDatabase(t, env)
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	apply := func(version string) (string, error) {
		file := filepath.Join(t.TempDir(), "db.yaml")
		manifest := "apiVersion: demo.example.com/v1\nkind: Database\nmetadata: {name: db, namespace: " + env.Namespace + "}\nspec: {version: \"" + version + "\"}\n"
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return clustertest.Kubectl(t, kubeconfig, "apply", "-f", file)
	}
	if _, err := apply("1.0"); err != nil {
		t.Fatal(err)
	}
	db := &unstructured.Unstructured{}
	db.SetAPIVersion("demo.example.com/v1")
	db.SetKind("Database")
	db.SetNamespace(env.Namespace)
	db.SetName("db")

	// A new object has no state yet: nothing is refused.
	if _, err := apply("1.1"); err != nil {
		t.Fatalf("changing the version of an object without a state: %v", err)
	}
	setState(t, env, db, "Upgrading", 2)
	_, err := apply("1.2")
	want := "spec.version cannot change while the Database is Upgrading: wait until it leaves Upgrading"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("kubectl apply of a new version while Upgrading: %v; want a refusal %q", err, want)
	}
	t.Logf("refused: %v", err)
	// A state that waits for a person says so.
	setState(t, env, db, "NeedsAttention", 3)
	_, err = apply("1.2")
	want = "spec.version cannot change while the Database is NeedsAttention: it waits for a person's decision first (opkit decide)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("kubectl apply of a new version while NeedsAttention: %v; want a refusal %q", err, want)
	}
	setState(t, env, db, "Upgrading", 4)
	// The rest of the object, and its status, still change.
	if _, err := clustertest.Kubectl(t, kubeconfig, "label", "-n", env.Namespace, "database/db", "team=a"); err != nil {
		t.Errorf("labelling the object while Upgrading: %v", err)
	}
	setState(t, env, db, "Ready", 5)
	if _, err := apply("1.2"); err != nil {
		t.Fatalf("kubectl apply of a new version while Ready: %v", err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(db.Object, "spec", "version"); v != "1.2" {
		t.Errorf("spec.version %q after the change while Ready, want 1.2", v)
	}
	out, err := clustertest.Kubectl(t, kubeconfig, "get", "-n", env.Namespace, "databases")
	if err != nil {
		t.Fatal(err)
	}
	if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); len(header) < 2 || header[1] != "STATE" || !strings.Contains(out, "Ready") {
		t.Errorf("kubectl get databases:\n%s\nwant the State column first, showing Ready", out)
	}
}
