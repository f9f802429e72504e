package cli

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOperatorFilesSaysNothingOfScenariosAndNamesWhatElseItSkips(t *testing.T) {
	dir := t.TempDir()
	operator, err := os.ReadFile("../../examples/printer/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	scenario, err := os.ReadFile("../../examples/printer/printer.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"operator.yaml":      string(operator),
		"printer.test.yaml":  string(scenario),
		"printer.yaml":       "apiVersion: demo.example.com/v1\nkind: Printer\nmetadata: {name: hello}\n",
		"kind-only.yaml":     "kind: ConfigMap\n",
		"version-only.yml":   "apiVersion: v1\n",
		"settings.yaml":      "# not Kubernetes\nlevel: 3\n",
		"named-scenario.yml": "scenario: 3\nkind: Printer\n", // a kind: not a scenario
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, skipped, err := operatorFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "operator.yaml")}; !slices.Equal(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
	want := map[string]string{
		"printer.yaml":       "not an Operator (demo.example.com/v1 Printer)",
		"kind-only.yaml":     "not an Operator (kind ConfigMap, with no apiVersion)",
		"version-only.yml":   "not an Operator (apiVersion v1, with no kind)",
		"settings.yaml":      "not an Operator (neither apiVersion nor kind)",
		"named-scenario.yml": "not an Operator (kind Printer, with no apiVersion)",
	}
	for name, why := range want {
		path := filepath.Join(dir, name)
		if got := skipped[path]; got != "skipping "+path+": "+why {
			t.Errorf("%s: skipped with %q, want %q", name, got, "skipping "+path+": "+why)
		}
	}
	if len(skipped) != len(want) {
		var got []string
		for path := range skipped {
			got = append(got, filepath.Base(path))
		}
		slices.Sort(got)
		t.Errorf("skipped %v, want only %v (nothing said of the scenario file)", got, slices.Sorted(maps.Keys(want)))
	}
}

// A file opkit dev applies (--apply) is skipped without a word: the demo's
// printer.yaml, beside its operator, is the object it applies.
func TestOpkitDevSaysNothingOfTheFilesItApplies(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"printer.yaml": "apiVersion: demo.example.com/v1\nkind: Printer\nmetadata: {name: hello}\n",
		"other.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	r := &reloader{dir: dir, log: &log, objects: map[string]bool{filepath.Join(dir, "printer.yaml"): true}}
	if _, err := r.operatorFiles(); err != nil {
		t.Fatal(err)
	}
	if got := log.String(); strings.Contains(got, "printer.yaml") || !strings.Contains(got, "skipping "+filepath.Join(dir, "other.yaml")) {
		t.Errorf("opkit dev said %q; want other.yaml skipped, and nothing of printer.yaml, which it applies", got)
	}
}
