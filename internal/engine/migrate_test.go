package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// slipsOperator is an operator of Slips, each with a ConfigMap, whose
// versions are given as YAML list items, each with the same schema.
func slipsOperator(versions ...string) string {
	s := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: slips}
spec:
  resource:
    group: slips.example.com
    kind: Slip
    versions:
`
	for _, v := range versions {
		s += "    - " + strings.TrimSuffix(v, "}") + ", schema: {type: object, properties: {a: {type: string}}}}\n"
	}
	return s + `  children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-slip"}
      data: {a: "${self.spec.a}"}
`
}

// TestMigrateStorageRunsBesideReconciles: an engine with MigrateStorage
// applies Slips with v2 stored while 20 are stored at v1; its migration,
// at one request a second, runs in the background: a Slip created
// meanwhile gets its ConfigMap while storedVersions is still [v1 v2];
// then storedVersions becomes [v2], and the engine's notices say so.
func TestMigrateStorageRunsBesideReconciles(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	slip := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "slips.example.com/v1", "kind": "Slip",
			"metadata": map[string]any{"name": name, "namespace": env.Namespace}, "spec": map[string]any{"a": name},
		}}
	}
	storedVersions := func(ctx context.Context) ([]string, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: "slips.slips.example.com"}, crd)
		return crd.Status.StoredVersions, err
	}

	_, stop := runEngine(t, env, write("v1.yaml", slipsOperator("{name: v1}")))
	const n = 20
	for i := range n {
		create(t, env, slip(fmt.Sprintf("slip-%02d", i)))
	}
	// Stopped once they are reconciled: with controller-runtime v0.24 an
	// engine stopped amid its work could meet the queue's shutdown
	// deadlock (see stopGrace), which cost the grace; the wait keeps the
	// test independent of how a stop amid work goes.
	eventually(t, time.Minute, "every Slip's ConfigMap", func(ctx context.Context) (bool, error) {
		list := &corev1.ConfigMapList{}
		if err := env.Client.List(ctx, list, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		made := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, "slip-") {
				made++
			}
		}
		return made == n, nil
	})
	stop()

	var mu sync.Mutex
	var notices []string
	said := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(notices, "\n")
	}
	runEngineWith(t, engine.Options{Config: env.Config, MigrateStorage: true, MigrateQPS: 1, Notice: func(line string) {
		mu.Lock()
		notices = append(notices, line)
		mu.Unlock()
	}}, write("v2.yaml", slipsOperator("{name: v1}", "{name: v2, storage: true}")))
	create(t, env, slip("fresh"))
	eventually(t, 15*time.Second, "the fresh Slip's ConfigMap", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "fresh-slip"}, &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})
	if got, err := storedVersions(t.Context()); err != nil || !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v (%v) once the fresh Slip was reconciled; want [v1 v2]: the migration, at one a second, cannot be done", got, err)
	}
	if !strings.Contains(said(), "operator slips: storage migration of CRD slips.slips.example.com to v2 (storedVersions [v1 v2]), in the background") {
		t.Errorf("the engine did not say it migrates:\n%s", said())
	}
	eventually(t, 2*time.Minute, "storedVersions [v2]", func(ctx context.Context) (bool, error) {
		got, err := storedVersions(ctx)
		return slices.Equal(got, []string{"v2"}), err
	})
	eventually(t, 10*time.Second, "the summary", func(context.Context) (bool, error) {
		return strings.Contains(said(), "storedVersions: [v1 v2] -> [v2]"), nil
	})
	// Slips the engine wrote since v2 is stored (their status), and the
	// fresh one if it was listed, are already current.
	if s := said(); !strings.Contains(s, "slips.slips.example.com: ") || !strings.Contains(s, " already current, 0 gone, 0 failed") {
		t.Errorf("the engine's summary:\n%s", s)
	}
}
