// Package clustertest gives tests a real Kubernetes API: one local control
// plane (package devcluster) per test binary, and for each test its own
// namespace and a ready client.
//
// Use it from TestMain, then call New in each test:
//
//	func TestMain(m *testing.M) { clustertest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		env := clustertest.New(t)
//		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: env.Namespace}}
//		if err := env.Client.Create(t.Context(), cm); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// The plane has a dev node (package devnode): Pods that tolerate the taint
// opkit.dev/dev-node run as processes of the host.
//
// Contract: Main starts the plane before any test runs and stops it after the
// last one, also when tests panic or fail; if the plane cannot start, Main
// prints why and exits non-zero — it never skips. The first run on a machine
// builds the plane's binaries (several minutes; `opkit cluster build` or
// `make test` does it ahead). With `go test -short`, Main runs no plane and New
// skips the test, so pure unit tests in the same package still run. A
// namespace is deleted when its test ends; the plane's state is otherwise
// shared by the package's tests, so tests must not assume an empty cluster.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster"
)

// cluster is the package's plane, set by Main.
var cluster *devcluster.Cluster

// Scheme holds the built-in Kubernetes types, apiextensions/v1 and
// opkit.dev/v1alpha1; it is the
// scheme of Env.Client.
var Scheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(Scheme)
	_ = apiextensionsv1.AddToScheme(Scheme)
	_ = v1alpha1.AddToScheme(Scheme)
}

// Main starts a control plane, runs the tests and stops the plane. It does
// not return.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if testing.Short() {
		return m.Run()
	}
	var err error
	cluster, err = devcluster.Start(context.Background(), devcluster.Options{DevNode: true, Log: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: starting the local control plane: %v\n", err)
		return 1
	}
	defer cluster.Stop()
	return m.Run()
}

// Cluster returns the package's running plane. It fails the test when Main
// did not start one.
func Cluster(t testing.TB) *devcluster.Cluster {
	t.Helper()
	if cluster == nil {
		if testing.Short() {
			t.Skip("needs the local control plane; not started with -short")
		}
		t.Fatal("clustertest: no control plane: call clustertest.Main from TestMain")
	}
	return cluster
}

// Env is one test's view of the plane.
type Env struct {
	// Namespace is created for the test, with its default service account
	// ready, and deleted when the test ends.
	Namespace string
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Client is a controller-runtime client with Scheme, reading directly
	// from the API server (no cache).
	Client client.Client
}

// New returns an Env with a fresh namespace named after the test.
func New(t testing.TB) *Env {
	t.Helper()
	cfg := Cluster(t).RESTConfig()
	cfg.QPS = -1 // a test may create many objects: no client-side rate limit
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatalf("clustertest: creating a client: %v", err)
	}
	ns := namespaceName(t.Name())
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatalf("clustertest: creating namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled during cleanup.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clustertest: deleting namespace %s: %v", ns, err)
		}
	})
	// Pods cannot be created until the service-account controller has made
	// "default" in the namespace.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("clustertest: waiting for the default service account in %s: %v", ns, err)
	}
	return &Env{Namespace: ns, Config: cfg, Client: c}
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
