package gauges

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestReadConditionsKeepsTheGaugedOnesAndTheEarliestFailure(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cond := func(typ, status, at string) any {
		c := map[string]any{"type": typ, "status": status, "reason": "R", "message": "m"}
		if at != "" {
			c["lastTransitionTime"] = at
		}
		return c
	}
	for _, tc := range []struct {
		what  string
		conds []any
		want  objectConditions
	}{
		{"no status", nil, objectConditions{}},
		{"ready", []any{cond("Ready", "True", "2026-05-01T11:00:00Z"), cond("Degraded", "False", "2026-05-01T10:00:00Z")},
			objectConditions{isTrue: [4]bool{true, false, false, false}}},
		{"degraded and stalled: failing since the earlier", []any{
			cond("Ready", "False", "2026-05-01T11:00:00Z"),
			cond("Degraded", "True", "2026-05-01T11:30:00Z"),
			cond("Stalled", "True", "2026-05-01T11:10:00Z"),
			cond("Paused", "True", "2026-05-01T09:00:00Z"), // paused is not failing
		}, objectConditions{isTrue: [4]bool{false, true, true, true}, failingSince: time.Date(2026, 5, 1, 11, 10, 0, 0, time.UTC)}},
		{"stalled without a time: failing since now", []any{cond("Stalled", "True", "")},
			objectConditions{isTrue: [4]bool{false, false, true, false}, failingSince: now}},
		{"other conditions and Unknown are not counted", []any{cond("Available", "True", ""), cond("Ready", "Unknown", "")}, objectConditions{}},
	} {
		cr := &unstructured.Unstructured{Object: map[string]any{}}
		if tc.conds != nil {
			cr.Object["status"] = map[string]any{"conditions": tc.conds}
		}
		if got := readConditions(cr, now); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, got, tc.want)
		}
	}
}
