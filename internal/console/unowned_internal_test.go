package console

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestWatchedRowSaysStalledBeforeRetryingBeforeOK(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       state
		message    string
		gone       bool
	}{
		{"no handler state", `{"state": {}}`, stateOK, "", false},
		{"a success", `{"state": {"handlers": {"a": {"generation": 3}}}}`, stateOK, "", false},
		{"a failure", `{"state": {"handlers": {"a": {"attempt": 1, "lastError": "boom"}}}}`, stateRetrying, "handler a failed (attempt 1): boom", false},
		{"one gave up, one failed", `{"state": {"handlers": {"a": {"attempt": 1, "lastError": "x"}, "b": {"attempt": 5, "stalled": true, "lastError": "y"}}}}`,
			stateStalled, "handler b gave up after 5 attempts: y", false},
		{"deleted", `{"state": {}, "object": {"metadata": {"name": "n", "deletionTimestamp": "2026-01-02T03:04:05Z"}}}`, stateOK, "", true},
		{"not JSON", `{`, stateUnknown, "its handler record does not decode: unexpected end of JSON input", false},
	} {
		row := watchedRow(archive.HandlerRecord{Operator: "o", Key: "uid", Kind: "Deployment", Namespace: "ns", Name: "n", Data: []byte(tc.data)})
		if row.State != tc.want || row.Message != tc.message || row.Gone != tc.gone {
			t.Errorf("%s: %s %q gone=%v; want %s %q gone=%v", tc.name, row.State, row.Message, row.Gone, tc.want, tc.message, tc.gone)
		}
	}
}

func TestSlotOfReadsAScheduleRunsKey(t *testing.T) {
	for key, want := range map[string]time.Time{
		"cal/schedule/report/1767225600": time.Unix(1767225600, 0).UTC(),
		"cal/schedule/other/1767225600":  {},
		"uid/3/report":                   {},
		"cal/schedule/report/soon":       {},
	} {
		if got := slotOf(archive.Run{Operator: "cal", Handler: "report", Key: key}); !got.Equal(want) {
			t.Errorf("slotOf(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestRunObjectURLNeverAssumesTheOperatorsCustomResource(t *testing.T) {
	deployments := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	owned := &operator{Name: "chores", Subject: ownedSubject, GVK: schema.GroupVersionKind{Group: "x.example.com", Version: "v1", Kind: "Chore"}}
	watch := &operator{Name: "deploys", Subject: watchedSubject, GVK: deployments}
	for _, tc := range []struct {
		name string
		op   *operator
		run  archive.Run
		want string
	}{
		{"a custom resource", owned, archive.Run{Operator: "chores", APIVersion: "x.example.com/v1", Kind: "Chore", Namespace: "ns", Name: "a"},
			"/operators/chores/objects/ns/a"},
		{"a watched object", watch, archive.Run{Operator: "deploys", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"},
			"/operators/deploys/objects/ns/web"},
		{"a kind watched before", watch, archive.Run{Operator: "deploys", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "web"},
			"/operators/deploys/objects/ns/web?apiVersion=v1&kind=ConfigMap"},
		{"an operator not known", nil, archive.Run{Operator: "gone", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"},
			"/operators/gone/objects/ns/web?apiVersion=apps%2Fv1&kind=Deployment"},
		{"a schedule", nil, archive.Run{Operator: "cal", Handler: "report", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator", Name: "cal"},
			"/operators/cal#schedule-report"},
		{"a run on a delivery", owned, archive.Run{Operator: "chores", Handler: "deploy", Trigger: "event", APIVersion: "opkit.dev/v1alpha1", Kind: "Operator",
			Name: "chores", UID: "01m88ezrmb6fygwe3a"}, "/events/01m88ezrmb6fygwe3a"},
		{"a run on a delivery without its id", nil, archive.Run{Operator: "hooks", Handler: "deploy", Trigger: "event", APIVersion: "opkit.dev/v1alpha1",
			Kind: "Operator", Name: "hooks", UID: "?"}, "/operators/hooks"},
		{"a cluster-scoped object", watch, archive.Run{Operator: "deploys", APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			"/operators/deploys/objects/_/web"},
	} {
		if got := runObjectURL(tc.op, &tc.run); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
