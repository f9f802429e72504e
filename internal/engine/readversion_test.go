package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// noteOperator stores v2 and reads v1 (spec.resource.readVersion): its
// child records the apiVersion its templates saw.
const noteOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: note}
spec:
  resource:
    group: readversion.example.com
    kind: Note
    readVersion: v1
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
    - name: v2
      storage: true
      schema:
        type: object
        properties:
          text: {type: string}
  children:
  - id: seen
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-seen"}
      data:
        apiVersion: "${self.apiVersion}"
        text: "${self.spec.text}"
`

func TestTheEngineReadsCustomResourcesAtTheReadVersion(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file := filepath.Join(t.TempDir(), "note.yaml")
	if err := os.WriteFile(file, []byte(noteOperator), 0o600); err != nil {
		t.Fatal(err)
	}
	startEngine(t, env, file)
	// Written at v2, the storage version.
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "readversion.example.com/v2", "kind": "Note",
		"metadata": map[string]any{"name": "hello", "namespace": env.Namespace},
		"spec":     map[string]any{"text": "hi"},
	}}
	create(t, env, note)
	cm := &corev1.ConfigMap{}
	eventually(t, 60*time.Second, "the child rendered from the Note read at v1", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "hello-seen"}, cm)
		return err == nil, client.IgnoreNotFound(err)
	})
	if cm.Data["apiVersion"] != "readversion.example.com/v1" || cm.Data["text"] != "hi" {
		t.Errorf("the child saw %v; want the Note at readversion.example.com/v1", cm.Data)
	}
}

func TestAnOperatorThatDeclaresConversionIsRefusedByAnEngineWithoutAWebhookServer(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	// A group of its own: nothing else installs its CRD.
	defs, err := definition.CompileFiles(conversionExample(t, "group: "+convGroup, "group: refused."+convGroup))
	if err != nil {
		t.Fatal(err)
	}
	err = e.Apply(t.Context(), defs[0])
	if err == nil || !strings.Contains(err.Error(), "declare a conversion") || !strings.Contains(err.Error(), "--webhook-addr") {
		t.Fatalf("Apply of a definition with conversion on an engine without a webhook server: %v, want a refusal naming --webhook-addr", err)
	}
	// Nothing was installed: a CRD whose conversion nothing serves would
	// fail every read at another version.
	name := defs[0].CRD().Name
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
		t.Errorf("the CRD %s of the refused definition: %v; want it not installed", name, err)
	}
}
