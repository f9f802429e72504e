package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestWebsiteAppliesItsConfigMapFirstAndRollsOnChange(t *testing.T) {
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/website/operator.yaml")
	ctx := t.Context()
	site := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Website",
		"metadata": map[string]any{"name": "site", "namespace": env.Namespace},
		"spec":     map[string]any{"content": "<h1>first</h1>"},
	}}
	if err := env.Client.Create(ctx, site); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Log(must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "websites,deploy,rs,pods,cm,events", "-n", env.Namespace, "-o", "wide")))
		}
	}()
	// servedBy waits until the Website is Ready and one Pod of the current
	// ReplicaSet prints content; it returns the content version.
	servedBy := func(content string) string {
		t.Helper()
		var version string
		eventually(t, 90*time.Second, "the Website Ready, serving "+content, func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(site), site); err != nil {
				return false, err
			}
			ready, _, _ := unstructured.NestedInt64(site.Object, "status", "readyReplicas")
			version, _, _ = unstructured.NestedString(site.Object, "status", "contentVersion")
			if conditionStatus(site, "Ready") != "True" || ready != 1 || version == "" {
				return false, nil
			}
			pods := &corev1.PodList{}
			if err := env.Client.List(ctx, pods, client.InNamespace(env.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": "site"}); err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Annotations["demo.example.com/content-version"] == version && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					log, err := clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "logs", "-n", env.Namespace, p.Name)
					return err == nil && strings.Contains(log, content), nil
				}
			}
			return false, nil
		})
		return version
	}
	first := servedBy("<h1>first</h1>")

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "site-content"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion != first {
		t.Errorf("status.contentVersion %s, the ConfigMap's resourceVersion %s", first, cm.ResourceVersion)
	}
	deploy := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "site"}, deploy); err != nil {
		t.Fatal(err)
	}
	if v := deploy.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != "site-content" {
		t.Errorf("the Deployment does not mount the ConfigMap: %+v", v)
	}

	setSpec(t, env, site, "content", "<h1>second</h1>")
	if second := servedBy("<h1>second</h1>"); second == first {
		t.Errorf("the content version did not change: %s", second)
	}
}
