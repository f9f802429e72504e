// Package sdk holds opkit's handler SDKs for Python (python/) and
// TypeScript (typescript/): files that opkit init copies into a new
// project, each with no dependency beyond its language's standard
// library. Go's SDK is the package pkg/handler. The tests here run each
// SDK's own tests and type-check handlers written on it.
package sdk
