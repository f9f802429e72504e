package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestRolloutsAnnounceEachNewImageOnce runs examples/rollouts: a Rollout
// follows a Deployment it does not own, its status shows the image, and
// its Python handler announces each new image once, not a scaling.
func TestRolloutsAnnounceEachNewImageOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/rollouts/operator.yaml")
	ctx := t.Context()
	dep := deployment(env.Namespace, "web", "nginx:1.26")
	create(t, env, dep)
	rollout := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Rollout",
		"metadata": map[string]any{"name": "web", "namespace": env.Namespace},
		"spec":     map[string]any{"deployment": "web", "environment": "staging"},
	}}
	create(t, env, rollout)
	image := func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rollout), rollout); err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(rollout.Object, "status", "image")
		return v
	}
	announced := func() []string {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range list.Items {
			if e.Reason == "Announced" && e.Regarding.Name == "web" && e.Regarding.Kind == "Rollout" {
				out = append(out, e.Note)
			}
		}
		return out
	}
	eventually(t, time.Minute, "the Rollout shows the image", func(context.Context) (bool, error) { return image() == "nginx:1.26", nil })

	updateDeployment(t, env, dep.Name, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" })
	eventually(t, time.Minute, "the new image announced", func(context.Context) (bool, error) {
		for _, note := range announced() {
			if note == "web runs nginx:1.27 in staging" {
				return true, nil
			}
		}
		return false, nil
	})
	if image() != "nginx:1.27" {
		t.Errorf("status.image = %q; want nginx:1.27", image())
	}

	updateDeployment(t, env, dep.Name, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(2)) })
	time.Sleep(3 * time.Second)
	if notes := announced(); len(notes) != 1 {
		t.Errorf("announcements %q; want one, for the new image (not for the creation, not for scaling)", strings.Join(notes, " | "))
	}
}
