package console

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

func databaseObject(state map[string]any, annotations map[string]string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Database",
		"metadata": map[string]any{"namespace": "shop", "name": "orders"},
	}}
	if state != nil {
		obj.Object["status"] = map[string]any{"state": state}
	}
	obj.SetAnnotations(annotations)
	return obj
}

func TestCheckDecisionRefusesWhatTheEngineWouldAndStaleChoices(t *testing.T) {
	asking := map[string]any{"name": "NeedsAttention", "seq": int64(4), "since": "2026-11-26T10:00:00Z",
		"question": "Roll back?", "choices": []any{"RollingBack", "Ready"}}
	ok := decision{State: "NeedsAttention", Seq: 4, Choose: "RollingBack", Reason: "the checks failed twice"}
	for _, tc := range []struct {
		name   string
		obj    *unstructured.Unstructured
		d      decision
		status int    // 0: accepted
		says   string // in the refusal
	}{
		{name: "a valid decision", obj: databaseObject(asking, nil), d: ok},
		{name: "no reason", obj: databaseObject(asking, nil), d: decision{State: "NeedsAttention", Seq: 4, Choose: "Ready", Reason: "  "},
			status: http.StatusBadRequest, says: "needs a reason"},
		{name: "a reason too long", obj: databaseObject(asking, nil), d: decision{State: "NeedsAttention", Seq: 4, Choose: "Ready", Reason: strings.Repeat("x", maxReason+1)},
			status: http.StatusBadRequest, says: "at most 1000"},
		{name: "no state yet", obj: databaseObject(nil, nil), d: ok, status: http.StatusConflict, says: "has no state yet"},
		{name: "another visit of the state", obj: databaseObject(asking, nil), d: decision{State: "NeedsAttention", Seq: 3, Choose: "Ready", Reason: "r"},
			status: http.StatusConflict, says: "moved since the page was shown: it is in NeedsAttention (visit 4), not in NeedsAttention (visit 3)"},
		{name: "the state moved", obj: databaseObject(map[string]any{"name": "RollingBack", "seq": int64(5)}, nil), d: ok,
			status: http.StatusConflict, says: "it is in RollingBack (visit 5)"},
		{name: "a state that asks nobody", obj: databaseObject(map[string]any{"name": "NeedsAttention", "seq": int64(4)}, nil), d: ok,
			status: http.StatusConflict, says: "does not wait for a person's decision"},
		{name: "a choice not offered", obj: databaseObject(asking, nil), d: decision{State: "NeedsAttention", Seq: 4, Choose: "Upgrading", Reason: "r"},
			status: http.StatusConflict, says: `"Upgrading" is not a choice from NeedsAttention: choose one of RollingBack, Ready`},
		{name: "a decision sent already", obj: databaseObject(asking, map[string]string{v1alpha1.DecisionAnnotation: `{"state":"NeedsAttention","seq":4,"choose":"Ready","reason":"fine","by":"ana"}`}),
			d: ok, status: http.StatusConflict, says: "already sent for Database shop/orders (by ana: choose Ready)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDecision(tc.obj, tc.d)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var he *httpError
			if !errors.As(err, &he) || he.status != tc.status || !strings.Contains(he.msg, tc.says) {
				t.Fatalf("got %v; want a %d that says %q", err, tc.status, tc.says)
			}
		})
	}
}

func TestTransitionOfReadsATransitionRunAndNoOther(t *testing.T) {
	decided := archive.Run{Handler: v1alpha1.TransitionHandler, Trigger: v1alpha1.TransitionDecision, Actor: "ana",
		Diff: []archive.Change{{Op: "change", Path: "status.state.name", Old: "NeedsAttention", New: "RollingBack"}}}
	if got := transitionOf(decided); got == nil || *got != (transitionView{From: "NeedsAttention", To: "RollingBack", Trigger: "decision", Actor: "ana"}) {
		t.Errorf("a decided transition: %+v", got)
	}
	initial := archive.Run{Handler: v1alpha1.TransitionHandler, Trigger: v1alpha1.TransitionInitial,
		Diff: []archive.Change{{Op: "add", Path: "status.state.name", New: "Provisioning"}}}
	if got := transitionOf(initial); got == nil || got.From != "" || got.To != "Provisioning" {
		t.Errorf("the initial transition: %+v", got)
	}
	if got := transitionOf(archive.Run{Handler: "announce", Trigger: "enter"}); got != nil {
		t.Errorf("a handler's run read as a transition: %+v", got)
	}
	for trigger, want := range map[string]string{"initial": "the initial state of a new object", "guard": "its guard held",
		"timeout": "its timeout expired", "decision": "a person decided", "": "–", "other": "other"} {
		if got := triggerWords(trigger); got != want {
			t.Errorf("triggerWords(%q) = %q, want %q", trigger, got, want)
		}
	}
}
