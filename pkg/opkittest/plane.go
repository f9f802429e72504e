package opkittest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

// plane is the test binary's control plane, set by Main.
var plane *devcluster.Cluster

// Main starts a control plane, runs the tests and stops the plane. It does
// not return. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if testing.Short() {
		return m.Run()
	}
	if _, err := envScale(); err != nil {
		fmt.Fprintf(os.Stderr, "opkittest: %v\n", err)
		return 1
	}
	var err error
	plane, err = devcluster.Start(context.Background(), devcluster.Options{DevNode: true, Log: os.Stderr, StartTimeout: Scaled(devcluster.DefaultStartTimeout)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "opkittest: starting the local control plane: %v\n", err)
		return 1
	}
	measureStart(plane.ReadyAfter())
	defer plane.Stop()
	return m.Run()
}

// ControlPlane is the running plane of the test binary.
type ControlPlane struct {
	c *devcluster.Cluster
}

// Plane returns the test binary's plane. It skips the test under -short and
// fails it when Main did not start a plane.
func Plane(t testing.TB) *ControlPlane {
	t.Helper()
	if plane == nil {
		if testing.Short() {
			t.Skip("needs the local control plane; not started with -short")
		}
		t.Fatal("opkittest: no control plane: call opkittest.Main from TestMain")
	}
	return &ControlPlane{c: plane}
}

// KubeconfigPath is the path of an admin kubeconfig for the plane, for
// kubectl and other tools.
func (p *ControlPlane) KubeconfigPath() string { return p.c.KubeconfigPath() }

// RESTConfig returns a new admin (system:masters) client configuration.
func (p *ControlPlane) RESTConfig() *rest.Config { return p.c.RESTConfig() }

// Stored returns what etcd holds for the custom resource namespace/name of
// resource (its group and plural; namespace "" for a cluster-scoped one):
// the object as the API server wrote it, encoded at the storage version
// of its last write, so that a test of a storage migration can check that
// every object was rewritten (its apiVersion). It returns nil when etcd
// holds no such object.
func (p *ControlPlane) Stored(ctx context.Context, resource schema.GroupResource, namespace, name string) ([]byte, error) {
	key := "/registry/" + resource.Group + "/" + resource.Resource + "/"
	if namespace != "" {
		key += namespace + "/"
	}
	return p.c.EtcdGet(ctx, key+name)
}
