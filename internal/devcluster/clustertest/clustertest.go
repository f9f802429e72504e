// Package clustertest is opkit's own test helpers over the public package
// pkg/opkittest: the plane, namespaces, clients and Eventually are
// opkittest's (same contract), and this package adds what only opkit's
// tests need — kubectl, a freezable TCP proxy, and process checks for the
// dev node.
//
//	func TestMain(m *testing.M) { clustertest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		env := clustertest.New(t)
//		...
//	}
//
// New code that needs nothing of the extras may use opkittest directly.
package clustertest

import (
	"flag"
	"strconv"
	"testing"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

// Scheme is opkittest.Scheme, the scheme of Env.Client.
var Scheme = opkittest.Scheme

// Env is one test's view of the plane (opkittest.Env).
type Env = opkittest.Env

// Main starts a control plane, runs the tests and stops the plane (see
// opkittest.Main). It does not return.
func Main(m *testing.M) { opkittest.Main(m) }

// Cluster returns the package's running plane (see opkittest.Plane).
func Cluster(t testing.TB) *opkittest.ControlPlane {
	t.Helper()
	return opkittest.Plane(t)
}

// New returns an Env with a fresh namespace named after the test (see
// opkittest.New).
func New(t testing.TB) *Env {
	t.Helper()
	return opkittest.New(t)
}

// DefaultParallel sets go test's -parallel to n unless the command line
// set it: how many of a package's t.Parallel tests run at once. Most of an
// integration test's time is waiting (for the plane, an outage, a
// schedule, a handler), not CPU, so a package of such tests keeps a 2-core
// machine busy only with more of them at once than GOMAXPROCS, go test's
// default. Call it in TestMain, before Main or m.Run; it parses the flags.
func DefaultParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
