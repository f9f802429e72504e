package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

const watchers = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: watchers}
spec:
  resource:
    group: watch.example.com
    kind: Watcher
    versions:
    - name: v1
      schema:
        type: object
        properties:
          deployment: {type: string}
  related:
  - id: app
    apiVersion: apps/v1
    kind: Deployment
    name: "${self.spec.deployment}"
  - id: notes
    apiVersion: v1
    kind: ConfigMap
    selector: {watcher: "${self.metadata.name}"}
  children:
  - id: seen
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-seen"}
      data: {image: "${related.app.spec.template.spec.containers[0].image}"}
  status:
    image: "${related.app.spec.template.spec.containers[0].image}"
    replicas: "${string(related.app.spec.replicas)}"
    notes: "${related.notes.map(n, n.metadata.name).join(',')}"
`

func deployment(ns, name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// TestRelatedObjectsAreWatchedAndReadButNeverWritten declares a Deployment
// and the ConfigMaps with a label as related objects of a Watcher: the
// Watcher's child and status follow the Deployment's image and the
// labelled ConfigMaps as they change, and opkit writes neither.
func TestRelatedObjectsAreWatchedAndReadButNeverWritten(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	ctx := t.Context()
	bin := clustertest.HandlerBinary(t)
	out := filepath.Join(t.TempDir(), "records.jsonl")
	// A handler for image changes: scaling the Deployment does not run it.
	def := watchers + fmt.Sprintf(`  handlers:
  - name: deployed
    on: [create, update]
    fields: ["related.app.spec.template.spec.containers[0].image"]
    exec:
      command: [%q]
      env: [{name: %s, value: "1"}, {name: OUT, value: %q}]
`, bin, handlerEnv, out)
	if err := e.Apply(ctx, compileYAML(t, def)); err != nil {
		t.Fatal(err)
	}
	// Named after the test's namespace: the engine sees every namespace,
	// and its handler's records name the Watcher.
	name := env.Namespace
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "watch.example.com/v1", "kind": "Watcher",
		"metadata": map[string]any{"name": name, "namespace": env.Namespace},
		"spec":     map[string]any{"deployment": "web"},
	}}
	create(t, env, w)
	status := func(field string) string {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(w.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(got.Object, "status", field)
		return v
	}
	waitStatus := func(field, want, what string) time.Duration {
		t.Helper()
		start := time.Now()
		eventually(t, time.Minute, what, func(context.Context) (bool, error) { return status(field) == want, nil })
		return time.Since(start)
	}

	// Before the Deployment exists what reads it waits; the selector's
	// list is empty.
	waitStatus("notes", "", "the empty list of notes")
	time.Sleep(time.Second)
	if got := status("image"); got != "" {
		t.Errorf("status.image = %q before the Deployment exists; want none", got)
	}

	dep := deployment(env.Namespace, "web", "nginx:1")
	create(t, env, dep)
	waitStatus("image", "nginx:1", "the Deployment's image in status")
	waitConfigMapData(t, env, name+"-seen", "the child rendered from the Deployment", map[string]string{"image": "nginx:1"})
	if got := status("replicas"); got != "1" {
		t.Errorf("status.replicas = %q; want 1 (spec.replicas typed as an integer)", got)
	}
	// The handler ran when the Watcher was created (no Deployment yet),
	// then for the Deployment's image. (Changes made while a run is in
	// flight coalesce into one next run: wait for this one.)
	waitRecords(t, out, name, 2, "the handler's create run and its run for the first image")

	// A change of the related object reconciles the Watcher.
	dep = updateDeployment(t, env, dep.Name, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	took := waitStatus("image", "nginx:2", "the new image in status")
	waitConfigMapData(t, env, name+"-seen", "the child re-rendered", map[string]string{"image": "nginx:2"})
	t.Logf("the image change reached the Watcher's status in %s", took.Round(10*time.Millisecond))
	waitRecords(t, out, name, 3, "the handler's run for the new image")
	runs := records(t, out, name)
	if runs[0].Trigger != "create" || runs[1].Trigger != "update" || runs[2].Trigger != "update" ||
		!strings.Contains(runs[2].Key, "/inputs/") || runs[1].Key == runs[2].Key {
		t.Errorf("runs %+v; want create, then an update per image, each with a key of its inputs", runs)
	}

	// Scaling changes a field the handler does not name: no run.
	dep = updateDeployment(t, env, dep.Name, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(2)) })
	waitStatus("replicas", "2", "the new replica count in status")
	time.Sleep(2 * time.Second)
	if runs := records(t, out, name); len(runs) != 3 {
		t.Errorf("%d runs after scaling; want still 3: %+v", len(runs), runs)
	}

	// The selector's list follows the labelled objects.
	for _, note := range []string{"b-note", "a-note"} {
		create(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: note, Labels: map[string]string{"watcher": name}}})
	}
	create(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "other", Labels: map[string]string{"watcher": "x"}}})
	waitStatus("notes", "a-note,b-note", "the labelled ConfigMaps, by name")

	// opkit never wrote to the Deployment.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	for _, mf := range dep.ManagedFields {
		if mf.Manager == engine.FieldManager {
			t.Errorf("opkit wrote the related Deployment: %+v", mf)
		}
	}
	if dep.Annotations[v1alpha1.AppliedHashAnnotation] != "" || len(dep.OwnerReferences) > 0 {
		t.Errorf("the related Deployment carries opkit's marks: %v %v", dep.Annotations, dep.OwnerReferences)
	}
}
