package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// named is a reconciler that says which definition it is.
type named string

func (named) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, nil
}

func TestSplitSendsEachObjectToTheDefinitionItIsOn(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Name: "c"}
	s := NewSplit[named]("from", "to", map[types.NamespacedName]bool{a: true})
	if s.Pick(a) != "to" || s.Pick(b) != "from" {
		t.Fatalf("a on %s, b on %s; want to and from", s.Pick(a), s.Pick(b))
	}
	changed := s.setMoved(map[types.NamespacedName]bool{b: true, c: true})
	slices.SortFunc(changed, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
	if want := []types.NamespacedName{c, a, b}; !slices.Equal(changed, want) {
		t.Errorf("changed %v; want %v (a moved back, b and c moved)", changed, want)
	}
	if s.Pick(a) != "from" || s.Pick(b) != "to" {
		t.Errorf("after the move a on %s, b on %s; want from and to", s.Pick(a), s.Pick(b))
	}
	s.complete()
	if s.Pick(types.NamespacedName{Namespace: "ns", Name: "new"}) != "to" {
		t.Error("an object made after the rollout completed is not on the new definition")
	}
}

func TestObjectKeysReadWhatObjectNameWrites(t *testing.T) {
	for _, k := range []types.NamespacedName{{Namespace: "ns", Name: "a"}, {Name: "cluster-scoped"}} {
		if got := objectKey(objectName(k)); got != k {
			t.Errorf("objectKey(objectName(%v)) = %v", k, got)
		}
	}
	if got := keys([]string{"ns/a", "b"}); len(got) != 2 || !got[types.NamespacedName{Namespace: "ns", Name: "a"}] || !got[types.NamespacedName{Name: "b"}] {
		t.Errorf("keys = %v", got)
	}
}

func TestTheRolloutObjectOfAnEngineOfOneNamespaceIsItsOwn(t *testing.T) {
	if got := Name("pages", ""); got != "pages" {
		t.Errorf("Name(pages, all) = %s", got)
	}
	if got := Name("pages", "team-a"); got != "pages.team-a" {
		t.Errorf("Name(pages, team-a) = %s", got)
	}
}

func TestANoteWaitsForAPersonOnlyWhenPausedOrUndone(t *testing.T) {
	from, to := v1alpha1.RolloutDefinition{Hash: "h1"}, v1alpha1.RolloutDefinition{Hash: "h2"}
	for _, phase := range []string{v1alpha1.RolloutProgressing, v1alpha1.RolloutComplete} {
		if n := noteOf("pages", &v1alpha1.RolloutStatus{Phase: phase, From: from, To: to}); n != nil {
			t.Errorf("%s: note %+v; want none", phase, n)
		}
	}
	n := noteOf("pages", &v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutPaused, From: from, To: to, Reason: "a: Stalled"})
	if n == nil || n.Reason != ReasonPaused || !strings.Contains(n.Message, "opkit rollout continue pages") || !strings.Contains(n.Message, "a: Stalled") {
		t.Errorf("paused: note %+v", n)
	}
	n = noteOf("pages", &v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutRolledBack, From: from, To: to, Reason: "undone by ann"})
	if n == nil || n.Reason != ReasonRolledBack || !strings.Contains(n.Message, "running definition h1, not this one (h2)") {
		t.Errorf("rolled back: note %+v", n)
	}
}
