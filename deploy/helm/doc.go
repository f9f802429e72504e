// Package helm tests the Helm chart deploy/helm/opkit with Helm's own Go
// library: no helm binary is needed. Render gives what helm install
// applies of it; the command render (go run ./render) prints that for
// the rehearsal on the local plane (internal/manifests/rehearsal), which
// installs the chart's objects as it installs opkit generate manifests'.
//
// It is a module of its own, so that Helm and its dependencies (kubectl's
// libraries, OCI registries, ...) stay out of opkit's: opkit's go.mod
// moves to a new Kubernetes minor when its local control plane does, and
// Helm's library follows Kubernetes a minor at a time; here, the chart's
// test may pin the Helm that matches. make test runs it (make helmchart).
//
// What it checks: the chart passes Helm's lint; rendered with the values
// opkit generate values writes for the examples' definitions, it gives
// the objects opkit generate manifests gives for them (compared as
// parsed objects); without rules, or with a wildcard, it refuses to
// render; and its crds/ holds the Operator CRD that api/v1alpha1 builds.
package helm
