package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/sdktools"
)

// TestOpkitInitWritesAProjectThatPassesItsOwnTestsInEveryLanguage runs
// opkit init for each language, as a user would, then what its README
// says: opkit lint, the type checker of the language (go vet, tsc
// --strict, pyright), and opkit test of its scenario on a local control
// plane, the handler in mode Serve and again as a process per run, with
// the same results. The type checker fails once the handler reads a spec
// field the schema does not have, or misspells a result's field.
func TestOpkitInitWritesAProjectThatPassesItsOwnTestsInEveryLanguage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	if _, err := exec.LookPath("jq"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("jq is missing, and CI=true: make test installs it (the bash handler's)")
	}
	checkout, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)

	type breakage struct{ what, old, new, want string }
	for _, c := range []struct {
		lang, handler string
		// check type-checks the project; breaks each make it fail,
		// naming want.
		check  func(t *testing.T, dir string) (string, error)
		breaks []breakage
	}{
		{
			lang: "python", handler: "handler.py",
			check: func(t *testing.T, dir string) (string, error) {
				return run(t, dir, sdktools.Pyright(t), "-p", dir)
			},
			breaks: []breakage{
				{"a spec field the schema does not have", `spec["message"].upper()`, `spec["mesage"].upper()`, `"mesage"`},
				{"a misspelled result field", `"events": [`, `"evnts": [`, `"evnts"`},
			},
		},
		{
			lang: "go", handler: "main.go",
			check: func(t *testing.T, dir string) (string, error) { return run(t, dir, "go", "vet", "./...") },
			breaks: []breakage{
				{"a spec field the schema does not have", "reply := obj.Spec.Message", "reply := obj.Spec.Mesage", "Mesage"},
				{"a misspelled status field", "Status: &", "Statsu: &", "Statsu"},
			},
		},
		{
			lang: "typescript", handler: "handler.ts",
			check: func(t *testing.T, dir string) (string, error) {
				return run(t, dir, sdktools.TSC(t), "-p", dir, "--noEmit", "--strict")
			},
			breaks: []breakage{
				{"a spec field the schema does not have", "const { message, shout } = ctx.object.spec;", "const { mesage: message, shout } = ctx.object.spec;", "mesage"},
				{"a misspelled result field", "events: [", "evnts: [", "evnts"},
			},
		},
		{lang: "bash", handler: "handler.sh"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "hello-"+c.lang)
			args := []string{"init", dir, "--lang", c.lang}
			if c.lang == "go" {
				args = append(args, "--opkit-source", checkout)
			}
			if r := opkit(t, "", args...); r.code != 0 || !strings.Contains(r.stdout, "wrote "+dir) {
				t.Fatalf("opkit %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			}
			if r := opkit(t, "", "lint", filepath.Join(dir, "operator.yaml")); r.code != 0 {
				t.Errorf("opkit lint of what opkit init wrote: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if c.lang == "typescript" {
				tsBuildIsWhatInitWrote(t, dir)
			}
			if c.check != nil {
				if out, err := c.check(t, dir); err != nil {
					t.Errorf("the %s type check of what opkit init wrote: %v\n%s", c.lang, err, out)
				}
				handler := filepath.Join(dir, c.handler)
				good, err := os.ReadFile(handler)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range c.breaks {
					if !strings.Contains(string(good), b.old) {
						t.Fatalf("%s no longer holds %q", c.handler, b.old)
					}
					writeTestFile(t, handler, strings.Replace(string(good), b.old, b.new, 1))
					if out, err := c.check(t, dir); err == nil || !strings.Contains(out, b.want) {
						t.Errorf("the %s type check of a handler with %s: %v; want a failure naming %s\n%s", c.lang, b.what, err, b.want, out)
					}
				}
				writeTestFile(t, handler, string(good))
			}
			scenario := func(mode string) {
				t.Helper()
				if r := opkit(t, "", "test", "--kubeconfig", cl.KubeconfigPath(), dir); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "1 passed, 0 failed") {
					t.Errorf("opkit test of what opkit init wrote, the handler %s: exit %d\n%s%s", mode, r.code, r.stdout, r.stderr)
				}
			}
			def := filepath.Join(dir, "operator.yaml")
			text, err := os.ReadFile(def)
			if err != nil {
				t.Fatal(err)
			}
			if c.lang == "bash" {
				scenario("as a process per run")
				return
			}
			if !strings.Contains(string(text), "\n      mode: Serve\n") {
				t.Fatalf("operator.yaml does not run the %s handler in mode Serve:\n%s", c.lang, text)
			}
			scenario("in mode Serve")
			writeTestFile(t, def, strings.Replace(string(text), "\n      mode: Serve\n", "\n", 1))
			scenario("as a process per run")
		})
	}
}

// tsBuildIsWhatInitWrote checks that tsc (npm run build) makes of the
// TypeScript project exactly the JavaScript opkit init wrote, which runs
// until the handler is changed and built again.
func tsBuildIsWhatInitWrote(t *testing.T, dir string) {
	t.Helper()
	out := t.TempDir()
	if b, err := run(t, dir, sdktools.TSC(t), "-p", dir, "--outDir", out); err != nil {
		t.Fatalf("npm run build (tsc) of what opkit init wrote: %v\n%s", err, b)
	}
	for _, f := range []string{"handler.js", "api.js", "opkit.js"} {
		built, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		written, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if string(built) != string(written) {
			t.Errorf("opkit init wrote a %s that is not what tsc makes of its source:\n--- written\n%s\n--- built\n%s", f, written, built)
		}
	}
}

// run runs a command in dir, and returns its output, stdout and stderr.
func run(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
