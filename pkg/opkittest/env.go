package opkittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Scheme holds the built-in Kubernetes types, apiextensions/v1 and
// opkit.dev/v1alpha1; it is the scheme of Env.Client. Custom resources of
// the operators under test are read as unstructured.Unstructured, or add
// their Go types to it in TestMain.
var Scheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(Scheme)
	_ = apiextensionsv1.AddToScheme(Scheme)
	_ = v1alpha1.AddToScheme(Scheme)
}

// Env is one test's view of the plane.
type Env struct {
	// Namespace is created for the test, with its default service account
	// ready, and deleted when the test ends.
	Namespace string
	// Config is an admin (system:masters) client configuration without a
	// client-side rate limit.
	Config *rest.Config
	// Client is a controller-runtime client with Scheme, reading directly
	// from the API server (no cache).
	Client client.Client
}

// New returns an Env with a fresh namespace named after the test. It skips
// the test under -short.
func New(t testing.TB) *Env {
	t.Helper()
	cfg := Plane(t).RESTConfig()
	cfg.QPS = -1 // a test may create many objects: no client-side rate limit
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatalf("opkittest: creating a client: %v", err)
	}
	ns := namespaceName(t.Name())
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatalf("opkittest: creating namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled during cleanup.
		ctx, cancel := context.WithTimeout(context.Background(), Scaled(30*time.Second))
		defer cancel()
		err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("opkittest: deleting namespace %s: %v", ns, err)
		}
	})
	// Pods cannot be created until the service-account controller has made
	// "default" in the namespace.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("opkittest: waiting for the default service account in %s: %v", ns, err)
	}
	return &Env{Namespace: ns, Config: cfg, Client: c}
}

// Retry asks the engine to run obj's handlers again, as `opkit retry`
// and the console's Retry do: it sets the annotation opkit.dev/retry on
// obj (a custom resource of an operator under test), which clears its
// handlers' failed attempts and its Stalled condition; the engine removes
// the annotation and runs what is due. obj is updated with the object as
// patched; a patch that fails fails the test.
func (env *Env) Retry(t testing.TB, obj client.Object) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.RetryAnnotation: time.Now().UTC().Format(time.RFC3339Nano),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("opkittest: asking for a retry of %s/%s: %v", obj.GetNamespace(), obj.GetName(), err)
	}
}

// Eventually polls cond every 100ms until it returns true, and fails the
// test with what and the last error when within, scaled (Scaled), passes
// first. An error from cond ends the wait at once. within is how long the
// condition may take on a quiet machine.
func Eventually(t testing.TB, within time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, Scaled(within), true, cond); err != nil {
		t.Fatalf("%s (waited %s): %v", what, scaledText(within), err)
	}
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// namespaceName turns a test name into a unique DNS label.
func namespaceName(test string) string {
	name := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(test), "-"), "-")
	if len(name) > 50 {
		name = strings.TrimRight(name[:50], "-")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}
