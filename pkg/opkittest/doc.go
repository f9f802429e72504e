// Package opkittest tests operators against a real Kubernetes API: one
// local control plane per test binary, and for each test its own namespace,
// clients, and, when asked, an opkit engine running the operator
// definitions under test with an archive of their handler runs. A test
// can stub handlers, move the engine's clock and send webhook deliveries:
// everything a scenario of `opkit test` does, in Go.
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
//   - An engine acts in its test's namespace alone, so that tests running
//     the same operators in parallel (t.Parallel) never act on each
//     other's objects: it sees no object elsewhere, a watch (spec.watch)
//     watches the test's namespace whatever namespaces its definition
//     names, and an operator whose custom resource or watched kind is
//     cluster-scoped is refused. Run such an operator with
//     EngineOptions{AllNamespaces: true}, in a test that no other test
//     running it runs in parallel with. Operator-wide schedules (for no
//     object) run in every engine, each recording them in its own archive.
//   - The pods of job handlers tolerate the dev node's taint, so they run.
//   - Every wait this package makes (Eventually, Engine.WaitRun, New's,
//     Main's for the plane) is the duration given times the binary's wait
//     factor (Scale): the larger of $OPKIT_TEST_TIMEOUT_SCALE and how much
//     slower than on a quiet machine the plane started (at most 6). A
//     wait that its condition ends is no longer for it. Main fails when
//     $OPKIT_TEST_TIMEOUT_SCALE is set to anything but a number from 1 to
//     100.
//
// # Stubs, the clock and deliveries
//
// Engine.Stub replaces a handler's action by made-up results (a failure,
// a result, a log line), one per run, the last repeating; the runs are
// otherwise real: archived, retried by the handler's policy, their
// status patches written. Engine.Unstub gives the action back. Set a stub
// before creating the objects whose runs it should answer.
//
// With EngineOptions{FakeClock: true} the engine's schedules, requeues
// and retry delays follow a fake clock that only Engine.Advance moves:
// what comes due runs at once. Advance first brings the clock up to the
// real time if it lags, because objects' creation times, from which an
// `every` schedule counts, are the API server's real time.
//
// Engine.Send posts a webhook delivery to an operator's source, signed
// with the secret of the source's Secret (which it creates, with a random
// value, when it is missing), and returns the engine's HTTP status and
// answer. Env.Retry sets the annotation opkit.dev/retry, as `opkit retry`
// does.
//
// # Scenarios: the same without Go
//
// `opkit test` runs the same kind of test from YAML scenario files
// (*.test.yaml) next to the operator: apply, patch, stub, advance, send,
// expect (docs/scenarios.md, docs/testing.md). This package is for what
// a scenario cannot say: Go logic, typed clients, loops, helpers of your
// own.
//
// # Types from opkit's internals
//
// Run, Query and Outcome are aliases of the archive's types, so that a test
// reads runs exactly as the console and `opkit runs` show them; their
// fields are the archive's, and a newer opkit may add some. StubResult,
// Delivery and DeliveryAnswer are this package's own.
package opkittest
