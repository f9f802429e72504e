// The Printer tested in Go with pkg/opkittest: the same test as the
// scenario printer.test.yaml, side by side in docs/testing.md.
package printer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

func TestMain(m *testing.M) { opkittest.Main(m) }

func TestAPrinterPrintsItsTextPrintsANewOneAndGoesWithItsPod(t *testing.T) {
	env := opkittest.New(t)
	env.RunOperators(t, "operator.yaml")
	ctx := t.Context()

	printer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1",
		"kind":       "Printer",
		"metadata":   map[string]any{"name": "hello", "namespace": env.Namespace},
		"spec":       map[string]any{"text": "hello, world"},
	}}
	if err := env.Client.Create(ctx, printer); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	podKey := client.ObjectKey{Namespace: env.Namespace, Name: "hello-print"}
	prints := func(text string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, podKey, pod)
			return err == nil && slices.Equal(pod.Spec.Containers[0].Command, []string{"echo", text}), client.IgnoreNotFound(err)
		}
	}
	opkittest.Eventually(t, time.Minute, "the pod prints the text", prints("hello, world"))
	opkittest.Eventually(t, time.Minute, "the Printer is Ready, its pod Succeeded", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(printer), printer); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(printer.Object, "status", "phase")
		conds, _, _ := unstructured.NestedSlice(printer.Object, "status", "conditions")
		ready := slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Ready" && m["status"] == "True"
		})
		return phase == "Succeeded" && ready, nil
	})

	// A new text makes a new pod.
	if err := unstructured.SetNestedField(printer.Object, "hello again", "spec", "text"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, printer); err != nil {
		t.Fatal(err)
	}
	opkittest.Eventually(t, time.Minute, "the pod prints the new text", prints("hello again"))

	// The pod goes with its Printer, by garbage collection (a new CRD is
	// learnt by the collector within 30s).
	if err := env.Client.Delete(ctx, printer); err != nil {
		t.Fatal(err)
	}
	opkittest.Eventually(t, 90*time.Second, "the pod is gone", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, podKey, pod)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
