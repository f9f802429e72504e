// Package layers states the layers of opkit's packages, as
// docs/architecture.md ("The layers") and the package docs say them, and
// its test checks them against the import graph that `go list -deps`
// reports: a pure package (cause, statemachine, definition, compat,
// jsondepth, the conformance model) reaches no engine and imports no
// Kubernetes client and no clock; the API types import nothing of
// internal/; executors know nothing of the engine; the engine never
// imports the console, nor the console the engine; the archive sits below
// all that writes it; the parts carved out of the engine know nothing of
// it; the composition root (package stack) is imported by the commands
// and the test helpers alone. The rules are in layers_test.go, each with
// the sentence it enforces; packages_test.go checks that
// docs/architecture.md names every package. The package has no code.
//
// Why a test and not golangci-lint's depguard: depguard checks each
// file's own imports against lists, which says "cause imports
// internal/executor" but not that cause reaches the engine through
// another package, and it cannot name the chain that does. The test
// follows the graph: a rule on our own packages holds transitively
// (through any package in between), and a failure names the whole chain,
// e.g. internal/cause -> internal/definition -> internal/engine. Rules on
// third-party packages (client-go, controller-runtime, the clock) bind
// what a package imports itself, since definition's CEL libraries
// reach client-go without definition ever calling it. It runs with go test,
// in CI, like any test.
package layers
