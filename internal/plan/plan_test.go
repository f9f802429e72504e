package plan

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

const websiteFile = "../../examples/website/operator.yaml"

var (
	configMapGVK  = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
)

// edited writes the Website operator with edits applied (each old text
// replaced by the new, once) into the test's directory.
func edited(t *testing.T, edits ...string) string {
	t.Helper()
	return editedFile(t, websiteFile, edits...)
}

// editedFile is edited for another definition file.
func editedFile(t *testing.T, file string, edits ...string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for i := 0; i < len(edits); i += 2 {
		if !strings.Contains(text, edits[i]) {
			t.Fatalf("operator.yaml has no %q to edit", edits[i])
		}
		text = strings.Replace(text, edits[i], edits[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func compile(t *testing.T, file string) *definition.Definition {
	t.Helper()
	defs, err := definition.CompileFiles(file)
	if err != nil {
		t.Fatal(err)
	}
	return defs[0]
}

// runEngine runs an engine of env's namespace with def and an archive,
// until the test ends.
func runEngine(t *testing.T, env *clustertest.Env, def *definition.Definition) (*engine.Engine, archive.Store) {
	t.Helper()
	store, err := archive.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.Run(ctx); err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); _ = store.Close() })
	if err := e.Apply(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	return e, store
}

// websites creates n Websites of no replicas and waits until the engine has made their
// children and written their status.
func websites(t *testing.T, env *clustertest.Env, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("site%d", i)
		names = append(names, name)
		site := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "demo.example.com/v1", "kind": "Website",
			"metadata": map[string]any{"name": name, "namespace": env.Namespace},
			// No Pods: the Deployments' status, which the Websites' reads,
			// stays as it is while the test compares.
			"spec": map[string]any{"content": fmt.Sprintf("<h1>%d</h1>", i), "replicas": int64(0)},
		}}
		if err := env.Client.Create(t.Context(), site); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		clustertest.Eventually(t, 60*time.Second, name+"'s children made and its status written", func(ctx context.Context) (bool, error) {
			site := &unstructured.Unstructured{}
			site.SetGroupVersionKind(schema.GroupVersionKind{Group: "demo.example.com", Version: "v1", Kind: "Website"})
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, site); err != nil {
				return false, err
			}
			v, _, _ := unstructured.NestedString(site.Object, "status", "contentVersion")
			return v != "" && get(t, env, deploymentGVK, name) != nil, nil
		})
	}
	return names
}

// get reads an object, nil when there is none.
func get(t *testing.T, env *clustertest.Env, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, obj); err != nil {
		if notFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return obj
}

// controllerFilled are fields other controllers than opkit write on a
// child, which no plan of opkit's knows: the Deployment's revision.
var controllerFilled = []string{"metadata.annotations.deployment.kubernetes.io/revision"}

// happened is what changed on a child from before to after, as the plan
// says it: its fields, Unknown where the plan cannot know the value.
func happened(before, after *unstructured.Unstructured) []Change {
	var out []Change
	for _, c := range diff(clean(before.Object), clean(after.Object)) {
		if !slices.Contains(controllerFilled, c.Path) {
			out = append(out, c)
		}
	}
	return out
}

