package scenario

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestFindListsScenarioFilesSortedSkippingHiddenDirectories(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{
		"b.test.yaml", "a/z.test.yaml", "a/deep/er/y.test.yaml", "testdata/x.test.yaml",
		"operator.yaml", "a/notes.test.yml", ".git/hooks.test.yaml", "a/.cache/c.test.yaml",
	} {
		write(t, filepath.Join(dir, f), "")
	}
	single := filepath.Join(dir, "operator.yaml") // a file is taken whatever its name
	got, err := Find(dir, single, filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "a/deep/er/y.test.yaml"),
		filepath.Join(dir, "a/z.test.yaml"),
		filepath.Join(dir, "b.test.yaml"),
		single,
		filepath.Join(dir, "testdata/x.test.yaml"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestFindRefusesAMissingPathAndADirectoryWithoutScenarios(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "empty/operator.yaml"), "")
	if _, err := Find(filepath.Join(dir, "nosuch")); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a missing path: got %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if _, err := Find(empty); err == nil || err.Error() != empty+": no scenario file (*.test.yaml) in it or below" {
		t.Errorf("a directory without scenarios: got %v", err)
	}
}
