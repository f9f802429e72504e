package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

func TestACRDDeletedUnderARunningOperatorIsReinstalled(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "records.jsonl")
	bin := clustertest.HandlerBinary(t)
	// A kind of its own: the CRD is cluster-wide, and this test deletes it.
	def := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: vaults}
spec:
  resource:
    group: crdguard.example.com
    kind: Vault
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  children:
  - id: data
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-data"}
      data: {text: "${self.spec.text}"}
  handlers:
  - name: goodbye
    on: [delete]
    exec:
      command: [%q]
      env: [{name: %s, value: "1"}, {name: OUT, value: %q}]
`, bin, handlerEnv, out)
	file := filepath.Join(dir, "vaults.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: newArchive(t)}, file)
	cleanUpAll(t, env, "crdguard.example.com/v1", "Vault")

	vault := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crdguard.example.com/v1", "kind": "Vault",
			"metadata": map[string]any{"name": name, "namespace": env.Namespace},
			"spec":     map[string]any{"text": name},
		}}
	}
	create(t, env, vault("one"))
	waitConfigMapData(t, env, "one-data", "the first Vault's ConfigMap", map[string]string{"text": "one"})

	const crdName = "vaults.crdguard.example.com"
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: crdName}, crd); err != nil {
		t.Fatal(err)
	}
	oldUID := crd.UID
	if err := env.Client.Delete(t.Context(), crd); err != nil {
		t.Fatal(err)
	}

	// The custom resources go first, through their delete handlers.
	recs := waitRecords(t, out, "one", 1, "the delete handler of the Vault deleted with its CRD")
	if recs[0].Handler != "goodbye" || recs[0].Trigger != "delete" {
		t.Errorf("record %+v; want the goodbye handler on delete", recs[0])
	}
	// Then the engine installs the CRD again and runs the operator.
	eventually(t, 90*time.Second, "the CRD is installed again and established", func(ctx context.Context) (bool, error) {
		crd = &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return crd.UID != oldUID, nil
			}
		}
		return false, nil
	})
	eventually(t, 90*time.Second, "a Vault can be created again", func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, vault("two"))
		return err == nil, nil //nolint:nilerr // the API may not serve the kind yet
	})
	waitConfigMapData(t, env, "two-data", "the new Vault's ConfigMap, made by the restarted controller", map[string]string{"text": "two"})

	// The user is told, on the CRD itself.
	eventually(t, 30*time.Second, "an Event on the CRD says it was re-installed", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == crdName && e.InvolvedObject.UID == crd.UID && e.Reason == "Reinstalled" {
				return true, nil
			}
		}
		return false, nil
	})
}
