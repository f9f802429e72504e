package calendar

import (
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

func TestCatchUpRunsTheLatestSlotOnTimeOrByPolicy(t *testing.T) {
	t.Parallel()
	at := func(s float64) time.Time { return time.Unix(0, int64(s*float64(time.Second))) }
	every := func(d time.Duration, policy string) *definition.Handler {
		return &definition.Handler{Name: "tick", Every: d, CatchUp: policy}
	}
	tests := []struct {
		name    string
		h       *definition.Handler
		due     time.Time
		now     time.Time
		latest  time.Time
		run     bool
		skipped int
	}{
		{"on time", every(2*time.Second, v1alpha1.CatchUpSkip), at(100), at(100.1), at(100), true, 0},
		{"late by less than a period", every(2*time.Second, v1alpha1.CatchUpSkip), at(100), at(101.9), at(100), true, 0},
		{"a period late, Skip", every(2*time.Second, v1alpha1.CatchUpSkip), at(100), at(102), at(102), true, 1},
		{"down 7 s, Skip, the latest on time", every(2*time.Second, v1alpha1.CatchUpSkip), at(100), at(107.5), at(106), true, 3},
		{"down 7 s, Once", every(2*time.Second, v1alpha1.CatchUpOnce), at(100), at(107.5), at(106), true, 3},
		{"down an hour, Skip: every slot skipped", every(time.Hour, v1alpha1.CatchUpSkip), at(3600), at(3600 + 1800), at(3600), false, 1},
		{"down an hour, Once: the latest runs late", every(time.Hour, v1alpha1.CatchUpOnce), at(3600), at(3*3600 + 1800), at(3 * 3600), true, 2},
		{"an hourly slot 4 s late is on time", every(time.Hour, v1alpha1.CatchUpSkip), at(3600), at(3604), at(3600), true, 0},
		{"an hourly slot 5 s late is late", every(time.Hour, v1alpha1.CatchUpSkip), at(3600), at(3605), at(3600), false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			latest, run, skipped := catchUp(tt.h, tt.due, tt.now)
			if !latest.Equal(tt.latest) || run != tt.run || skipped != tt.skipped {
				t.Errorf("catchUp = %d, %v, %d; want %d, %v, %d", latest.Unix(), run, skipped, tt.latest.Unix(), tt.run, tt.skipped)
			}
		})
	}
}
