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
