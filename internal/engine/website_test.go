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
	t.Parallel()
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
			t.Log(must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "websites.demo.example.com,deploy,rs,pods,cm,events", "-n", env.Namespace, "-o", "wide")))
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

// TestKubectlScaleScalesAWebsiteAndItsDeploymentFollows: `kubectl scale
// website/hello --replicas 3` sets the Website's spec.replicas through the
// scale subresource, the Deployment follows, and the scale subresource
// shows what an autoscaler reads: the replicas there are and the label
// selector of their Pods.
func TestKubectlScaleScalesAWebsiteAndItsDeploymentFollows(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/website/operator.yaml")
	applyFirst(t, env, websiteManifest("hello", `{content: "<h1>hi</h1>"}`))
	defer func() {
		if t.Failed() {
			t.Log(must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "websites.demo.example.com,deploy,rs,pods", "-n", env.Namespace, "-o", "wide")))
		}
	}()
	scale := func() string {
		return must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "websites.demo.example.com", "hello", "-n", env.Namespace,
			"--subresource", "scale", "-o", "jsonpath={.spec.replicas} {.status.replicas} {.status.selector}"))
	}
	eventually(t, 90*time.Second, "the scale subresource shows 1 replica and the selector", func(context.Context) (bool, error) {
		return scale() == "1 1 app.kubernetes.io/instance=hello", nil
	})

	if out := kubectl(t, "scale", "-n", env.Namespace, "websites.demo.example.com/hello", "--replicas", "3"); !strings.Contains(out, "website.demo.example.com/hello scaled") {
		t.Errorf("kubectl scale: %s", out)
	}
	if got := kubectl(t, "get", "-n", env.Namespace, "websites.demo.example.com", "hello", "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("the Website's spec.replicas is %s after kubectl scale, want 3", got)
	}
	deploy := &appsv1.Deployment{}
	eventually(t, 60*time.Second, "the Deployment scaled to 3", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "hello"}, deploy)
		return err == nil && deploy.Spec.Replicas != nil && *deploy.Spec.Replicas == 3, err
	})
	eventually(t, 90*time.Second, "the scale subresource shows 3 replicas", func(context.Context) (bool, error) {
		return scale() == "3 3 app.kubernetes.io/instance=hello", nil
	})
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.InNamespace(env.Namespace), client.MatchingLabels{"app.kubernetes.io/instance": "hello"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) < 3 {
		t.Errorf("the selector app.kubernetes.io/instance=hello finds %d Pods, want the Deployment's 3", len(pods.Items))
	}
}
