// Package sdktools finds, for tests, the type checkers the handler SDKs
// are checked with: TypeScript's compiler (tsc) and pyright, which
// `make sdktools` installs from the npm registry into opkit's cache (the
// Makefile's TYPESCRIPT_VERSION and PYRIGHT_VERSION) and `make test`
// exports as OPKIT_TSC and OPKIT_PYRIGHT.
//
// Contract: a test that needs a checker that is not there fails when
// CI=true (a CI machine must have it: make test installs it), and is
// skipped elsewhere with the command that installs it.
package sdktools

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/sdk"
)

// The versions make sdktools installs; the Makefile says the same.
const (
	TypeScriptVersion = sdk.TypeScriptVersion
	PyrightVersion    = "1.1.414"
)

// TSC is the path of TypeScript's compiler.
func TSC(t testing.TB) string { return find(t, "OPKIT_TSC", "tsc") }

// Pyright is the path of pyright.
func Pyright(t testing.TB) string { return find(t, "OPKIT_PYRIGHT", "pyright") }

// Node is the path of Node.js, which both run on and the TypeScript
// SDK's handlers run with.
func Node(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node (Node.js 20 or later)", "apt-get install nodejs")
	}
	return path
}

// Python is the path of python3 (3.11 or later), the Python SDK's.
func Python(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		missing(t, "python3 (3.11 or later)", "apt-get install python3")
	}
	return path
}

func find(t testing.TB, env, name string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		cache, err := devcluster.DefaultCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(cache, "tools", "sdk-typescript-"+TypeScriptVersion+"-pyright-"+PyrightVersion, "node_modules", ".bin", name)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		missing(t, name+" at "+path, "make sdktools")
	}
	Node(t)
	return path
}

func missing(t testing.TB, what, install string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing, and CI=true: make test installs it (%s)", what, install)
	}
	t.Skipf("%s is missing: %s installs it", what, install)
}
