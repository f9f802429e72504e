package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

const shelvesV1 = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: shelves}
spec:
  resource:
    group: shelves.example.com
    kind: Shelf
    versions:
    - name: v1
      schema:
        type: object
        properties:
          withLabel: {type: boolean}
          bookName: {type: string, maxLength: 40}
  children:
  - id: label
    includeWhen: ["${self.spec.withLabel}"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-label"}
  - id: book
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.spec.bookName}"}
`

func TestChildrenNoLongerRenderedArePruned(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	e := startEngine(t, env)
	ctx := t.Context()
	if err := e.Apply(ctx, compileYAML(t, shelvesV1)); err != nil {
		t.Fatal(err)
	}
	shelf := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "shelves.example.com/v1", "kind": "Shelf",
		"metadata": map[string]any{"name": "s1", "namespace": env.Namespace},
		"spec":     map[string]any{"withLabel": true, "bookName": "first-book"},
	}}
	if err := env.Client.Create(ctx, shelf); err != nil {
		t.Fatal(err)
	}
	exists := func(name string, want bool) {
		t.Helper()
		what := "ConfigMap " + name + " exists"
		if !want {
			what = "ConfigMap " + name + " is gone"
		}
		eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, &corev1.ConfigMap{})
			return (err == nil) == want, client.IgnoreNotFound(err)
		})
	}
	set := func(field string, value any) {
		t.Helper()
		setSpec(t, env, shelf, field, value)
	}
	exists("s1-label", true)
	exists("first-book", true)
	eventually(t, 30*time.Second, "the inventory lists both children", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(shelf), shelf); err != nil {
			return false, err
		}
		refs, _, _ := unstructured.NestedSlice(shelf.Object, "status", "opkit", "children")
		return len(refs) == 2, nil
	})

	// Renamed by its template: the new one is made, the old one pruned.
	set("bookName", "second-book")
	exists("second-book", true)
	exists("first-book", false)

	// Excluded by includeWhen: pruned, and the Shelf is still Ready.
	set("withLabel", false)
	exists("s1-label", false)
	eventually(t, 30*time.Second, "the Shelf is Ready without its excluded child", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(shelf), shelf); err != nil {
			return false, err
		}
		return conditionStatus(shelf, "Ready") == "True", nil
	})

	// Removed from the definition: pruned; an object the Shelf does not
	// control is never deleted.
	foreign := &corev1.ConfigMap{}
	foreign.Name, foreign.Namespace = "s1-label", env.Namespace
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	v2 := shelvesV1[:strings.Index(shelvesV1, "  - id: book")]
	if err := e.Apply(ctx, compileYAML(t, v2)); err != nil {
		t.Fatal(err)
	}
	exists("second-book", false)

	// A child whose name is taken by an object the Shelf does not control
	// is neither taken over nor pruned: the Shelf says why.
	set("withLabel", true)
	eventually(t, 30*time.Second, "the Shelf is Degraded", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(shelf), shelf); err != nil {
			return false, err
		}
		return conditionStatus(shelf, "Degraded") == "True", nil
	})
	if msg := conditionMessage(shelf, "Degraded"); !strings.Contains(msg, "ConfigMap s1-label exists and is not controlled by this Shelf") {
		t.Errorf("Degraded message: %q", msg)
	}
	// Its Event names the child once.
	eventually(t, 30*time.Second, "a ChildFailed Event on the Shelf", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "ChildFailed" && e.InvolvedObject.Name == shelf.GetName() {
				if !strings.HasPrefix(e.Message, "child label: ConfigMap s1-label exists") {
					t.Errorf("ChildFailed message %q; want it to name the child once", e.Message)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
		t.Fatalf("an object the Shelf does not control was deleted: %v", err)
	}
	if len(foreign.OwnerReferences) != 0 {
		t.Errorf("an object the Shelf does not control was adopted: %v", foreign.OwnerReferences)
	}
}

// conditionStatus returns the status of a condition of an unstructured
// object, or "".
func conditionStatus(obj *unstructured.Unstructured, typ string) string {
	return conditionField(obj, typ, "status")
}

// conditionMessage returns the message of a condition, or "".
func conditionMessage(obj *unstructured.Unstructured, typ string) string {
	return conditionField(obj, typ, "message")
}

func conditionField(obj *unstructured.Unstructured, typ, field string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m[field].(string)
			return s
		}
	}
	return ""
}
