package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/migrate"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// kind is the Note of one test: its own group, so that tests sharing the
// plane never share a CRD.
type kind struct {
	env   *clustertest.Env
	group string
}

const plural = "notes"

func newKind(t *testing.T, group string) *kind {
	env := clustertest.New(t)
	return &kind{env: env, group: group + ".migrate.example.com"}
}

func (k *kind) crdName() string { return plural + "." + k.group }

// apply installs the Note's CRD as opkit would from a definition whose
// versions are given as YAML list items (same schema each), and waits
// until the API server serves its storage version.
func (k *kind) apply(t *testing.T, versions ...string) error {
	t.Helper()
	src := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  resource:
    group: %s
    kind: Note
    versions:
`, strings.ReplaceAll(k.group, ".", "-"), k.group)
	for _, v := range versions {
		src += "    - " + strings.TrimSuffix(v, "}") + ", schema: {type: object, properties: {text: {type: string}}}}\n"
	}
	sources, err := definition.Load("notes.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(sources[0])
	if err != nil {
		t.Fatal(err)
	}
	crd := d.CRD()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	err = k.env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner("opkit"), client.ForceOwnership)
	if err != nil {
		return err
	}
	k.waitServed(t, d.GVK.Version, served(crd))
	return nil
}

func served(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Storage {
			return v.Name
		}
	}
	for _, v := range crd.Spec.Versions {
		if v.Served {
			return v.Name
		}
	}
	return ""
}

// waitServed waits until the CRD is established and discovery gives the
// storage version's hash.
func (k *kind) waitServed(t *testing.T, storage, served string) {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(k.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := migrate.StorageVersionHash(k.group, storage, "Note")
	clustertest.Eventually(t, 30*time.Second, "the API server stores notes at "+storage, func(context.Context) (bool, error) {
		list, err := disc.ServerResourcesForGroupVersion(k.group + "/" + served)
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == plural {
				return r.StorageVersionHash == want, nil
			}
		}
		return false, nil
	})
}

func (k *kind) note(version, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k.group + "/" + version, "kind": "Note",
		"metadata": map[string]any{"name": name, "namespace": k.env.Namespace},
		"spec":     map[string]any{"text": "text of " + name},
	}}
}

// create creates n notes note-00, note-01... at version.
func (k *kind) create(t *testing.T, version string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("note-%02d", i)
		if err := k.env.Client.Create(t.Context(), k.note(version, name)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// stored is the apiVersion etcd holds for the note name.
func (k *kind) stored(t *testing.T, name string) string {
	t.Helper()
	data, err := clustertest.Cluster(t).Stored(t.Context(), schema.GroupResource{Group: k.group, Resource: plural}, k.env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatalf("etcd holds for %s: %q: %v", name, data, err)
	}
	return strings.TrimPrefix(obj.APIVersion, k.group+"/")
}

// storedAt asserts that etcd holds each note at version.
func (k *kind) storedAt(t *testing.T, version string, names ...string) {
	t.Helper()
	for _, name := range names {
		if got := k.stored(t, name); got != version {
			t.Errorf("etcd holds %s at %s, want %s", name, got, version)
		}
	}
}

func (k *kind) crd(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k.env.Client.Get(t.Context(), client.ObjectKey{Name: k.crdName()}, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func (k *kind) migrate(ctx context.Context, t *testing.T, opts migrate.Options) (*migrate.Report, error) {
	t.Helper()
	opts.Config = k.env.Config
	if opts.Log == nil {
		opts.Log = func(line string) { t.Log(line) }
	}
	rep, err := migrate.CRD(ctx, k.crdName(), opts)
	if rep != nil {
		t.Logf("report:\n%s", rep)
	}
	return rep, err
}

// The versions of the Note, as apply takes them.
var (
	v1     = []string{"{name: v1, storage: true}"}
	v1v2   = []string{"{name: v1}", "{name: v2, storage: true}"}
	v1Off  = []string{"{name: v1, served: false}", "{name: v2, storage: true}"}
	v2Only = []string{"{name: v2, storage: true}"}
)

const (
	qps      = 40.0
	pageSize = 10
)

// TestMigrationRewritesEveryObjectThenDropsTheOldVersion: notes created
// under v1, then v2 made the storage version; etcd still holds them at v1
// and storedVersions is [v1 v2]. A dry run changes nothing. The migration
// rewrites each (etcd holds each at v2), counts the note created after
// the change as already current, takes at least as long as its rate
// allows, and sets storedVersions to [v2]; then v1 is turned off and
// removed, and every note stays readable.
func TestMigrationRewritesEveryObjectThenDropsTheOldVersion(t *testing.T) {
	k := newKind(t, "rewrite")
	if err := k.apply(t, v1...); err != nil {
		t.Fatal(err)
	}
	names := k.create(t, "v1", 25)
	k.storedAt(t, "v1", names...)
	if err := k.apply(t, v1v2...); err != nil {
		t.Fatal(err)
	}
	if got := k.crd(t).Status.StoredVersions; !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions %v, want [v1 v2]", got)
	}
	late := k.note("v2", "late")
	if err := k.env.Client.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	k.storedAt(t, "v2", "late")
	k.storedAt(t, "v1", names...)

	// The API server's own refusal to drop a stored version.
	err := k.apply(t, v2Only...)
	if err == nil || !strings.Contains(err.Error(), "v1 was previously a storage version, and must remain in spec.versions until a storage migration") {
		t.Fatalf("removing v1 while stored: %v; want the API server's refusal", err)
	}
	t.Logf("the API server says: %v", err)

	dry, err := k.migrate(t.Context(), t, migrate.Options{DryRun: true, PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Listed != 26 || dry.Counts.Total() != 0 {
		t.Errorf("dry run listed %d, counts %v; want 26 and none", dry.Listed, dry.Counts)
	}
	k.storedAt(t, "v1", names...)
	if crd := k.crd(t); !slices.Equal(crd.Status.StoredVersions, []string{"v1", "v2"}) || crd.Annotations[v1alpha1.MigrationAnnotation] != "" {
		t.Fatalf("after a dry run: storedVersions %v, annotation %q; want both unchanged", crd.Status.StoredVersions, crd.Annotations[v1alpha1.MigrationAnnotation])
	}

	outcomes := map[string]migrate.Outcome{}
	start := time.Now()
	rep, err := k.migrate(t.Context(), t, migrate.Options{QPS: qps, PageSize: pageSize, Progress: func(p migrate.Progress) {
		outcomes[p.Object] = p.Outcome
	}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if want := (migrate.Counts{Rewritten: 25, Current: 1}); rep.Counts != want {
		t.Errorf("counts %+v, want %+v", rep.Counts, want)
	}
	if !slices.Equal(rep.StoredBefore, []string{"v1", "v2"}) || !slices.Equal(rep.StoredAfter, []string{"v2"}) || rep.Resumed != nil {
		t.Errorf("report: stored %v -> %v, resumed %v; want [v1 v2] -> [v2], not resumed", rep.StoredBefore, rep.StoredAfter, rep.Resumed)
	}
	if len(outcomes) != 26 || outcomes[k.env.Namespace+"/late"] != migrate.Current || outcomes[k.env.Namespace+"/note-00"] != migrate.Rewritten {
		t.Errorf("outcomes by object: %v", outcomes)
	}
	// 26 writes and 3 lists, one every 25ms: at least 28 gaps.
	if least := time.Duration(float64(rep.Requests-1) / qps * float64(time.Second)); rep.Requests != 29 || took < least {
		t.Errorf("%d requests in %s; want 29, taking at least %s at %v a second", rep.Requests, took, least, qps)
	}
	k.storedAt(t, "v2", append(names, "late")...)
	crd := k.crd(t)
	if !slices.Equal(crd.Status.StoredVersions, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", crd.Status.StoredVersions)
	}
	if a, ok := crd.Annotations[v1alpha1.MigrationAnnotation]; ok {
		t.Errorf("the progress annotation is left: %s", a)
	}
	again, err := k.migrate(t.Context(), t, migrate.Options{})
	if err != nil || !again.UpToDate {
		t.Errorf("a second migration: %v, %+v; want nothing to do", err, again)
	}

	// v1 off, then gone: every note stays readable at v2.
	if err := k.apply(t, v1Off...); err != nil {
		t.Fatalf("turning v1 off: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "v1 no longer served", func(ctx context.Context) (bool, error) {
		err := k.env.Client.Get(ctx, client.ObjectKey{Namespace: k.env.Namespace, Name: "note-00"}, k.note("v1", "note-00"))
		return apierrors.IsNotFound(err) || meta404(err), nil
	})
	k.readable(t, append(names, "late"))
	if err := k.apply(t, v2Only...); err != nil {
		t.Fatalf("removing v1 after the migration: %v", err)
	}
	k.readable(t, append(names, "late"))
	k.storedAt(t, "v2", append(names, "late")...)
}

// meta404 says whether err is the REST mapper's "no matches for kind".
func meta404(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no matches for kind")
}

// readable asserts that each note reads at v2 with its text.
func (k *kind) readable(t *testing.T, names []string) {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(k.group + "/v2")
	list.SetKind("NoteList")
	if err := k.env.Client.List(t.Context(), list, client.InNamespace(k.env.Namespace)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range list.Items {
		got[n.GetName()], _, _ = unstructured.NestedString(n.Object, "spec", "text")
	}
	for _, name := range names {
		if got[name] != "text of "+name {
			t.Errorf("note %s reads %q at v2", name, got[name])
		}
	}
}

// TestAnInterruptedMigrationResumesWhereItStopped: a migration cancelled
// after 13 of 30 notes (in its second page) leaves the first 13 at v2, the
// rest at v1, and its progress on the CRD; the next run rewrites the 17
// others only, and its counts, the first run's included, add up to 30.
func TestAnInterruptedMigrationResumesWhereItStopped(t *testing.T) {
	k := newKind(t, "resume")
	if err := k.apply(t, v1...); err != nil {
		t.Fatal(err)
	}
	names := k.create(t, "v1", 30)
	if err := k.apply(t, v1v2...); err != nil {
		t.Fatal(err)
	}
	const n = 13
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var first []string
	rep, err := k.migrate(ctx, t, migrate.Options{PageSize: 8, SaveEvery: 5, Progress: func(p migrate.Progress) {
		first = append(first, p.Object)
		if len(first) == n {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after 13 objects") {
		t.Fatalf("the interrupted migration: %v; want interrupted after 13 objects", err)
	}
	if rep.Counts != (migrate.Counts{Rewritten: n}) || len(first) != n || !rep.Stopped ||
		!strings.Contains(rep.String(), "stopped after 13 objects migrated to v2") {
		t.Fatalf("counts %+v after %d objects; want %d rewritten", rep.Counts, len(first), n)
	}
	k.storedAt(t, "v2", names[:n]...)
	k.storedAt(t, "v1", names[n:]...)
	crd := k.crd(t)
	if !slices.Equal(crd.Status.StoredVersions, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v after an interruption; want [v1 v2]", crd.Status.StoredVersions)
	}
	var saved struct {
		Storage string         `json:"storage"`
		After   string         `json:"after"`
		Counts  migrate.Counts `json:"counts"`
	}
	if err := json.Unmarshal([]byte(crd.Annotations[v1alpha1.MigrationAnnotation]), &saved); err != nil {
		t.Fatalf("progress annotation %q: %v", crd.Annotations[v1alpha1.MigrationAnnotation], err)
	}
	if saved.Storage != "v2" || saved.After != k.env.Namespace+"/"+names[n-1] || saved.Counts.Rewritten != n {
		t.Errorf("saved progress %+v; want storage v2, after %s, %d rewritten", saved, names[n-1], n)
	}

	var second []string
	rep, err = k.migrate(t.Context(), t, migrate.Options{PageSize: 8, SaveEvery: 5, Progress: func(p migrate.Progress) {
		second = append(second, p.Object)
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range second {
		if slices.Contains(first, obj) {
			t.Errorf("%s was rewritten again", obj)
		}
	}
	if len(second) != len(names)-n {
		t.Errorf("the resumed run did %d objects, want %d", len(second), len(names)-n)
	}
	if rep.Resumed == nil || rep.Resumed.Total() != n || rep.Counts != (migrate.Counts{Rewritten: 30}) || rep.Counts.Total() != rep.Resumed.Total()+len(second) {
		t.Errorf("resumed %+v, counts %+v; want 13 resumed, 30 rewritten in all", rep.Resumed, rep.Counts)
	}
	if !strings.Contains(rep.String(), "30 objects migrated to v2: 30 rewritten, 0 already current, 0 gone, 0 failed (resumed after 13)") {
		t.Errorf("report:\n%s", rep)
	}
	k.storedAt(t, "v2", names...)
	if crd := k.crd(t); !slices.Equal(crd.Status.StoredVersions, []string{"v2"}) || crd.Annotations[v1alpha1.MigrationAnnotation] != "" {
		t.Errorf("storedVersions %v, annotation %q; want [v2] and none", crd.Status.StoredVersions, crd.Annotations[v1alpha1.MigrationAnnotation])
	}
}

// TestObjectsThatFailLeaveStoredVersionsAlone: an admission policy
// refuses writes of the note labelled stuck; another note is deleted and
// a third changed after they were listed. The migration counts one of
// each (failed, gone, already current), names the stuck note and why,
// and leaves storedVersions at [v1 v2]. Once the policy is gone, the next
// migration rewrites the stuck note and sets [v2].
func TestObjectsThatFailLeaveStoredVersionsAlone(t *testing.T) {
	k := newKind(t, "failed")
	if err := k.apply(t, v1...); err != nil {
		t.Fatal(err)
	}
	names := k.create(t, "v1", 6)
	stuck := k.note("v1", "stuck")
	stuck.SetLabels(map[string]string{"stuck": "yes"})
	if err := k.env.Client.Create(t.Context(), stuck); err != nil {
		t.Fatal(err)
	}
	if err := k.apply(t, v1v2...); err != nil {
		t.Fatal(err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck-" + strings.ReplaceAll(k.group, ".", "-")},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{k.group}, APIVersions: []string{"*"}, Resources: []string{plural}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('stuck' in object.metadata.labels)",
				Message:    "stuck notes stay as they are", Reason: ptrTo(metav1.StatusReasonInvalid),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k.env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.env.Client.Delete(context.Background(), obj) })
	}
	clustertest.Eventually(t, 30*time.Second, "the policy refuses to write the stuck note", func(ctx context.Context) (bool, error) {
		got := k.note("v2", "stuck")
		if err := k.env.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			return false, err
		}
		err := k.env.Client.Update(ctx, got, client.DryRunAll) // admitted, not written
		return err != nil && strings.Contains(err.Error(), "stuck notes stay as they are"), nil
	})

	ns := k.env.Namespace
	acted := false
	rep, err := k.migrate(t.Context(), t, migrate.Options{Progress: func(p migrate.Progress) {
		if acted {
			return
		}
		acted = true // after note-00: note-01 deleted, note-02 changed
		if err := k.env.Client.Delete(t.Context(), k.note("v2", "note-01")); err != nil {
			t.Error(err)
		}
		changed := k.note("v2", "note-02")
		if err := k.env.Client.Get(t.Context(), client.ObjectKeyFromObject(changed), changed); err != nil {
			t.Error(err)
		}
		changed.SetAnnotations(map[string]string{"changed": "yes"})
		if err := k.env.Client.Update(t.Context(), changed); err != nil {
			t.Error(err)
		}
	}})
	if !errors.Is(err, migrate.ErrObjectsFailed) {
		t.Fatalf("err %v, want ErrObjectsFailed", err)
	}
	if want := (migrate.Counts{Rewritten: 4, Current: 1, Gone: 1, Failed: 1}); rep.Counts != want {
		t.Errorf("counts %+v, want %+v", rep.Counts, want)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Object != ns+"/stuck" || !strings.Contains(rep.Failures[0].Error, "stuck notes stay as they are") {
		t.Errorf("failures %+v; want the stuck note and the policy's message", rep.Failures)
	}
	if !strings.Contains(err.Error(), "storedVersions stays [v1 v2]") {
		t.Errorf("error %q does not say storedVersions stays", err)
	}
	crd := k.crd(t)
	if !slices.Equal(crd.Status.StoredVersions, []string{"v1", "v2"}) || !slices.Equal(rep.StoredAfter, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v (report %v), want [v1 v2] left", crd.Status.StoredVersions, rep.StoredAfter)
	}
	if _, ok := crd.Annotations[v1alpha1.MigrationAnnotation]; ok {
		t.Error("a migration that ended with failures left its progress: the next would not start over")
	}
	k.storedAt(t, "v1", "stuck")
	k.storedAt(t, "v2", "note-00", "note-02", "note-03", "note-04", "note-05")

	if err := k.env.Client.Delete(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the policy lets the stuck note be written", func(ctx context.Context) (bool, error) {
		got := k.note("v2", "stuck")
		if err := k.env.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			return false, err
		}
		return k.env.Client.Update(ctx, got, client.DryRunAll) == nil, nil
	})
	rep, err = k.migrate(t.Context(), t, migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// note-00 and note-02 to note-05 were rewritten by the first run.
	if want := (migrate.Counts{Rewritten: 1, Current: len(names) - 1}); rep.Counts != want {
		t.Errorf("counts %+v, want %+v", rep.Counts, want)
	}
	k.storedAt(t, "v2", "stuck")
	if got := k.crd(t).Status.StoredVersions; !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestAMigrationInterruptedBeforeTheStorageVersionChangedStartsOver: a
// migration to v2 stopped after 4 notes; then v3 becomes the storage
// version. The next migration does not resume the one to v2: it starts
// over, rewrites all 10 at v3 (the 4 at v2 too), and sets [v3].
func TestAMigrationInterruptedBeforeTheStorageVersionChangedStartsOver(t *testing.T) {
	k := newKind(t, "changed")
	if err := k.apply(t, v1...); err != nil {
		t.Fatal(err)
	}
	names := k.create(t, "v1", 10)
	if err := k.apply(t, v1v2...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := 0
	if _, err := k.migrate(ctx, t, migrate.Options{Progress: func(migrate.Progress) {
		if done++; done == 4 {
			cancel()
		}
	}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted migration: %v", err)
	}
	k.storedAt(t, "v2", names[:4]...)
	if err := k.apply(t, "{name: v1}", "{name: v2}", "{name: v3, storage: true}"); err != nil {
		t.Fatal(err)
	}
	var lines []string
	rep, err := k.migrate(t.Context(), t, migrate.Options{Log: func(line string) { lines = append(lines, line) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resumed != nil || rep.Counts != (migrate.Counts{Rewritten: 10}) || !slices.Equal(rep.StoredAfter, []string{"v3"}) {
		t.Errorf("resumed %v, counts %+v, storedVersions after %v; want a new migration, 10 rewritten, [v3]", rep.Resumed, rep.Counts, rep.StoredAfter)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "the storage version is v3 now, not v2 as when the interrupted migration started: starting over") {
		t.Errorf("the migration did not say it starts over:\n%s", strings.Join(lines, "\n"))
	}
	k.storedAt(t, "v3", names...)
}

// TestAMigrationWithoutTheRightToWriteStopsAtTheFirstObject: a user who
// may read the CRD and list the notes, not update them, is stopped at the
// first note, told which right is missing; storedVersions stays, and the
// progress saved says no object was done.
func TestAMigrationWithoutTheRightToWriteStopsAtTheFirstObject(t *testing.T) {
	k := newKind(t, "forbidden")
	if err := k.apply(t, v1...); err != nil {
		t.Fatal(err)
	}
	k.create(t, "v1", 3)
	if err := k.apply(t, v1v2...); err != nil {
		t.Fatal(err)
	}
	user := "reader-" + strings.ReplaceAll(k.group, ".", "-")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, ResourceNames: []string{k.crdName()}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{k.group}, Resources: []string{plural}, Verbs: []string{"list"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k.env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.env.Client.Delete(context.Background(), obj) })
	}
	cfg := rest.CopyConfig(k.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	var rep *migrate.Report
	var err error
	clustertest.Eventually(t, 30*time.Second, "a migration that the missing right stops", func(ctx context.Context) (bool, error) {
		rep, err = migrate.CRD(ctx, k.crdName(), migrate.Options{Config: cfg})
		return err != nil && strings.Contains(err.Error(), "not allowed to rewrite Note"), nil // RBAC may lag the role
	})
	if !strings.Contains(err.Error(), "the migration needs list and update on notes."+k.group) || !apierrors.IsForbidden(err) {
		t.Errorf("error %v; want it to name the rights and be Forbidden", err)
	}
	if rep.Counts.Total() != 0 || !rep.Stopped {
		t.Errorf("report %+v; want stopped before any object", rep)
	}
	crd := k.crd(t)
	if !slices.Equal(crd.Status.StoredVersions, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v, want [v1 v2]", crd.Status.StoredVersions)
	}
	if !strings.Contains(crd.Annotations[v1alpha1.MigrationAnnotation], `"counts":{"rewritten":0,"current":0,"gone":0,"failed":0}`) {
		t.Errorf("progress %q; want it saved with no object done", crd.Annotations[v1alpha1.MigrationAnnotation])
	}
}
