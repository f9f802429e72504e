package why_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/why"
)

func TestFieldsReadsWhatAManagerOwnsWithItsValueNow(t *testing.T) {
	obj := map[string]any{
		"metadata": map[string]any{"name": "w", "annotations": map[string]any{"opkit.dev/run": "r1"}, "resourceVersion": "9"},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "sidecar", "image": "s:1"},
			map[string]any{"name": "worker", "image": "quay.io/w:abc1234"},
		}}}},
	}
	raw := `{"f:metadata":{"f:annotations":{".":{},"f:opkit.dev/run":{}},"f:resourceVersion":{}},
		"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"worker\"}":{".":{},"f:image":{}}}}}}}`
	got := why.Fields(obj, []byte(raw))
	want := []why.Field{
		{Path: "metadata.annotations.opkit.dev/run", Value: "r1"},
		{Path: "spec.template.spec.containers[name=worker].image", Value: "quay.io/w:abc1234"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Fields = %+v, want %+v", got, want)
	}
	if got := why.Fields(obj, []byte("not json")); got != nil {
		t.Errorf("fields of no JSON: %+v, want none", got)
	}
}

// source is an archive in memory: Explain's logic alone.
type source struct {
	runs       []archive.Run
	deliveries map[string]*archive.Delivery
}

func (s *source) Get(_ context.Context, id string) (*archive.Run, error) {
	for i := range s.runs {
		if s.runs[i].ID == id {
			return &s.runs[i], nil
		}
	}
	return nil, archive.ErrNotFound
}

func (s *source) List(_ context.Context, q archive.Query) (*archive.Page, error) {
	var out []archive.Run
	for _, r := range s.runs {
		if r.Namespace == q.Namespace && r.Name == q.Name && (q.Kind == "" || q.Kind == r.Kind) {
			r.Input = nil // List gives no input
			out = append(out, r)
		}
	}
	return &archive.Page{Runs: out}, nil
}

func (s *source) GetDelivery(_ context.Context, id string) (*archive.Delivery, error) {
	if d := s.deliveries[id]; d != nil {
		return d, nil
	}
	return nil, archive.ErrNotFound
}

// TestADeploymentAHandlerPatchedLeadsToTheRunAndTheComment: the
// Deployment names the run that patched its image; the run, on event,
// names its delivery; the chain reads, newest first, the image change
// during the run, the run, and the comment's delivery with who sent it.
func TestADeploymentAHandlerPatchedLeadsToTheRunAndTheComment(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	const runID, deliveryID = "01m91agtsvy2aepj3a", "01m91agsaaaaaaaaaa"
	input, _ := json.Marshal(map[string]any{"event": map[string]any{"id": deliveryID}})
	src := &source{
		runs: []archive.Run{{
			ID: runID, Operator: "deploy-notifier", Handler: "deploy", Trigger: "event", Kind: "Operator", Name: "deploy-notifier",
			Attempt: 1, Outcome: archive.Succeeded, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(1500 * time.Millisecond), Input: input,
		}},
		deliveries: map[string]*archive.Delivery{deliveryID: {
			ID: deliveryID, Source: "github", Event: "issue_comment", DeliveryID: "gh-1", ReceivedAt: t0, Outcome: archive.DeliveryHandled,
			Payload: []byte(`{"sender": {"login": "alice"}, "comment": {"body": "/deploy abc1234"}}`),
		}},
	}
	dep := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "worker", "namespace": "default", "annotations": map[string]any{why.RunAnnotation: runID}},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "worker", "image": "quay.io/w:abc1234"}}}}},
	}}
	dep.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "Python-urllib", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: t0.Add(time.Second)},
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"worker\"}":{"f:image":{}}}}}}}`),
	}})
	chain, err := why.Explain(t.Context(), src, why.Ref{Kind: "Deployment", Namespace: "default", Name: "worker"}, dep, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range chain.Entries {
		kinds = append(kinds, e.Kind)
	}
	if !slices.Equal(kinds, []string{"change", "run", "delivery"}) {
		t.Fatalf("entries %v, want the change, the run, the delivery, newest first: %+v", kinds, chain.Entries)
	}
	change, run, delivery := chain.Entries[0], chain.Entries[1], chain.Entries[2]
	for _, c := range []struct{ got, want string }{
		{change.Summary, "spec.template.spec.containers[name=worker].image = \"quay.io/w:abc1234\" by Python-urllib (Update), during run " + runID + " (deploy)"},
		{run.Cause, "delivery " + deliveryID},
		{delivery.Delivery.Sender, "alice"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !strings.Contains(delivery.Summary, "issue_comment by alice") || run.Run.Logs != "opkit logs "+runID {
		t.Errorf("the delivery %q, the run's logs %q", delivery.Summary, run.Run.Logs)
	}
	// --since leaves out what is older.
	chain, _ = why.Explain(t.Context(), src, why.Ref{Kind: "Deployment", Namespace: "default", Name: "worker"}, dep, t0.Add(500*time.Millisecond))
	if len(chain.Entries) != 2 {
		t.Errorf("since after the delivery: %d entries, want the change and the run", len(chain.Entries))
	}
}

// TestAPrinterSaysItsSpecChangeAndTheRunsThatFollowed: the object's own
// runs, their diff as the cause, a missing run named as a note.
func TestAPrinterSaysItsSpecChangeAndTheRunsThatFollowed(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	src := &source{runs: []archive.Run{
		{ID: "01m91agtsvy2aepj3b", Handler: "print", Trigger: "create", Kind: "Printer", Namespace: "default", Name: "p", Attempt: 1, Outcome: archive.Succeeded, StartedAt: t0},
		{ID: "01m91agtsvy2aepj3c", Handler: "print", Trigger: "update", Kind: "Printer", Namespace: "default", Name: "p", Attempt: 1, Outcome: archive.Succeeded, StartedAt: t0.Add(time.Minute),
			Diff: []archive.Change{{Op: "change", Path: "spec.text", Old: "a", New: "b"}}, Writes: []string{"status: printed"}},
	}}
	obj := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p", "namespace": "default",
		"annotations": map[string]any{why.RunAnnotation: "01m91agtsvy2aepj3z"}}}}
	chain, err := why.Explain(t.Context(), src, why.Ref{Kind: "Printer", Namespace: "default", Name: "p"}, obj, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chain.Entries) != 2 || !strings.Contains(chain.Entries[0].Summary, `caused by spec.text "a" -> "b"; wrote status: printed`) || chain.Entries[1].Run.Trigger != "create" {
		t.Errorf("entries %+v; want the update caused by spec.text, then the create", chain.Entries)
	}
	if len(chain.Notes) != 1 || !strings.Contains(chain.Notes[0], "no longer in the archive") {
		t.Errorf("notes %v, want the missing run named", chain.Notes)
	}
}

// TestASecretsValuesAreNotShown: a Secret's data and kubectl's last
// applied configuration are named, never printed.
func TestASecretsValuesAreNotShown(t *testing.T) {
	s := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "default",
			"annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"password":"hunter2"}}`}},
		"data": map[string]any{"password": "aHVudGVyMg=="},
	}}
	s.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: time.Now()},
		FieldsV1: metav1.NewFieldsV1(`{"f:data":{".":{},"f:password":{}},"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}}}`),
	}})
	chain, err := why.Explain(t.Context(), &source{}, why.Ref{Kind: "Secret", Namespace: "default", Name: "db"}, s, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(chain)
	if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "aHVudGVyMg") || !strings.Contains(string(out), "data.password") {
		t.Errorf("the chain shows a Secret's value, or not its field:\n%s", out)
	}
}

