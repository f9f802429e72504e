package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// The Gadget operator, with spec.rollout; %s is its ConfigMap's data, %s
// its settle. No engine runs it: the test writes its Rollout and its
// objects' status as the engine would.
const gadgetsOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: gadgets}
spec:
  resource:
    group: rollout.console.example.com
    kind: Gadget
    versions:
    - name: v1
      schema:
        type: object
        properties:
          size: {type: string}
  children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-content"}
      data: {definition: %q}
  rollout:
    steps:
    - count: 2
    - percent: 50
    settle: %s
`

func gadgetsDefinition(t *testing.T, data, settle string) *definition.Definition {
	t.Helper()
	src, err := definition.Load("gadgets.yaml", fmt.Appendf(nil, gadgetsOperator, data, settle))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// installCRD installs a CRD, once, and waits until kind is served.
func installCRD(t *testing.T, env *clustertest.Env, crd client.Object, apiVersion, kind string) {
	t.Helper()
	if err := env.Client.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 60*time.Second, kind+" served", func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(apiVersion)
		list.SetKind(kind + "List")
		return env.Client.List(ctx, list) == nil, nil
	})
}

// writeRollout creates or replaces the Rollout of gadgets.
func writeRollout(t *testing.T, env *clustertest.Env, obj *v1alpha1.RolloutObject) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	u.SetName("gadgets")
	err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), u)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := obj.Unstructured(u); err != nil {
		t.Fatal(err)
	}
	if u.GetResourceVersion() == "" {
		err = env.Client.Create(t.Context(), u)
	} else {
		err = env.Client.Update(t.Context(), u)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func rolloutDefinition(t *testing.T, d *definition.Definition) v1alpha1.RolloutDefinition {
	t.Helper()
	data, err := json.Marshal(d.Operator)
	if err != nil {
		t.Fatal(err)
	}
	return v1alpha1.RolloutDefinition{Hash: d.Hash(), Operator: string(data)}
}

// gadgets is a console and the Gadget operator's three objects in a
// namespace of the test's own, g0 and g1 moved by a Paused Rollout (g1
// not reconciled by the new definition yet), g2 not.
type gadgets struct {
	env      *clustertest.Env
	base     string // the console's
	from, to *definition.Definition
	reason   string
}

func withGadgets(t *testing.T) *gadgets {
	t.Helper()
	f := start(t)
	env := clustertest.New(t)
	from, to := gadgetsDefinition(t, "one", "1m"), gadgetsDefinition(t, "two", "2m")
	installCRD(t, env, to.CRD(), "rollout.console.example.com/v1", "Gadget")
	installCRD(t, env, v1alpha1.RolloutCRD(), v1alpha1.SchemeGroupVersion.String(), v1alpha1.RolloutKind)
	base := serveWith(t, console.Options{Archive: f.store, Config: f.cfg})
	ns := env.Namespace

	// g0 and g1 are moved, g2 is not; g1 has not been reconciled by the
	// new definition yet.
	on := map[string]string{"g0": to.Hash(), "g1": from.Hash(), "g2": from.Hash()}
	for _, name := range []string{"g0", "g1", "g2"} {
		g := &unstructured.Unstructured{}
		g.SetAPIVersion("rollout.console.example.com/v1")
		g.SetKind("Gadget")
		g.SetNamespace(ns)
		g.SetName(name)
		create(t, env, g)
		status := map[string]any{"opkit": map[string]any{"definition": on[name]}, "conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Reconciled", "message": "", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}
		patch, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Status().Patch(t.Context(), g, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	reason := "paused at step 1 of 3: " + ns + "/g0: Degraded: child content: the ConfigMap is refused"
	writeRollout(t, env, &v1alpha1.RolloutObject{Status: v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutPaused,
		From: rolloutDefinition(t, from), To: rolloutDefinition(t, to), Step: 1, Steps: 3,
		Moved: []string{ns + "/g0", ns + "/g1"}, MovedCount: 2, Reason: reason}})
	t.Cleanup(func() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
		u.SetName("gadgets")
		_ = env.Client.Delete(context.Background(), u)
	})

	return &gadgets{env: env, base: base, from: from, to: to, reason: reason}
}

func TestOperatorPageShowsAPausedRolloutItsStepsEachObjectsDefinitionAndTheDiff(t *testing.T) {
	g := withGadgets(t)
	env, base, from, to, reason := g.env, g.base, g.from, g.to, g.reason
	var page string
	clustertest.Eventually(t, 30*time.Second, "the operator page shows the rollout and the three gadgets", func(context.Context) (bool, error) {
		page = get(t, base+"/operators/gadgets")
		return strings.Contains(page, `class="rollout paused"`) && strings.Contains(page, ">g2</a>"), nil
	})
	mustContain(t, "the operator page", page,
		"Paused</span> at step 1 of 3", "<strong>Paused:</strong>", reason,
		"from definition <code>"+from.Hash()+"</code> (previous) to <code>"+to.Hash()+"</code> (new)", "2 of 3 objects are on the new one",
		// The steps: the first taken, the next waiting for a person.
		"healthy for 2m", "<td>2 objects</td><td>taken</td>", `<tr aria-current="step"><th scope="row">2</th><td>50%</td><td><strong>next</strong>, once a person continues the rollout</td>`,
		"<td>100%</td><td>–</td>",
		// What a person can do.
		"<code>opkit rollout continue gadgets</code>", "<code>opkit rollout undo gadgets</code>", "opkit plan -f NEW.yaml",
		// The diff, spec.rollout aside.
		"<code>spec.children[content].template.data.definition</code></th><td>change</td><td><code>one</code></td><td><code>two</code></td>",
		`<th scope="col">Definition</th>`)
	if strings.Contains(page, "spec.rollout.settle") {
		t.Errorf("the diff shows spec.rollout, which does not roll out")
	}
	// Each object's definition: g0 new, g1 previous but moving, g2
	// previous.
	for name, want := range map[string]string{
		"g0": `<span title="definition ` + to.Hash() + `">new</span> <span class="dim">` + to.Hash() + `</span></td>`,
		"g1": `<span title="definition ` + from.Hash() + `">previous</span> <span class="dim">` + from.Hash() + `</span><br><strong>moving to new</strong></td>`,
		"g2": `<span title="definition ` + from.Hash() + `">previous</span> <span class="dim">` + from.Hash() + `</span></td>`,
	} {
		i := strings.Index(page, ">"+name+"</a>")
		if i < 0 {
			t.Fatalf("no row of %s", name)
		}
		row, _, _ := strings.Cut(page[i:], "</tr>")
		if !strings.Contains(row, want) {
			t.Errorf("the row of %s lacks %q:\n%s", name, want, row)
		}
	}
	assertAccessible(t, base, "/operators/gadgets")

	// An operator without a Rollout shows neither the section nor the
	// column.
	chores := get(t, base+"/operators/chores")
	if strings.Contains(chores, `class="rollout`) || strings.Contains(chores, `<th scope="col">Definition</th>`) {
		t.Errorf("the page of an operator without a Rollout shows one")
	}

	// Complete: one line, no column.
	writeRollout(t, env, &v1alpha1.RolloutObject{Status: v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete,
		From: rolloutDefinition(t, to), To: rolloutDefinition(t, to), Step: 3, Steps: 3, Reason: "every object (3) is on definition " + to.Hash()}})
	page = get(t, base+"/operators/gadgets")
	mustContain(t, "the page of a complete rollout", page, "Definition <code>"+to.Hash()+"</code>, rolled out to every object.")
	if strings.Contains(page, `<section class="rollout`) || strings.Contains(page, `<th scope="col">Definition</th>`) {
		t.Errorf("the page of a complete rollout shows it as pending")
	}
}

