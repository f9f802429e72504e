package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corpus is a before.yaml or after.yaml of internal/compat's corpus.
func corpus(kind, name, which string) string {
	return filepath.Join("..", "compat", "testdata", kind, name, which+".yaml")
}

// lintRun runs opkit lint with args and returns its exit code and output.
func lintRun(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(append([]string{"lint"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestLintPrintsEachBreakingChangeAtItsLineAndExits1(t *testing.T) {
	for _, c := range []struct{ name, line string }{
		{"tighter-bounds", ":16: versions[v1].spec.text: breaking: maxLength falls from 256 to 64: values beyond it are refused from now on"},
		{"removed-field", ":13: versions[v1].spec.text: breaking: removed: the API server drops it (pruning)"},
		{"new-required-field", ":18: versions[v1].spec.region: breaking: a new required field"},
		{"version-no-longer-served", ":25: versions[v2].served: breaking: v2 is no longer served"},
	} {
		before, after := corpus("breaking", c.name, "before"), corpus("breaking", c.name, "after")
		code, stdout, stderr := lintRun(after, "--against", before)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\nstdout: %s\nstderr: %s", c.name, code, stdout, stderr)
		}
		if want := after + c.line; !strings.HasPrefix(stdout, want) {
			t.Errorf("%s: stdout does not start with %q:\n%s", c.name, want, stdout)
		}
		if want := "opkit: 1 breaking change, 0 warnings in 1 definition against " + before + ": opkit run and opkit dev refuse them unless --allow-breaking\n"; stderr != want {
			t.Errorf("%s: stderr %q, want %q", c.name, stderr, want)
		}
	}
}

func TestLintPassesSafeChangesAndPrintsWarningsWithExit0(t *testing.T) {
	before, after := corpus("safe", "new-optional-field", "before"), corpus("safe", "new-optional-field", "after")
	code, stdout, stderr := lintRun(after, "--against", before)
	if want := "0 breaking changes, 0 warnings in 1 definition against " + before + "\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("a safe change: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	before, after = corpus("warning", "new-validation-rule", "before"), corpus("warning", "new-validation-rule", "after")
	code, stdout, _ = lintRun(after, "--against", before)
	if want := after + `:20: versions[v1].spec.owner: warning: a new validation rule "self.size() <= 63"`; code != 0 || !strings.HasPrefix(stdout, want) ||
		!strings.HasSuffix(stdout, "0 breaking changes, 1 warning in 1 definition against "+before+"\n") {
		t.Errorf("a warning: exit %d, stdout:\n%s\nwant 0, %q and a summary", code, stdout, want)
	}
}

func TestLintWithoutAPreviousVersionChecksThatTheFilesLoad(t *testing.T) {
	good := corpus("safe", "new-optional-field", "after")
	if code, stdout, _ := lintRun(good); code != 0 || !strings.Contains(stdout, "1 definition loads: no errors") {
		t.Errorf("opkit lint of a good file: exit %d, stdout %q", code, stdout)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	data := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: bad}\nspec:\n  resource:\n    group: nodot\n    kind: Bad\n    versions: [{name: v1}]\n"
	if err := os.WriteFile(bad, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	want := bad + `:6: spec.resource.group: "nodot" is not an API group`
	if code, _, stderr := lintRun(bad); code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("opkit lint of a bad file: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
	if code, _, stderr := lintRun(good, "--against", bad); code != 2 || !strings.Contains(stderr, "--against "+bad+" does not load") || !strings.Contains(stderr, want) {
		t.Errorf("opkit lint --against a bad file: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

func TestLintMisusedExits2(t *testing.T) {
	good := corpus("safe", "new-optional-field", "after")
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "name at least one definition file"},
		{[]string{good, "--against", good, "--against-cluster"}, "choose one"},
		{[]string{good, "--kubeconfig", "kc"}, "--kubeconfig is read only with --against-cluster"},
		{[]string{good, "--nosuch"}, "unknown flag: --nosuch"},
	} {
		if code, _, stderr := lintRun(c.args...); code != 2 || !strings.Contains(stderr, c.says) {
			t.Errorf("opkit lint %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.says)
		}
	}
}

func TestLintWarnsOfABareOnAtItsLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tick.yaml")
	manifest := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: tick}\nspec:\n  handlers:\n  - name: tick\n    on: [schedule]\n    schedule: {every: 1m}\n    exec: {command: [/bin/true]}\n"
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := lintRun(file)
	want := "warning: " + file + `:7: spec.handlers[0].on: kubectl and other YAML 1.1 tools read a bare on as true: write "on":` + "\n"
	if code != 0 || !strings.HasPrefix(stdout, want) || !strings.Contains(stdout, "1 definition loads: no errors") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant 0, and first %q", code, stdout, stderr, want)
	}
}

func TestLintFindsNothingToWarnOfInTheExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/*/operator.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("examples: %v %v", files, err)
	}
	code, stdout, stderr := lintRun(files...)
	if code != 0 || strings.Contains(stdout, "warning") {
		t.Errorf("opkit lint of the examples: exit %d\n%s%s", code, stdout, stderr)
	}
}
