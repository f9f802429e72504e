package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A file read while it is written (truncated, not yet whole) is not
// acted on: it is read again a moment later, and taken once two reads
// agree.
func TestSettledWaitsForAFileBeingWritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "op.yaml")
	whole := []byte("apiVersion: opkit.dev/v1alpha1\nkind: Operator\n")
	if err := os.WriteFile(file, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "gone.yaml")
	got := settled([]fileRead{{file, whole}, {file, nil}, {gone, whole}})
	if len(got) != 1 || got[0].file != file || !bytes.Equal(got[0].data, whole) {
		t.Errorf("settled %+v, want the file that reads the same twice alone (not the one read empty then whole, nor the one that cannot be read again)", got)
	}
	if settled(nil) != nil {
		t.Error("nothing read, something settled")
	}
}

// A file that is gone, or no longer an Operator, for one poll stops
// nothing: its operators stop when the next poll says so again.
func TestAFileGoneForOnePollStopsNothing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "op.yaml")
	var log bytes.Buffer
	r := &reloader{dir: dir, log: &log}
	if err := r.sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.contents[file] = []byte("what it held") // as if loaded at the poll before
	if err := r.sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.contents[file]; !ok || !r.leaving[file] {
		t.Fatalf("after one poll without the file: contents %v leaving %v, want it kept and leaving", r.contents, r.leaving)
	}
	// Back at the next poll (it was being saved): kept, no longer leaving.
	if err := os.WriteFile(file, []byte("what it held"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.leaving[file] {
		t.Error("a file back at the next poll is still leaving")
	}
	// Gone for two polls: forgotten.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := r.contents[file]; ok {
		t.Error("a file gone for two polls is still known")
	}
}