// rollout reads the Rollout of gadgets.
func (g *gadgets) rollout(t *testing.T) (*unstructured.Unstructured, *v1alpha1.RolloutObject) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := g.env.Client.Get(t.Context(), client.ObjectKey{Name: "gadgets"}, u); err != nil {
		t.Fatal(err)
	}
	r, err := v1alpha1.ReadRollout(u)
	if err != nil {
		t.Fatal(err)
	}
	return u, r
}

func TestBrowserUndoesAPausedRolloutAndContinuesAnUndoneOne(t *testing.T) {
	g := withGadgets(t)
	tab := browser(t)
	within(tab, t, 30*time.Second, chromedp.Navigate(g.base+"/operators/gadgets"))
	waitJS(tab, t, 30*time.Second, "the page offers Continue and Undo",
		`!!document.querySelector("button.rollout-continue") && !!document.querySelector("button.rollout-undo")`)
	screenshot(tab, t, "rollout")
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS("button.rollout-undo")))
	waitJS(tab, t, 30*time.Second, "the page says Undo is asked, and offers no button",
		`document.body.innerText.includes("Undo asked by console") && !document.querySelector("button.rollout-undo")`)
	u, r := g.rollout(t)
	if r.Spec.Request != v1alpha1.RolloutUndo || !strings.HasPrefix(r.Spec.RequestedBy, "console") {
		t.Fatalf("the request written: %+v; want Undo by the console", r.Spec)
	}

	// The engine answers: undone. A request on the page as it was before
	// is refused; the page offers Continue, which rolls it out again.
	stale := u.GetResourceVersion()
	r.Spec = v1alpha1.RolloutRequest{}
	r.Status.Phase, r.Status.Moved, r.Status.MovedCount, r.Status.Reason = v1alpha1.RolloutRolledBack, nil, 0, "undone by console at step 1"
	writeRollout(t, g.env, r)
	page := get(t, g.base+"/operators/gadgets")
	csrf := csrfField.FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the operator page")
	}
	if resp := do(t, http.MethodPost, g.base+"/operators/gadgets/rollouts/gadgets/continue", url.Values{"csrf": {csrf[1]}, "resourceVersion": {stale}}); resp.status != http.StatusConflict ||
		!strings.Contains(resp.body, "changed since the page showed it") {
		t.Errorf("a continue on a stale page: %d, want 409 saying the rollout changed\n%s", resp.status, resp.body)
	}
	if resp := do(t, http.MethodPost, g.base+"/operators/gadgets/rollouts/gadgets/continue", url.Values{"resourceVersion": {stale}}); resp.status != http.StatusForbidden {
		t.Errorf("a continue without the CSRF token: %d, want 403", resp.status)
	}
	within(tab, t, 30*time.Second, chromedp.Navigate(g.base+"/operators/gadgets"))
	waitJS(tab, t, 30*time.Second, "the page says rolled back and offers Continue alone",
		`document.body.innerText.includes("Rolled back") && !!document.querySelector("button.rollout-continue") && !document.querySelector("button.rollout-undo")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS("button.rollout-continue")))
	waitJS(tab, t, 30*time.Second, "the page says Continue is asked", `document.body.innerText.includes("Continue asked by console")`)
	if _, r := g.rollout(t); r.Spec.Request != v1alpha1.RolloutContinue || r.Status.Phase != v1alpha1.RolloutRolledBack {
		t.Fatalf("the Rollout after Continue: %+v %s; want Continue asked, the phase the engine's to change", r.Spec, r.Status.Phase)
	}
}
