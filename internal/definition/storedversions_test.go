package definition_test

import (
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
)

// TestDroppingAStoredVersionIsRefusedAtItsLine: a definition without v1,
// checked against a CRD whose storedVersions still holds v1, is refused
// at spec.resource.versions with the file's line, naming the version and
// opkit migrate; once storedVersions holds v2 alone it passes.
func TestDroppingAStoredVersionIsRefusedAtItsLine(t *testing.T) {
	src := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes}
spec:
  resource:
    group: notes.example.com
    kind: Note
    versions:
    - {name: v2, storage: true}
`
	sources, err := definition.Load("notes.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(sources[0])
	if err != nil {
		t.Fatal(err)
	}
	err = d.CheckStoredVersions([]string{"v1", "v2"})
	want := "notes.yaml:8: spec.resource.versions: version v1 is removed, but objects may still be stored at it (CRD notes.notes.example.com lists it in status.storedVersions [v1 v2])"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "`opkit migrate notes.notes.example.com` has rewritten every object at v2") {
		t.Errorf("got %v\nwant %s...", err, want)
	}
	if err := d.CheckStoredVersions([]string{"v2"}); err != nil {
		t.Errorf("storedVersions [v2]: %v", err)
	}
}
