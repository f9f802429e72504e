package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// serve starts a console with auth on loopback for the test.
func serve(t *testing.T, f *fixture, auth console.Auth) string {
	t.Helper()
	return serveWith(t, console.Options{Archive: f.store, Config: f.cfg, Auth: auth})
}

// serveWith starts a console on loopback for the test.
func serveWith(t *testing.T, opts console.Options) string {
	t.Helper()
	srv, err := console.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func annotations(t *testing.T, env *clustertest.Env, ns, name string) map[string]string {
	t.Helper()
	obj := chore(ns, name, "", "")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj.GetAnnotations()
}

func TestTokenAuthRefusesRequestsWithoutTheToken(t *testing.T) {
	f, env := withChore(t, "locked", "x")
	const token = "0123456789abcdef-console"
	base := serve(t, f, console.Auth{Token: token})
	objURL := base + "/operators/chores/objects/" + env.Namespace + "/locked"

	for what, r := range map[string]response{
		"a page without a token":  do(t, http.MethodGet, objURL, nil),
		"a page with a bad token": do(t, http.MethodGet, objURL, nil, "Authorization", "Bearer wrong"),
		"live without a token":    do(t, http.MethodGet, base+"/live?path=/failures", nil),
		"a log without a token":   do(t, http.MethodGet, base+"/runs/0000000000zzzzzzzz/log", nil),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", what, r.status)
		}
	}
	// An action without a valid token is refused and changes nothing, even
	// with a CSRF token taken from a signed-in page.
	page := get(t, objURL, "Authorization", "Bearer "+token)
	csrf := csrfField.FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the signed-in timeline")
	}
	for what, r := range map[string]response{
		"no token":  do(t, http.MethodPost, objURL+"/pause", url.Values{"csrf": {csrf[1]}}),
		"bad token": do(t, http.MethodPost, objURL+"/pause", url.Values{"csrf": {csrf[1]}}, "Authorization", "Bearer wrong"),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("pause with %s: %d, want 403", what, r.status)
		}
	}
	if _, ok := annotations(t, env, env.Namespace, "locked")[v1alpha1.PauseAnnotation]; ok {
		t.Fatal("a refused action paused the object")
	}

	// The sign-in page sets a cookie that works like the header.
	if r := do(t, http.MethodPost, base+"/login", url.Values{"token": {"wrong"}}); r.status != http.StatusForbidden {
		t.Errorf("sign-in with a wrong token: %d", r.status)
	}
	r := do(t, http.MethodPost, base+"/login", url.Values{"token": {token}})
	cookie := r.header.Get("Set-Cookie")
	if r.status != http.StatusSeeOther || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("sign-in: %d, cookie %q", r.status, cookie)
	}
	cookieValue := strings.SplitN(strings.SplitN(cookie, ";", 2)[0], "=", 2)[1]
	r = do(t, http.MethodPost, objURL+"/pause", url.Values{"csrf": {csrf[1]}}, "Cookie", "opkit_token="+cookieValue)
	if r.status != http.StatusSeeOther {
		t.Fatalf("pause when signed in: %d\n%s", r.status, r.body)
	}
	value, ok := annotations(t, env, env.Namespace, "locked")[v1alpha1.PauseAnnotation]
	if !ok {
		t.Fatal("the signed-in pause did not pause the object")
	}
	// The pause names who paused, for the engine's record.
	if p := v1alpha1.ReadRequest(value); p.By != "token" || p.At == "" {
		t.Errorf("the console's pause reads %q, want it to name the signed-in user (token) and when", value)
	}
	// So does its retry, which the engine records with who asked.
	r = do(t, http.MethodPost, objURL+"/retry", url.Values{"csrf": {csrf[1]}}, "Cookie", "opkit_token="+cookieValue)
	if r.status != http.StatusSeeOther {
		t.Fatalf("retry when signed in: %d\n%s", r.status, r.body)
	}
	clustertest.Eventually(t, time.Minute, "the console's retry recorded by the engine", func(ctx context.Context) (bool, error) {
		page, err := f.store.List(ctx, archive.Query{Namespace: env.Namespace, Name: "locked", Handler: v1alpha1.RetryHandler})
		return err == nil && len(page.Runs) == 1 && page.Runs[0].Actor == "token", err
	})
}

