// Package crdtest holds the tests of the CRDs internal/definition builds
// that need a real API server: the local control plane's, started once
// for the package (clustertest.Main). It has no code of its own.
package crdtest
