package scaffold_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/scaffold"
)

// TestNamesComeFromTheDirectoryAndAreChecked: the Operator's name, kind
// and group come from the directory's name; names Kubernetes would refuse
// are refused, naming the flag, and nothing is written.
func TestNamesComeFromTheDirectoryAndAreChecked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "Deploy_Watcher")
	files, err := scaffold.Write(scaffold.Options{Dir: dir, Lang: scaffold.Python})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "deploy-watcher.test.yaml") || !slices.Contains(files, "api.py") || !slices.Contains(files, "opkit_handler.py") {
		t.Errorf("files written: %v", files)
	}
	defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d := defs[0]; d.Operator.Name != "deploy-watcher" || d.GVK.Kind != "DeployWatcher" || d.GVK.Group != "deploy-watcher.example.com" {
		t.Errorf("operator %s, %s: want deploy-watcher, DeployWatcher in deploy-watcher.example.com", d.Operator.Name, d.GVK)
	}
	for _, c := range []struct {
		o    scaffold.Options
		want string
	}{
		{scaffold.Options{Lang: "cobol"}, `--lang "cobol": want one of python, go, typescript, bash`},
		{scaffold.Options{Lang: scaffold.Go, Name: "Not_A_Label"}, `--name "Not_A_Label"`},
		{scaffold.Options{Lang: scaffold.Go, Kind: "lower"}, `--kind "lower"`},
		{scaffold.Options{Lang: scaffold.Go, Group: "nodot"}, `--group "nodot"`},
		{scaffold.Options{Lang: scaffold.Go, Kind: strings.Repeat("A", 60)}, `at most 59`},
		// A kind the generated types would rename (Python's Any) would
		// leave the handler naming types that are not there.
		{scaffold.Options{Lang: scaffold.Go, Kind: "Any"}, `--kind Any: the generated types cannot use its names`},
		{scaffold.Options{Lang: scaffold.Python, Kind: "Record"}, `--kind Record: the generated types cannot use its names`},
	} {
		c.o.Dir = filepath.Join(t.TempDir(), "x")
		if _, err := scaffold.Write(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.o, err, c.want)
		}
		if _, err := os.Stat(c.o.Dir); err == nil {
			t.Errorf("%+v: refused, yet wrote %s", c.o, c.o.Dir)
		}
	}
}

// TestAProjectIsNeverOverwritten: a directory holding one of the files is
// refused, naming it, and left as it was.
func TestAProjectIsNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.ts"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := scaffold.Write(scaffold.Options{Dir: dir, Lang: scaffold.TypeScript, Name: "mine"})
	if err == nil || !strings.Contains(err.Error(), "api.ts") || !strings.Contains(err.Error(), "overwrites nothing") {
		t.Fatalf("writing over api.ts: %v; want a refusal naming it", err)
	}
	entries, _ := os.ReadDir(dir)
	if data, _ := os.ReadFile(filepath.Join(dir, "api.ts")); len(entries) != 1 || string(data) != "mine" {
		t.Errorf("the directory after the refusal: %d entries, api.ts %q", len(entries), data)
	}
}

// TestAGoModuleNamesItsCheckoutQuotedAndIsImportable: a development
// build's checkout with a space in its path is quoted in go.mod, and the
// module's path is importable whatever the name (cmd, std are the Go
// tool's own).
func TestAGoModuleNamesItsCheckoutQuotedAndIsImportable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cmd")
	if _, err := scaffold.Write(scaffold.Options{Dir: dir, Lang: scaffold.Go, OpkitSource: "/src/my opkit"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"module example.com/cmd\n", `replace github.com/opkit-dev/opkit => "/src/my opkit"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("go.mod lacks %q:\n%s", want, data)
		}
	}
}
