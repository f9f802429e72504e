// Package opkittest tests operators against a real Kubernetes API: one
// local control plane per test binary, and for each test its own namespace,
// clients, and, when asked, an opkit engine running the operator
// definitions under test with an archive of their handler runs.
//
// Use it from TestMain, then call New in each test:
//
//	func TestMain(m *testing.M) { opkittest.Main(m) }
//
//	func TestPrinterMakesItsPod(t *testing.T) {
//		env := opkittest.New(t)
//		eng := env.RunOperators(t, "operator.yaml")
//		// create a custom resource with env.Client, then:
//		opkittest.Eventually(t, time.Minute, "the child exists", func(ctx context.Context) (bool, error) { ... })
//		eng.WaitRun(t, time.Minute, opkittest.Query{Name: "x", Handler: "greet", Outcome: opkittest.Succeeded})
//	}
//
// The plane is etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler as processes of the host, with a dev node: Pods that
// tolerate the taint opkit.dev/dev-node run as host processes (the image is
// ignored).
//
// # Contract
//
//   - Main starts the plane before any test runs and stops it after the last
//     one, also when tests panic or fail. If the plane cannot start, Main
//     prints why and exits non-zero: it never skips, so a broken machine or
//     CI runner fails loudly.
//   - The first run on a machine builds the plane's binaries into the user
//     cache directory (several minutes); `opkit cluster build` does it ahead.
//   - With `go test -short`, Main starts no plane and New skips the test, so
//     pure unit tests in the same package still run.
//   - Each test's namespace is deleted when the test ends, and its engine is
//     stopped before that. Everything else (CRDs, cluster-scoped objects) is
//     shared by the binary's tests: tests must not assume an empty cluster.
//   - Engine's archive is SQLite in the test's t.TempDir.
//
// # Types from opkit's internals
//
// Run, Query and Outcome are aliases of the archive's types, so that a test
// reads runs exactly as the console and `opkit runs` show them; their
// fields are the archive's, and a newer opkit may add some.
//
// # Not yet here
//
// Sending webhook deliveries to an operator's event sources, a fake clock
// for schedules and retries, and running scenario files (a planned
// `opkit test`) come later.
package opkittest
