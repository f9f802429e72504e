package aggregate_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/opkit-dev/opkit/internal/aggregate"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestSubjectAccessReviewsFollowRBACAndKeepAnAnswerForItsTTL asks the
// plane whether a user bound to a Role in one namespace may list there
// and elsewhere, then removes the binding: the answer kept serves until
// its TTL, and the API server's is asked again after it; past Size, the
// oldest answer is asked again at once.
func TestSubjectAccessReviewsFollowRBACAndKeepAnAnswerForItsTTL(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "widget-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"sar.opkit.dev"}, Resources: []string{"widgets", "widgets/log"}, Verbs: []string{"get", "list"}}},
	}
	if _, err := cs.RbacV1().Roles(env.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "alice"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}},
	}
	if _, err := cs.RbacV1().RoleBindings(env.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	attrs := func(ns, verb, sub string) aggregate.Attributes {
		return aggregate.Attributes{
			User: aggregate.User{Name: "alice", Groups: []string{"system:authenticated", "devs"}, Extra: map[string][]string{"scopes": {"x"}}},
			Verb: verb, Namespace: ns, Group: "sar.opkit.dev", Version: "v1", Resource: "widgets", Subresource: sub,
		}
	}
	fresh := aggregate.NewSubjectAccessReviews(cs, aggregate.SubjectAccessReviewsOptions{TTL: time.Nanosecond})
	clock := clocktesting.NewFakePassiveClock(time.Now())
	kept := aggregate.NewSubjectAccessReviews(cs, aggregate.SubjectAccessReviewsOptions{TTL: 5 * time.Second, Size: 2, Clock: clock})

	clustertest.Eventually(t, 30*time.Second, "alice may list widgets in her namespace", func(ctx context.Context) (bool, error) {
		ok, _, err := fresh.Authorize(ctx, attrs(env.Namespace, "list", ""))
		return ok, err
	})
	for _, a := range []aggregate.Attributes{attrs(env.Namespace, "list", ""), attrs(env.Namespace, "get", "log")} {
		if ok, reason, err := kept.Authorize(ctx, a); err != nil || !ok {
			t.Errorf("Authorize(%+v) = %v, %q, %v; want allowed", a, ok, reason, err)
		}
	}
	if ok, _, err := kept.Authorize(ctx, attrs("kube-system", "list", "")); err != nil || ok {
		t.Errorf("alice may list widgets in kube-system: %v, %v; want refused", ok, err)
	}
	if ok, _, err := kept.Authorize(ctx, attrs(env.Namespace, "watch", "")); err != nil || ok {
		t.Errorf("alice may watch widgets, which her Role does not grant: %v, %v; want refused", ok, err)
	}

	// Kept are now the two last answers (Size 2): kube-system's list and
	// the watch. The binding goes.
	if err := cs.RbacV1().RoleBindings(env.Namespace).Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the API server refuses alice once her binding is gone", func(ctx context.Context) (bool, error) {
		ok, _, err := fresh.Authorize(ctx, attrs(env.Namespace, "get", ""))
		return !ok, err
	})
	// The first answers were dropped past Size: asked again, refused.
	if ok, reason, err := kept.Authorize(ctx, attrs(env.Namespace, "list", "")); err != nil || ok {
		t.Errorf("Authorize of an answer dropped past Size = %v, %q, %v; want refused, asked again", ok, reason, err)
	}
	// That refusal is kept for its TTL, whatever RBAC says meanwhile, for
	// the same user whatever the order of its groups; then asked again.
	clock.SetTime(clock.Now().Add(time.Second))
	if _, err := cs.RbacV1().RoleBindings(env.Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "alice"}, RoleRef: binding.RoleRef, Subjects: binding.Subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the API server allows alice again", func(ctx context.Context) (bool, error) {
		ok, _, err := fresh.Authorize(ctx, attrs(env.Namespace, "list", ""))
		return ok, err
	})
	if ok, _, err := kept.Authorize(ctx, attrs(env.Namespace, "list", "")); err != nil || ok {
		t.Errorf("a refusal kept for 5s was asked again after 1s: allowed %v, %v", ok, err)
	}
	reordered := attrs(env.Namespace, "list", "")
	reordered.User.Groups = []string{"devs", "system:authenticated"}
	if ok, _, err := kept.Authorize(ctx, reordered); err != nil || ok {
		t.Errorf("the same user with its groups in another order was asked again: allowed %v, %v; want the kept refusal", ok, err)
	}
	clock.SetTime(clock.Now().Add(5 * time.Second))
	if ok, _, err := kept.Authorize(ctx, attrs(env.Namespace, "list", "")); err != nil || !ok {
		t.Errorf("past its TTL, the kept refusal is not asked again: allowed %v, %v", ok, err)
	}
}

// TestCurrentRequestHeaderRefusesUntilReadThenChecksTheFrontProxy: before
// its first read it can check nobody (ErrNoRequestHeader); once read, a
// request without the front proxy's certificate is not believed.
func TestCurrentRequestHeaderRefusesUntilReadThenChecksTheFrontProxy(t *testing.T) {
	env := clustertest.New(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	h := aggregate.NewCurrentRequestHeader(cs, time.Hour)
	r := httptest.NewRequest("GET", "/apis", nil)
	r.Header.Set("X-Remote-User", "system:admin")
	if _, err := h.Authenticate(r); !errors.Is(err, aggregate.ErrNoRequestHeader) {
		t.Errorf("Authenticate before a read = %v, want ErrNoRequestHeader", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, func(err error) { t.Errorf("reading: %v", err) }) }()
	clustertest.Eventually(t, 30*time.Second, "the first read", func(context.Context) (bool, error) {
		_, err := h.Authenticate(r)
		return !errors.Is(err, aggregate.ErrNoRequestHeader), nil
	})
	if _, err := h.Authenticate(r); !errors.Is(err, aggregate.ErrNotFrontProxy) {
		t.Errorf("Authenticate of a request without a client certificate = %v, want ErrNotFrontProxy", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
