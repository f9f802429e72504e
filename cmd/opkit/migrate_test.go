package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// memosOperator is an operator of Memos whose versions are given as YAML
// list items, each with the same schema.
func memosOperator(versions ...string) string {
	s := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: memos}
spec:
  resource:
    group: memos.example.com
    kind: Memo
    versions:
`
	for _, v := range versions {
		s += "    - " + strings.TrimSuffix(v, "}") + ", schema: {type: object, properties: {a: {type: string}}}}\n"
	}
	return s
}

// runUntilRunning runs opkit run with args until the operator memos runs,
// then stops it with Ctrl-C and returns its output.
func runUntilRunning(t *testing.T, args ...string) string {
	t.Helper()
	cmd, out := startOpkit(t, append([]string{"run"}, args...)...)
	waitOutput(t, out, "operator memos: running", 60*time.Second)
	return stopOpkit(t, cmd, out)
}

// stopOpkit stops a command with Ctrl-C, waits for it, and returns its
// output.
func stopOpkit(t *testing.T, cmd *exec.Cmd, out *lockedBuffer) string {
	t.Helper()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("opkit %v after Ctrl-C: %v\n%s", cmd.Args[1:], err, out.String())
	}
	return out.String()
}

// TestMigrateRewritesStoredObjectsAndRunMigratesByFlag follows a user:
// Memos created under v1; v2 made the storage version; dropping v1 now is
// refused with the file's line and `opkit migrate`; opkit migrate refuses
// what it cannot or may not migrate (exit 1), counts in a dry run, then
// migrates (exit 0, the counts, storedVersions [v1 v2] -> [v2]); v1 can
// then be dropped; and with v3 stored, opkit run --migrate-storage
// migrates by itself, saying so in its log.
func TestMigrateRewritesStoredObjectsAndRunMigratesByFlag(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	kc := cl.KubeconfigPath()
	dir := t.TempDir()
	def := func(name string, versions ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(memosOperator(versions...)), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	storedVersions := func() []string {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: "memos.memos.example.com"}, crd); err != nil {
			t.Fatal(err)
		}
		return crd.Status.StoredVersions
	}
	migrate := func(args ...string) result {
		return opkitWithEnv(t, nil, append([]string{"migrate"}, args...)...)
	}

	runUntilRunning(t, "-f", def("v1.yaml", "{name: v1}"), "--kubeconfig", kc)
	for i := range 5 {
		memo := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "memos.example.com/v1", "kind": "Memo",
			"metadata": map[string]any{"name": fmt.Sprintf("memo-%d", i), "namespace": "default"}, "spec": map[string]any{"a": "x"},
		}}
		if err := c.Create(t.Context(), memo); err != nil {
			t.Fatal(err)
		}
	}
	runUntilRunning(t, "-f", def("v1v2.yaml", "{name: v1}", "{name: v2, storage: true}"), "--kubeconfig", kc)
	if got := storedVersions(); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions %v, want [v1 v2]", got)
	}

	// Dropping v1 while it is stored: opkit refuses, naming the line.
	v2only := def("v2.yaml", "{name: v2, storage: true}")
	refused := opkitWithEnv(t, nil, "run", "-f", v2only, "--kubeconfig", kc)
	if refused.code != 1 || !strings.Contains(refused.stderr, v2only+":8: spec.resource.versions: version v1 is removed, but objects may still be stored at it") ||
		!strings.Contains(refused.stderr, "opkit migrate memos.memos.example.com") {
		t.Errorf("opkit run dropping a stored version: exit %d\n%s", refused.code, refused.stderr)
	}

	t.Run("refusals", func(t *testing.T) {
		if r := migrate("Nope", "--kubeconfig", kc); r.code != 1 || !strings.Contains(r.stderr, "opkit: Nope names no CRD") {
			t.Errorf("an unknown kind: exit %d\n%s", r.code, r.stderr)
		}
		if r := migrate("default/Memo", "--kubeconfig", kc); r.code != 1 || !strings.Contains(r.stderr, "name the kind alone: a migration covers every namespace") {
			t.Errorf("NS/KIND: exit %d\n%s", r.code, r.stderr)
		}
		widgets := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.other.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "other.example.com", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}}}},
			},
		}
		if err := c.Create(t.Context(), widgets); err != nil {
			t.Fatal(err)
		}
		r := migrate("Widget", "--kubeconfig", kc)
		if r.code != 1 || !strings.Contains(r.stderr, "CRD widgets.other.example.com was not installed by opkit") || !strings.Contains(r.stderr, "add --any") {
			t.Errorf("a CRD opkit did not install: exit %d\n%s", r.code, r.stderr)
		}
		clustertest.Eventually(t, 30*time.Second, "opkit migrate --any of an established CRD", func(context.Context) (bool, error) {
			r = migrate("widgets.other.example.com", "--any", "--kubeconfig", kc)
			return r.code == 0, nil
		})
		if !strings.Contains(r.stdout, "widgets.other.example.com: every object is stored at v1 already (storedVersions [v1]): nothing to migrate") {
			t.Errorf("opkit migrate --any:\n%s\n%s", r.stdout, r.stderr)
		}

		nobody := filepath.Join(t.TempDir(), "nobody.kubeconfig")
		cfg, err := clientcmd.LoadFromFile(kc)
		if err != nil {
			t.Fatal(err)
		}
		for _, auth := range cfg.AuthInfos {
			auth.Impersonate = "nobody"
		}
		if err := clientcmd.WriteToFile(*cfg, nobody); err != nil {
			t.Fatal(err)
		}
		r = migrate("memos", "--kubeconfig", nobody)
		if r.code != 1 || !strings.Contains(r.stderr, `User "nobody" cannot get resource "customresourcedefinitions"`) || !strings.Contains(r.stderr, "opkit migrate needs") {
			t.Errorf("without rights: exit %d\n%s", r.code, r.stderr)
		}
		if r := migrate("memos", "--qps", "0", "--kubeconfig", kc); r.code != 1 || !strings.Contains(r.stderr, "--qps 0") {
			t.Errorf("--qps 0: exit %d\n%s", r.code, r.stderr)
		}
	})

	dry := migrate("Memo", "--dry-run", "--kubeconfig", kc)
	if dry.code != 0 || !strings.Contains(dry.stdout, "memos.memos.example.com: dry run: 5 objects would be rewritten at v2") {
		t.Errorf("opkit migrate --dry-run: exit %d\n%s\n%s", dry.code, dry.stdout, dry.stderr)
	}
	if got := storedVersions(); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions %v after a dry run, want [v1 v2]", got)
	}
	done := migrate("memos", "--qps", "100", "--kubeconfig", kc)
	if done.code != 0 {
		t.Fatalf("opkit migrate: exit %d\n%s\n%s", done.code, done.stdout, done.stderr)
	}
	for _, want := range []string{
		"memos.memos.example.com: 5 objects migrated to v2: 5 rewritten, 0 already current, 0 gone, 0 failed in ",
		"storedVersions: [v1 v2] -> [v2]",
	} {
		if !strings.Contains(done.stdout, want) {
			t.Errorf("opkit migrate's summary lacks %q:\n%s", want, done.stdout)
		}
	}
	if !strings.Contains(done.stderr, "memos.memos.example.com: migrating every object to v2 (storedVersions [v1 v2])") {
		t.Errorf("opkit migrate's progress:\n%s", done.stderr)
	}
	if got := storedVersions(); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("storedVersions %v after opkit migrate, want [v2]", got)
	}

	// v1 can go now, and every Memo stays readable.
	runUntilRunning(t, "-f", v2only, "--allow-breaking", "--kubeconfig", kc) // v1 was served: its removal breaks its clients
	if out, err := kubectl(t, kc, "get", "memos.v2.memos.example.com", "-n", "default", "-o", "name"); err != nil || strings.Count(out, "memo.memos.example.com/memo-") != 5 {
		t.Errorf("kubectl get memos at v2: %v\n%s", err, out)
	}

	// With v3 stored, opkit run --migrate-storage migrates by itself.
	v3 := def("v3.yaml", "{name: v2}", "{name: v3, storage: true}")
	cmd, out := startOpkit(t, "run", "-f", v3, "--migrate-storage", "--kubeconfig", kc)
	waitOutput(t, out, "storedVersions: [v2 v3] -> [v3]", 60*time.Second)
	for _, want := range []string{
		"operator memos: running",
		"operator memos: storage migration of CRD memos.memos.example.com to v3 (storedVersions [v2 v3]), in the background",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("opkit run --migrate-storage's log lacks %q:\n%s", want, out.String())
		}
	}
	// The engine runs beside the migration: a Memo whose status it wrote
	// first is stored at v3 already when the migration comes to it.
	summary := regexp.MustCompile(`storage migration: memos\.memos\.example\.com: 5 objects migrated to v3: (\d) rewritten, (\d) already current, 0 gone, 0 failed`)
	if m := summary.FindStringSubmatch(out.String()); m == nil || atoi(m[1])+atoi(m[2]) != 5 {
		t.Errorf("opkit run --migrate-storage's log lacks its summary, 5 objects rewritten or current, none gone or failed:\n%s", out.String())
	}
	stopOpkit(t, cmd, out)
	if got := storedVersions(); !slices.Equal(got, []string{"v3"}) {
		t.Errorf("storedVersions %v after opkit run --migrate-storage, want [v3]", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
