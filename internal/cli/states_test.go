package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const databaseExample = "../../examples/database/operator.yaml"

// statesRun runs opkit states with args and returns its exit code and
// output.
func statesRun(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(append([]string{"states"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStatesPrintsTheDatabaseExampleAsTextAndAsDot(t *testing.T) {
	code, stdout, stderr := statesRun(databaseExample)
	head := "Operator database: the life cycle of each Database.demo.example.com, 6 states\n\nProvisioning [initial]\n  -> Ready (Provisioned) when "
	if code != 0 || !strings.HasPrefix(stdout, head) || !strings.Contains(stdout, "\nNeedsAttention [needs a person]\n  asks: The new version failed its checks.") || stderr != "" {
		t.Errorf("opkit states: exit %d\nstdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr = statesRun(databaseExample, "--format", "dot")
	if code != 0 || !strings.HasPrefix(stdout, "digraph \"database\" {\n") || !strings.Contains(stdout, "  \"_start\" -> \"Provisioning\";\n") || !strings.HasSuffix(stdout, "}\n") || stderr != "" {
		t.Errorf("opkit states --format dot: exit %d\nstdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
}

func TestStatesOfAFileThatDoesNotLoadPrintsItsErrorsAndExits1(t *testing.T) {
	data, err := os.ReadFile(databaseExample)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "  handlers:\n", "  - name: Archived\n    final: true\n  handlers:\n", 1)
	file := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := statesRun(file)
	line := strings.Count(bad[:strings.Index(bad, "  - name: Archived")], "\n") + 1
	want := fmt.Sprintf("opkit: invalid definitions:\n%s:%d: spec.states[6]: state Archived cannot be reached from the initial state Provisioning", file, line)
	if code != 1 || stdout != "" || !strings.HasPrefix(stderr, want) {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and %q", code, stdout, stderr, want)
	}
	// opkit lint checks the states as it loads the file.
	if code, _, stderr := lintRun(file); code != lintUnusable || !strings.HasPrefix(stderr, want) {
		t.Errorf("opkit lint: exit %d, stderr:\n%s\nwant %d and %q", code, stderr, lintUnusable, want)
	}
}

func TestStatesRefusesAFileWithoutStatesAndAnUnknownFormat(t *testing.T) {
	printer := "../../examples/printer/operator.yaml"
	if code, _, stderr := statesRun(printer); code != 1 || stderr != "opkit: "+printer+": no Operator in it declares states: declare them under spec.states (docs/states.md)\n" {
		t.Errorf("a file without states: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := statesRun(databaseExample, "--format", "svg"); code != 1 || stderr != "opkit: states: --format \"svg\": expected text or dot\n" {
		t.Errorf("--format svg: exit %d, stderr %q", code, stderr)
	}
}
