package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// declares reports whether the installed CRD name declares spec.<field>
// in its first version.
func declares(t *testing.T, env *clustertest.Env, name, field string) bool {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatal(err)
	}
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[field]
	return ok
}

func TestABreakingChangeToAnInstalledCRDIsRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	v1 := strings.NewReplacer("name: notes}", "name: refusals}", "group: notes.example.com", "group: refusals.example.com",
		"          a: {type: string}\n", "          a: {type: string}\n          size: {type: integer}\n").Replace(notesV1)
	v2 := strings.Replace(v1, "          size: {type: integer}\n", "", 1)
	const crdName = "notes.refusals.example.com"

	e, stop := runEngine(t, env)
	if err := e.Apply(t.Context(), compileYAML(t, v1)); err != nil {
		t.Fatal(err)
	}
	err := e.Apply(t.Context(), compileYAML(t, v2))
	refusal, ok := errors.AsType[*engine.BreakingChangeError](err)
	if !ok {
		t.Fatalf("v2 without --allow-breaking: %v; want a BreakingChangeError", err)
	}
	if len(refusal.Findings) != 1 || refusal.Findings[0].Field != "versions[v1].spec.size" {
		t.Errorf("findings %v, want versions[v1].spec.size", refusal.Findings)
	}
	for _, want := range []string{"inline.yaml:12: versions[v1].spec.size: breaking: removed", "--allow-breaking"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if !declares(t, env, crdName, "size") {
		t.Error("the refused definition changed the CRD")
	}
	stop()

	e, _ = runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, AllowBreaking: true})
	if err := e.Apply(t.Context(), compileYAML(t, v2)); err != nil {
		t.Fatalf("v2 with AllowBreaking: %v", err)
	}
	if declares(t, env, crdName, "size") {
		t.Error("with AllowBreaking the CRD still declares spec.size")
	}
}

func TestAnOperatorWithABreakingChangeSaysSoAndItsLastGenerationRuns(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	e := startEngine(t, env)
	watchOperators(t, e)
	v1 := strings.NewReplacer("name: notes}", "name: shelved}", "group: notes.example.com", "group: shelved.example.com",
		"          a: {type: string}\n", "          a: {type: string}\n          size: {type: integer}\n").Replace(notesV1)
	v2 := strings.Replace(v1, "          size: {type: integer}\n", "", 1)

	putOperator(t, env.Client, operatorObject(t, v1))
	waitOperator(t, env.Client, "shelved", metav1.ConditionTrue, engine.ReasonRunning)
	note := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "shelved.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "s1", "namespace": env.Namespace},
		"spec":     map[string]any{"a": "first", "size": int64(3)},
	}}
	create(t, env, note)
	waitConfigMapData(t, env, "s1-note", "the ConfigMap of generation 1", map[string]string{"a": "first"})

	putOperator(t, env.Client, operatorObject(t, v2))
	op := waitOperator(t, env.Client, "shelved", metav1.ConditionFalse, engine.ReasonBreakingChange)
	msg := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady).Message
	for _, want := range []string{"generation 1 keeps running; generation 2 is refused", "versions[v1].spec.size: breaking: removed", "--allow-breaking"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q does not say %q", msg, want)
		}
	}
	if op.Status.CRD != "notes.shelved.example.com" {
		t.Errorf("status.crd = %q while generation 1 runs", op.Status.CRD)
	}
	if !declares(t, env, "notes.shelved.example.com", "size") {
		t.Error("the refused generation changed the CRD")
	}
	setSpec(t, env, note, "a", "second")
	waitConfigMapData(t, env, "s1-note", "the ConfigMap, kept by generation 1", map[string]string{"a": "second"})
}

// TestAnInstalledCRDShowsNoChangeFromItsOwnDefinition: what the API
// server gives back of a CRD (defaulted, its JSON values rewritten) is no
// change from the CRD it was given, or every restart would be refused.
func TestAnInstalledCRDShowsNoChangeFromItsOwnDefinition(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	files, err := filepath.Glob("../../examples/*/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	corpus, err := filepath.Glob("../compat/testdata/*/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defs, err := definition.CompileFiles(append(files, corpus...)...)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i, d := range defs {
		if !d.Owns() {
			continue
		}
		crd := d.CRD()
		// Each its own group: the corpus's files share one CRD name.
		crd.Spec.Group = fmt.Sprintf("g%d.installed.example.com", i)
		crd.Name = crd.Spec.Names.Plural + "." + crd.Spec.Group
		if err := env.Client.Create(t.Context(), crd.DeepCopy()); err != nil {
			t.Fatalf("%s: %v", d.Source, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })
		installed := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: crd.Name}, installed); err != nil {
			t.Fatal(err)
		}
		if findings := compat.Compare(installed, crd); len(findings) > 0 {
			t.Errorf("%s: the installed CRD differs from its definition's:\n%v", d.Source, findings)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("%d CRDs checked, want the examples' and the corpus's", checked)
	}
}
