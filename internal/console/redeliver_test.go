package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/stack"
)

// redeliverOperator runs /bin/true on each delivery of its GitHub source.
const redeliverOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: %s, name: hook, key: github}}
  handlers:
  - name: deploy
    on: [event]
    exec: {command: [/bin/true]}
`

// sendDelivery posts a delivery signed with secret as GitHub signs it, and
// returns the answer's status and the archive's id of the delivery.
func sendDelivery(t *testing.T, hooksURL, id, secret string) (int, string) {
	t.Helper()
	body := []byte(`{"action": "created"}`)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, hooksURL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-GitHub-Event", "issue_comment")
	req.Header.Set("X-Hub-Signature-256", source.GitHubSignature([]byte(secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, answer["delivery"]
}

// redeliverer makes a ServiceAccount that may read the operator's
// deliveries (get on its Operator object) and, when create, create
// Redeliveries; it returns its bearer token as an Authorization header's
// value.
func redeliverer(t *testing.T, env *clustertest.Env, name string, create bool) string {
	t.Helper()
	rules := []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.Group}, Resources: []string{"operators"}, Verbs: []string{"get", "list"}}}
	if create {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.RedeliveryResource}, Verbs: []string{"create"}})
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: env.Namespace + "-" + name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: env.Namespace}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, role)
	})
	clustertest.Eventually(t, 30*time.Second, name+"'s ClusterRole in effect", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + env.Namespace + ":" + name,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: v1alpha1.Group, Resource: "operators", Verb: "get"},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	tr, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().ServiceAccounts(env.Namespace).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tr.Status.Token
}

// redeliveries lists the Redelivery objects of namespace ns.
func redeliveries(t *testing.T, env *clustertest.Env) []unstructured.Unstructured {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind + "List"))
	if err := env.Client.List(t.Context(), list, client.InNamespace(env.Namespace)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestBrowserRedeliverIsAnsweredByTheEngineAndLinkedBothWays: beside an
// engine of one namespace, a delivery's page offers Redeliver to a person
// who may create Redeliveries there, and not to one who may only read,
// whose page says why; a POST without the form's CSRF token creates
// nothing. Clicked in a browser, the engine accepts it: the page links
// the new delivery, whose page names its original, who asked and why,
// and the original links it back. A delivery refused before its sender
// was verified is refused, with the engine's reason.
func TestBrowserRedeliverIsAnsweredByTheEngineAndLinkedBothWays(t *testing.T) {
	env := clustertest.New(t)
	store, err := archive.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "hook"}, StringData: map[string]string{"github": "s3cret"}}
	if err := env.Client.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	op := "redeliver-" + archive.NewID(time.Now())[12:]
	src, err := definition.Load("redeliver.yaml", fmt.Appendf(nil, redeliverOperator, op, env.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(context.WithoutCancel(t.Context()), stack.Options{
		Engine:  engine.Options{Config: env.Config, Namespace: env.Namespace, HooksAddr: "127.0.0.1:0"},
		Store:   store,
		Console: &stack.Console{Addr: "127.0.0.1:0", Auth: console.Auth{Kubernetes: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if err := s.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	base := s.ConsoleURL()
	hooksURL := "http://" + s.Engine.HooksAddr() + "/hooks/" + op + "/github"

	status, first := sendDelivery(t, hooksURL, "d-1", "s3cret")
	if status != http.StatusAccepted {
		t.Fatalf("the delivery was answered %d, want 202", status)
	}
	_, forged := sendDelivery(t, hooksURL, "d-2", "a guess")
	clustertest.Eventually(t, 60*time.Second, "the delivery handled", func(ctx context.Context) (bool, error) {
		got, err := store.GetDelivery(ctx, first)
		return err == nil && got.Outcome == archive.DeliveryHandled, err
	})

	// The reader sees why they cannot redeliver, and no button; a POST
	// without the form's token creates nothing.
	reader := redeliverer(t, env, "reader", false)
	page := get(t, base+"/events/"+first, "Authorization", reader)
	mustContain(t, "the reader's delivery page", page, "You cannot redeliver it here",
		"may not create redeliveries.opkit.dev in namespace "+env.Namespace)
	if strings.Contains(page, `class="redeliver"`) {
		t.Error("the reader is offered the Redeliver button")
	}
	deployer := redeliverer(t, env, "deployer", true)
	if r := do(t, http.MethodPost, base+"/events/"+first+"/redeliver", url.Values{"reason": {"no token"}}, "Authorization", deployer); r.status != http.StatusForbidden ||
		!strings.Contains(r.body, "CSRF token is missing") {
		t.Errorf("a redelivery without the form's CSRF token: %d, want 403 saying so\n%s", r.status, r.body)
	}
	if got := redeliveries(t, env); len(got) != 0 {
		t.Fatalf("refused redeliveries created %d Redeliveries", len(got))
	}

	// The deployer redelivers in a browser.
	who := "system:serviceaccount:" + env.Namespace + ":deployer"
	tab := browser(t)
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/login"))
	within(tab, t, 30*time.Second, chromedp.SetValue(chromedp.ID("token"), strings.TrimPrefix(deployer, "Bearer ")), chromedp.Submit(chromedp.ID("token")))
	waitJS(tab, t, 30*time.Second, "signed in", `document.body.innerText.includes("Signed in as `+who+`")`)
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/events/"+first))
	within(tab, t, 30*time.Second, chromedp.SendKeys(chromedp.ID("redeliver-reason"), "the deploy handler is fixed"))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`button.redeliver`)))
	answer := `document.querySelector(".redelivery-answer.accepted")`
	waitJS(tab, t, 60*time.Second, "the page says the engine accepted it, linking the new delivery",
		`!!`+answer+` && `+answer+`.innerText.includes("Redelivery asked by `+who+`: accepted as delivery") && !!`+answer+`.querySelector("a.redelivery-new")`)
	screenshot(tab, t, "redelivered")
	again, err := chromedp.Run(tab, chromedp.Evaluate[string](answer+`.querySelector("a.redelivery-new").textContent`))
	if err != nil || !archive.ValidID(again) {
		t.Fatalf("the accepted answer links %q (%v), want a delivery id", again, err)
	}
	r := redeliveries(t, env)
	if len(r) != 1 {
		t.Fatalf("%d Redeliveries, want 1", len(r))
	}
	if spec, st, err := v1alpha1.ReadRedelivery(&r[0]); err != nil || spec.Delivery != first || spec.By != who || spec.Reason != "the deploy handler is fixed" ||
		st.Outcome != v1alpha1.RedeliveryAccepted || st.Redelivery != again {
		t.Errorf("the Redelivery: %+v %+v (%v), want of %s by %s with the reason, Accepted as %s", spec, st, err, first, who, again)
	}

	// The new delivery names its original, who asked and why; the
	// original links it back.
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`.redelivery-answer.accepted a.redelivery-new`)))
	waitJS(tab, t, 60*time.Second, "the new delivery's page links its original, with who and why",
		`location.pathname === "/events/`+again+`" && !!document.querySelector("a.redelivery-of") && document.querySelector("a.redelivery-of").getAttribute("href") === "/events/`+first+`"`+
			` && document.querySelector("a.redelivery-of").parentElement.innerText.includes("asked by `+who+`: “the deploy handler is fixed”")`)
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`a.redelivery-of`)))
	waitJS(tab, t, 30*time.Second, "the original's page links the redelivery",
		`location.pathname === "/events/`+first+`" && [...document.querySelectorAll("a.redelivered-as")].map(a => a.getAttribute("href")).join() === "/events/`+again+`"`)

	// The run the redelivery started: its object's timeline (the
	// operator's own) says it handles a redelivery, who asked and why.
	var rerun string
	clustertest.Eventually(t, 60*time.Second, "the redelivery handled by a run", func(ctx context.Context) (bool, error) {
		got, err := store.GetDelivery(ctx, again)
		if err != nil || got.Outcome != archive.DeliveryHandled || len(got.Runs) == 0 {
			return false, err
		}
		rerun = got.Runs[0]
		return true, nil
	})
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/operators/"+op))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`a[href="/operators/`+op+`/objects/_/`+op+`"]`)))
	row := `[...document.querySelectorAll("#runs ~ table tr")].find(tr => tr.querySelector(` + js(`th a[href="/runs/`+rerun+`"]`) + `))`
	waitJS(tab, t, 30*time.Second, "the timeline's row of the redelivery's run names the delivery, who asked and why",
		row+` && `+row+`.querySelector(`+js(`.asked a[href="/events/`+first+`"]`)+`) && `+
			row+`.innerText.includes("redelivery of delivery `+first+`, asked by `+who+`: the deploy handler is fixed")`)

	// A delivery refused before its sender was verified: the engine says
	// why not.
	within(tab, t, 30*time.Second, chromedp.Navigate(base+"/events/"+forged))
	within(tab, t, 30*time.Second, chromedp.Click(chromedp.CSS(`button.redeliver`)))
	refused := `document.querySelector(".redelivery-answer.refused")`
	waitJS(tab, t, 60*time.Second, "the page says the engine refused it, and why",
		`!!`+refused+` && `+refused+`.innerText.includes("refused before its sender was verified (bad signature)")`)
	if got, err := store.GetDelivery(t.Context(), forged); err != nil || len(got.Redeliveries) != 0 {
		t.Errorf("the refused redelivery recorded %v (%v)", got.Redeliveries, err)
	}
}