func TestKubernetesAuthFollowsRBAC(t *testing.T) {
	f, env := withChore(t, "watched", "x")
	base := serve(t, f, console.Auth{Kubernetes: true})
	objURL := base + "/operators/chores/objects/" + env.Namespace + "/watched"

	// A viewer may get chores in the namespace, not patch them.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "viewer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "chore-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"console.example.com"}, Resources: []string{"chores"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "chore-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "chore-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: env.Namespace}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	// RBAC takes effect in the API server a moment after the binding.
	clustertest.Eventually(t, 30*time.Second, "the viewer's Role in effect", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + env.Namespace + ":viewer",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "console.example.com", Resource: "chores", Verb: "get", Namespace: env.Namespace},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	cs := kubernetes.NewForConfigOrDie(env.Config)
	tr, err := cs.CoreV1().ServiceAccounts(env.Namespace).CreateToken(t.Context(), "viewer", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viewer := "Bearer " + tr.Status.Token

	page := get(t, objURL, "Authorization", viewer)
	mustContain(t, "the viewer's timeline", page, "system:serviceaccount:"+env.Namespace+":viewer")
	csrf := csrfField.FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the viewer's timeline")
	}
	if r := do(t, http.MethodPost, objURL+"/retry", url.Values{"csrf": {csrf[1]}}, "Authorization", viewer); r.status != http.StatusForbidden {
		t.Errorf("retry by a viewer: %d, want 403", r.status)
	} else {
		mustContain(t, "the refusal", r.body, "may not patch chores.console.example.com")
	}
	if _, ok := annotations(t, env, env.Namespace, "watched")[v1alpha1.RetryAnnotation]; ok {
		t.Error("a refused retry set the annotation")
	}
	// Nor may the viewer pause, resume, or run a run again: each is
	// refused for want of patch, and writes nothing.
	run := waitRuns(t, f, env.Namespace, "watched", archive.Succeeded, 1)[0]
	for what, r := range map[string]response{
		"pause":     do(t, http.MethodPost, objURL+"/pause", url.Values{"csrf": {csrf[1]}}, "Authorization", viewer),
		"resume":    do(t, http.MethodPost, objURL+"/resume", url.Values{"csrf": {csrf[1]}}, "Authorization", viewer),
		"Run again": do(t, http.MethodPost, base+"/runs/"+run.ID+"/rerun", url.Values{"csrf": {csrf[1]}, "reason": {"curious"}}, "Authorization", viewer),
	} {
		if r.status != http.StatusForbidden || !strings.Contains(r.body, "may not patch chores.console.example.com") {
			t.Errorf("%s by a viewer: %d, want 403 naming patch\n%s", what, r.status, r.body)
		}
	}
	for _, a := range []string{v1alpha1.PauseAnnotation, v1alpha1.RerunAnnotation} {
		if _, ok := annotations(t, env, env.Namespace, "watched")[a]; ok {
			t.Errorf("a refused action set %s", a)
		}
	}
	// Every namespace is beyond the viewer: the operator list is empty.
	if page := get(t, base+"/", "Authorization", viewer); strings.Contains(page, `href="/operators/chores"`) {
		t.Error("the overview shows an operator the viewer may not list in every namespace")
	}
	for what, r := range map[string]response{
		"no token":        do(t, http.MethodGet, objURL, nil),
		"a forged token":  do(t, http.MethodGet, objURL, nil, "Authorization", "Bearer not.a.jwt"),
		"another project": do(t, http.MethodGet, base+"/operators/chores/objects/kube-system/watched", nil, "Authorization", viewer),
	} {
		if r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", what, r.status)
		}
	}
}

// serviceAccount makes a ServiceAccount in env's namespace that may get
// and list the resources there, and returns its bearer token as an
// Authorization header's value.
func serviceAccount(t *testing.T, env *clustertest.Env, name string, groups, resources []string) string {
	t.Helper()
	return serviceAccountMay(t, env, name, groups, resources, "get", "list")
}

// serviceAccountMay is serviceAccount with the verbs given.
func serviceAccountMay(t *testing.T, env *clustertest.Env, name string, groups, resources []string, verbs ...string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: groups, Resources: resources, Verbs: verbs}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: env.Namespace}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Eventually(t, 30*time.Second, name+"'s Role in effect", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + env.Namespace + ":" + name,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: groups[0], Resource: resources[0], Verb: verbs[len(verbs)-1], Namespace: env.Namespace},
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

// TestEveryPageSaysWhenTheEngineBesideItIsAStandby: a console beside a
// standby engine tells, on every page, that the engine does not act and
// who does; beside the leader it says nothing of it.
func TestEveryPageSaysWhenTheEngineBesideItIsAStandby(t *testing.T) {
	f := start(t)
	why := "This engine is a standby: web-1_ab12 holds the Lease opkit/opkit-engine (renewed 2026-11-25T04:00:00Z) and acts"
	var standby atomic.Bool
	standby.Store(true)
	url := serveWith(t, console.Options{Archive: f.store, Config: f.cfg, Standby: func() string {
		if standby.Load() {
			return why
		}
		return ""
	}})
	for _, path := range []string{"/", "/failures", "/events"} {
		if page := get(t, url+path); !strings.Contains(page, "web-1_ab12 holds the Lease opkit/opkit-engine") {
			t.Errorf("%s does not say the engine is a standby:\n%s", path, page)
		}
	}
	standby.Store(false)
	if page := get(t, url+"/"); strings.Contains(page, "standby") {
		t.Errorf("the leader's console says standby:\n%s", page)
	}
}
