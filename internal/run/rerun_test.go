package run

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// TestRerunRefusalSaysWhyARequestCannotBeTaken: a re-run request is
// refused, with why, for a run the archive lacks, another operator's or
// another object's run (the object it ran for is gone), a running one, a
// handler no longer in the definition, and --same-input without a
// recorded input; a finished run of this object's defined handler is
// taken.
func TestRerunRefusalSaysWhyARequestCannotBeTaken(t *testing.T) {
	def := &definition.Definition{
		Operator: &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: "notes"}},
		Handlers: []*definition.Handler{{Name: "notify"}},
	}
	cr := &unstructured.Unstructured{}
	cr.SetNamespace("default")
	cr.SetName("n1")
	cr.SetUID("u1")
	ok := func() *archive.Run {
		return &archive.Run{ID: "01m8e0kb2b896y71ha", Operator: "notes", Handler: "notify", Trigger: "create", Kind: "Note", Namespace: "default", Name: "n1",
			UID: "u1", Outcome: archive.Succeeded, Input: []byte(`{}`)}
	}
	for _, tc := range []struct {
		name      string
		orig      func(r *archive.Run) *archive.Run
		sameInput bool
		want      string
	}{
		{"taken", func(r *archive.Run) *archive.Run { return r }, true, ""},
		{"not in the archive", func(*archive.Run) *archive.Run { return nil }, false, "is not in the archive"},
		{"another operator's", func(r *archive.Run) *archive.Run { r.Operator = "other"; return r }, false, "operator other's, not notes's"},
		{"another object's", func(r *archive.Run) *archive.Run { r.UID = "u0"; return r }, false, "ran for another object"},
		{"running", func(r *archive.Run) *archive.Run { r.Outcome = archive.Running; return r }, false, "still running"},
		{"handler gone", func(r *archive.Run) *archive.Run { r.Handler = "announce"; return r }, false, "handler announce is no longer in operator notes's definition"},
		{"no input", func(r *archive.Run) *archive.Run { r.Input = nil; return r }, true, "no recorded binding context"},
	} {
		got := rerunRefusal(def, cr, v1alpha1.Rerun{Run: "01m8e0kb2b896y71ha", SameInput: tc.sameInput}, tc.orig(ok()))
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}