// TestPlanListsEveryChildChangeAndHandlerRunThatThenHappens: a template
// edit (a ConfigMap key, the Deployment's image), a new create handler
// and a new when handler over the new key; the plan lists, for each
// Website, the ConfigMap and the Deployment changes field by field, the
// create handler's first run and the when condition's turn to true, the
// status field that follows; once the engine runs the new definition, exactly
// those fields changed on the children and exactly those runs are
// archived, with the keys the plan said.
func TestPlanListsEveryChildChangeAndHandlerRunThatThenHappens(t *testing.T) {
	env := clustertest.New(t)
	old := compile(t, websiteFile)
	e, store := runEngine(t, env, old)
	names := websites(t, env, 3)
	newFile := edited(t,
		`        https: "${self.spec.https ? 'on' : 'off'}"`,
		`        https: "${self.spec.https ? 'on' : 'off'}"
        footer: "served by opkit"`,
		`image: busybox:1.36`, `image: busybox:1.37`,
		"  status:\n",
		"  handlers:\n  - name: announce\n    on: [create]\n    exec: {command: [\"true\"]}\n"+
			"  - name: footed\n    on: [when]\n    when: \"children.content.data.footer == 'served by opkit'\"\n    exec: {command: [\"true\"]}\n  status:\n")
	def := compile(t, newFile)

	p, err := Run(t.Context(), Options{Config: env.Config, New: def, Old: old, Namespace: env.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	p.WriteText(&text)
	t.Logf("the plan:\n%s", text.String())
	if p.Refused != "" {
		t.Fatalf("refused: %s", p.Refused)
	}
	s := p.Summary
	if s.Objects != 3 || s.Changed != 3 || s.Updated != 6 || s.Created+s.Recreated+s.Pruned != 0 || s.HandlerRuns != 6 || s.StatusChanges != 3 || s.Errors != 0 {
		t.Fatalf("summary %+v, want 3 objects changed, 6 children changed, 6 handler runs, 3 status fields", s)
	}

	before := map[objKey]*unstructured.Unstructured{}
	for _, name := range names {
		before[objKey{configMapGVK, env.Namespace, name + "-content"}] = get(t, env, configMapGVK, name+"-content")
		before[objKey{deploymentGVK, env.Namespace, name}] = get(t, env, deploymentGVK, name)
	}

	if err := e.Apply(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	var runs []archive.Run
	clustertest.Eventually(t, 90*time.Second, "the children changed and the handler's runs archived", func(ctx context.Context) (bool, error) {
		for _, name := range names {
			cm, dep := get(t, env, configMapGVK, name+"-content"), get(t, env, deploymentGVK, name)
			footer, _, _ := unstructured.NestedString(cm.Object, "data", "footer")
			version, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "metadata", "annotations", "demo.example.com/content-version")
			if footer == "" || version != cm.GetResourceVersion() {
				return false, nil
			}
		}
		page, err := store.List(ctx, archive.Query{Operator: "website", Namespace: env.Namespace})
		if err != nil {
			return false, err
		}
		runs = page.Runs
		return len(runs) >= 6 && !slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Outcome != archive.Succeeded }), nil
	})

	planned := map[objKey]Child{}
	var keys []string
	for _, o := range p.Objects {
		for _, c := range o.Children {
			planned[objKey{schema.FromAPIVersionAndKind(c.APIVersion, c.Kind), c.Namespace, c.Name}] = c
		}
		for _, h := range o.Handlers {
			keys = append(keys, h.Handler+" "+h.Trigger+" "+h.Key)
		}
		if len(o.Status) != 1 || o.Status[0].Path != "status.contentVersion" || o.Status[0].New != Unknown {
			t.Errorf("%s: status changes %v, want status.contentVersion to %s", o.Name, o.Status, Unknown)
		}
	}
	for key, was := range before {
		now := get(t, env, key.gvk, key.name)
		got := happened(was, now)
		c, ok := planned[key]
		if !ok {
			if len(got) > 0 {
				t.Errorf("%s %s: not in the plan, and changed: %v", key.gvk.Kind, key.name, got)
			}
			continue
		}
		if c.Action != Update {
			t.Errorf("%s %s: planned %s, want update", key.gvk.Kind, key.name, c.Action)
		}
		if len(got) != len(c.Changes) {
			t.Errorf("%s %s: planned %v, happened %v", key.gvk.Kind, key.name, c.Changes, got)
			continue
		}
		for i, want := range c.Changes {
			h := got[i]
			if h.Path != want.Path || h.Op != want.Op || want.New != Unknown && fmt.Sprint(h.New) != fmt.Sprint(want.New) {
				t.Errorf("%s %s: planned %s, happened %s", key.gvk.Kind, key.name, want, h)
			}
		}
	}
	var ran []string
	for _, r := range runs {
		ran = append(ran, r.Handler+" "+r.Trigger+" "+r.Key)
	}
	slices.Sort(keys)
	slices.Sort(ran)
	if !slices.Equal(keys, ran) {
		t.Errorf("planned runs %q, archived %q", keys, ran)
	}
}