// TestAChangeCausesTheRunThatSawItsValue: managedFields' times are in
// seconds; a change is the cause of the run whose diff has its value,
// not of an earlier run of the same second.
func TestAChangeCausesTheRunThatSawItsValue(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 21, 11, 53, 0, time.UTC)
	src := &source{runs: []archive.Run{
		{ID: "01m91ece8r1mx68xmf", Handler: "print", Trigger: "create", Kind: "Note", Namespace: "default", Name: "pr-7", Attempt: 1, Outcome: archive.Succeeded,
			StartedAt: t0.Add(880 * time.Millisecond), Diff: []archive.Change{{Op: "add", Path: "spec.text", New: "first"}}},
		{ID: "01m91ececfj5sj11e5", Handler: "print", Trigger: "update", Kind: "Note", Namespace: "default", Name: "pr-7", Attempt: 1, Outcome: archive.Succeeded,
			StartedAt: t0.Add(time.Second), Diff: []archive.Change{{Op: "change", Path: "spec.text", Old: "first", New: "second"}}},
	}}
	note := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "why.example.com/v1", "kind": "Note",
		"metadata": map[string]any{"name": "pr-7", "namespace": "default"}, "spec": map[string]any{"text": "second"}}}
	note.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "bob", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: t0},
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:text":{}}}`),
	}})
	chain, err := why.Explain(t.Context(), src, why.Ref{Kind: "Note", Namespace: "default", Name: "pr-7"}, note, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range chain.Entries {
		got = append(got, e.Kind+" "+e.Summary[:min(len(e.Summary), 40)])
	}
	if len(chain.Entries) != 3 || chain.Entries[1].Kind != "change" || !strings.Contains(chain.Entries[1].Summary, "which caused run 01m91ececfj5sj11e5") {
		t.Errorf("chain %q; want the update run, bob's change which caused it, the create run", got)
	}
}

// withheld is a source that gives runs and no delivery: its reader may
// not see them (the console's access, the runs API's keeping).
type withheld struct{ *source }

func (withheld) GetDelivery(context.Context, string) (*archive.Delivery, error) {
	return nil, fmt.Errorf("%w: you may not read the deliveries of operator deploy-notifier", why.ErrWithheld)
}

// TestADeliveryWithheldIsNamedNotShownAndTheRestExplained: the run's
// delivery, withheld by the source, is a note with the source's words;
// the change and the run are there, and Explain does not fail.
func TestADeliveryWithheldIsNamedNotShownAndTheRestExplained(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	const runID, deliveryID = "01m91agtsvy2aepj3a", "01m91agsaaaaaaaaaa"
	input, _ := json.Marshal(map[string]any{"event": map[string]any{"id": deliveryID}})
	src := withheld{&source{runs: []archive.Run{{
		ID: runID, Operator: "deploy-notifier", Handler: "deploy", Trigger: "event", Kind: "Operator", Name: "deploy-notifier",
		Attempt: 1, Outcome: archive.Succeeded, StartedAt: t0, FinishedAt: t0.Add(time.Second), Input: input,
	}}}}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "default", "annotations": map[string]any{why.RunAnnotation: runID}}}}
	chain, err := why.Explain(t.Context(), src, why.Ref{Kind: "ConfigMap", Namespace: "default", Name: "c"}, cm, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chain.Entries) != 1 || chain.Entries[0].Kind != "run" || chain.Entries[0].Cause != "delivery "+deliveryID {
		t.Errorf("entries %+v; want the run, its cause named", chain.Entries)
	}
	if want := "delivery " + deliveryID + " is not shown (withheld: you may not read the deliveries of operator deploy-notifier)"; !slices.Contains(chain.Notes, want) {
		t.Errorf("notes %q; want %q", chain.Notes, want)
	}
}
