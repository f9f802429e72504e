package v1alpha1_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// installOperatorCRD installs the Operator CRD as the engine's
// WatchOperators does (server-side apply, forcing opkit's ownership), and
// waits until kubectl can apply Operators. Tests of the package share it:
// a second install changes nothing.
func installOperatorCRD(t *testing.T, c client.Client) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v1alpha1.CustomResourceDefinition())
	if err != nil {
		t.Fatal(err)
	}
	apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	if err := c.Apply(t.Context(), apply, client.FieldOwner("opkit"), client.ForceOwnership); err != nil {
		t.Fatalf("installing the Operator CRD: %v", err)
	}
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	clustertest.Eventually(t, 60*time.Second, "the Operator CRD established, and served to kubectl", func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: "operators.opkit.dev"}, &crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				_, err := clustertest.Kubectl(t, kubeconfig, "get", "operators")
				return err == nil, nil
			}
		}
		return false, nil
	})
}

// operatorFiles are the files of the project that users copy or apply:
// every YAML file under examples/, docs/, testdata/scenarios/ and
// pkg/opkittest/testdata/ whose documents are all Operators.
func operatorFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"../../examples", "../../docs", "../../testdata/scenarios", "../../pkg/opkittest/testdata"} {
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for doc := range strings.SplitSeq(string(data), "\n---\n") {
				var head struct{ APIVersion, Kind string }
				if err := yaml.Unmarshal([]byte(doc), &head); err != nil || head.APIVersion != v1alpha1.SchemeGroupVersion.String() || head.Kind != v1alpha1.Kind {
					return nil
				}
			}
			files = append(files, path)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func TestKubectlAppliesEveryOperatorOfTheExamplesAndDocs(t *testing.T) {
	env := clustertest.New(t)
	installOperatorCRD(t, env.Client)
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	files := operatorFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d Operator files, want every example's: %v", len(files), files)
	}
	for _, f := range files {
		// One at a time: two examples may name the same Operator.
		if out, err := clustertest.Kubectl(t, kubeconfig, "apply", "-f", f); err != nil {
			t.Errorf("kubectl apply -f %s: %v\n%s", f, err, out)
			continue
		}
		if out, err := clustertest.Kubectl(t, kubeconfig, "delete", "-f", f, "--wait"); err != nil {
			t.Fatalf("kubectl delete -f %s: %v\n%s", f, err, out)
		}
	}
}

func TestKubectlRefusesABareOnSayingToQuoteIt(t *testing.T) {
	env := clustertest.New(t)
	installOperatorCRD(t, env.Client)
	kubeconfig := clustertest.Cluster(t).KubeconfigPath()
	apply := func(handler string) (string, error) {
		file := filepath.Join(t.TempDir(), "operator.yaml")
		manifest := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: tick}\nspec:\n  handlers:\n  - name: tick\n" + handler +
			"    schedule: {every: 1m}\n    exec: {command: [/bin/true]}\n"
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return clustertest.Kubectl(t, kubeconfig, "apply", "-f", file)
	}

	_, err := apply("    on: [schedule]\n")
	want := `spec.handlers[0].true: Forbidden: write "on": quoted: YAML 1.1 tools (kubectl) read a bare on as true`
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "unknown field") {
		t.Errorf("kubectl apply of a bare on: %v; want a refusal saying %q", err, want)
	}
	// A handler with no on at all is refused as before, naming on.
	if _, err := apply(""); err == nil || !strings.Contains(err.Error(), "spec.handlers[0].on: Required value") {
		t.Errorf("kubectl apply of a handler without on: %v; want on required", err)
	}
	if out, err := apply(`    "on": [schedule]` + "\n"); err != nil {
		t.Errorf("kubectl apply of a quoted on: %v\n%s", err, out)
	}
}