// TestPlanListsTheChildrenTheEngineThenPrunes: a child removed from the
// definition is planned pruned for each object, nothing else changes,
// and once the engine runs the new definition those objects are gone.
func TestPlanListsTheChildrenTheEngineThenPrunes(t *testing.T) {
	env := clustertest.New(t)
	old := compile(t, edited(t, "  - id: server\n", `  - id: extra
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-extra"}
      data: {note: "removed next"}
  - id: server
`))
	e, _ := runEngine(t, env, old)
	names := websites(t, env, 2)
	for _, name := range names {
		clustertest.Eventually(t, 30*time.Second, name+"-extra made", func(context.Context) (bool, error) {
			return get(t, env, configMapGVK, name+"-extra") != nil, nil
		})
	}
	def := compile(t, websiteFile)
	p, err := Run(t.Context(), Options{Config: env.Config, New: def, Old: old, Namespace: env.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Summary; s.Pruned != 2 || s.Unchanged != 4 || s.Created+s.Updated+s.Recreated+s.HandlerRuns+s.StatusChanges+s.Errors != 0 {
		t.Fatalf("summary %+v, want 2 children pruned and 4 unchanged", s)
	}
	for i, o := range p.Objects {
		want := Child{ID: "extra", APIVersion: "v1", Kind: "ConfigMap", Namespace: env.Namespace, Name: names[i] + "-extra", Action: Prune}
		if len(o.Children) != 1 || fmt.Sprint(o.Children[0]) != fmt.Sprint(want) {
			t.Errorf("%s: children %+v, want %+v", o.Name, o.Children, want)
		}
	}
	if err := e.Apply(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		clustertest.Eventually(t, 60*time.Second, name+"-extra pruned", func(context.Context) (bool, error) {
			return get(t, env, configMapGVK, name+"-extra") == nil, nil
		})
	}
}

// TestPlanSaysWhichObjectsMoveWhenATransitionsGuardNowHolds: the
// Database's Provisioning -> Ready guard changed to one that holds; the
// plan says the object moves, and once the engine runs the new
// definition it does.
func TestPlanSaysWhichObjectsMoveWhenATransitionsGuardNowHolds(t *testing.T) {
	env := clustertest.New(t)
	const file = "../../examples/database/operator.yaml"
	guard := `when: "has(children.server.status.readyReplicas) && children.server.status.readyReplicas == 1"`
	announce := `exec: {command: ["./announce.py"]}`
	old := compile(t, editedFile(t, file, guard, `when: "self.spec.version == '0.0'"`, announce, `exec: {command: ["true"]}`))
	e, _ := runEngine(t, env, old)
	dbGVK := schema.GroupVersionKind{Group: "demo.example.com", Version: "v1", Kind: "Database"}
	db := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Database",
		"metadata": map[string]any{"name": "orders", "namespace": env.Namespace},
		"spec":     map[string]any{"version": "16.2"},
	}}
	if err := env.Client.Create(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	inState := func(want string) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			obj := get(t, env, dbGVK, "orders")
			name, _, _ := unstructured.NestedString(obj.Object, "status", "state", "name")
			return name == want, nil
		}
	}
	clustertest.Eventually(t, 60*time.Second, "the Database Provisioning", inState("Provisioning"))

	def := compile(t, editedFile(t, file, guard, `when: "self.spec.version != '0.0'"`, announce, `exec: {command: ["true"]}`))
	p, err := Run(t.Context(), Options{Config: env.Config, New: def, Old: old, Namespace: env.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 1 || len(p.Objects[0].States) != 1 || !strings.HasPrefix(p.Objects[0].States[0], "moves from Provisioning to Ready") || p.Summary.StateEffects != 1 {
		t.Fatalf("plan %+v, want the Database to move from Provisioning to Ready", p)
	}
	if err := e.Apply(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 60*time.Second, "the Database Ready", inState("Ready"))
}

// TestPlanSaysWhichObjectsEachStepOfARolloutMovesAsTheEngineThenDoes:
// with spec.rollout, the plan lists the objects each step moves, and the
// engine's first step moves those.
func TestPlanSaysWhichObjectsEachStepOfARolloutMovesAsTheEngineThenDoes(t *testing.T) {
	env := clustertest.New(t)
	staged := "  rollout:\n    steps: [{count: 1}, {percent: 50}]\n    settle: 1h\n  children:\n"
	old := compile(t, edited(t, "  children:\n", staged))
	e, _ := runEngine(t, env, old)
	names := websites(t, env, 3)
	def := compile(t, edited(t, "  children:\n", staged, "busybox:1.36", "busybox:1.37"))
	p, err := Run(t.Context(), Options{Config: env.Config, New: def, Old: old, Namespace: env.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace + "/"
	want := []RolloutStep{{Step: "1 object", Objects: []string{ns + names[0]}}, {Step: "50%", Objects: []string{ns + names[1]}}, {Step: "100%", Objects: []string{ns + names[2]}}}
	if fmt.Sprint(p.Rollout) != fmt.Sprint(want) {
		t.Errorf("rollout %+v; want %+v", p.Rollout, want)
	}
	var text strings.Builder
	p.WriteText(&text)
	if !strings.Contains(text.String(), "rolled out in 3 steps (spec.rollout), the next once the objects moved are healthy:\n    1. 1 object: "+ns+names[0]+"\n") {
		t.Errorf("the plan's text does not list the steps:\n%s", text.String())
	}
	if p, err := Run(t.Context(), Options{Config: env.Config, New: old, Old: old, Namespace: env.Namespace}); err != nil || p.Rollout != nil {
		t.Errorf("a plan of the same definition: rollout %v, %v; want none", p.Rollout, err)
	}

	if err := e.Apply(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "the engine's first step", func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "website." + env.Namespace}, u); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		r, err := v1alpha1.ReadRollout(u)
		if err != nil || r.Status.Step != 1 {
			return false, err
		}
		if !slices.Equal(r.Status.Moved, want[0].Objects) {
			t.Errorf("the engine's first step moved %v; the plan said %v", r.Status.Moved, want[0].Objects)
		}
		return true, nil
	})
}
