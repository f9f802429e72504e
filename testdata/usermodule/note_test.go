// Package usermodule_test shows, and proves in opkit's `make test`, that an
// operator's own module can test it with pkg/opkittest alone.
package usermodule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

func TestMain(m *testing.M) { opkittest.Main(m) }

func TestNoteMakesItsConfigMapAndAnnouncesIt(t *testing.T) {
	env := opkittest.New(t)
	eng := env.RunOperators(t, "operator.yaml")
	ctx := t.Context()

	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "usermodule.example.com/v1",
		"kind":       "Note",
		"metadata":   map[string]any{"name": "hello", "namespace": env.Namespace},
		"spec":       map[string]any{"text": "hello, world"},
	}}
	if err := env.Client.Create(ctx, note); err != nil {
		t.Fatal(err)
	}

	cm := &corev1.ConfigMap{}
	opkittest.Eventually(t, time.Minute, "the Note's ConfigMap holds its text", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "hello-note"}, cm)
		return err == nil && cm.Data["text"] == "hello, world", client.IgnoreNotFound(err)
	})

	run := eng.WaitRun(t, time.Minute, opkittest.Query{
		Namespace: env.Namespace, Name: "hello", Handler: "announce", Outcome: opkittest.Succeeded,
	})
	if run.Trigger != "create" {
		t.Errorf("announce ran on %q, want create", run.Trigger)
	}
	log, err := eng.Log(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "a new note") {
		t.Errorf("announce's log %q does not hold its output", log)
	}
}
