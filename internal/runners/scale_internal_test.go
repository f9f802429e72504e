package runners

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRunnersWantedAreTheQueueOverEachRunnersRunsWithinTheBounds(t *testing.T) {
	b := bounds{min: 1, max: 4, parallel: 4}
	for _, c := range []struct {
		demand int
		want   int32
	}{{0, 1}, {1, 1}, {4, 1}, {5, 2}, {12, 3}, {16, 4}, {17, 4}, {1000, 4}} {
		if got := b.want(c.demand); got != c.want {
			t.Errorf("%d runs: %d runners, want %d", c.demand, got, c.want)
		}
	}
	if got := (bounds{min: 0, max: 2, parallel: 1}).want(0); got != 0 {
		t.Errorf("no runs, min 0: %d runners, want 0", got)
	}
}

func TestRunnersScaleUpAtOnceAndDownOnlyAfterAQuietPeriod(t *testing.T) {
	b := bounds{min: 1, max: 4, parallel: 1}
	start := time.Now()
	const quiet = 5 * time.Minute
	var window []sample
	step := func(at time.Duration, demand int, want int32) {
		t.Helper()
		var got int32
		window, got = b.target(window, start.Add(at), quiet, demand)
		if got != want {
			t.Errorf("at %s with %d runs: %d runners, want %d (window %+v)", at, demand, got, want, window)
		}
	}
	step(0, 0, 1)
	step(time.Second, 3, 3)                 // up at once
	step(2*time.Second, 0, 3)               // the burst ended: kept
	step(time.Minute, 2, 3)                 // a smaller one: still kept
	step(5*time.Minute, 0, 3)               // 3 asked for 4m59s ago
	step(5*time.Minute+time.Second, 0, 2)   // 2 asked for 4m01s ago
	step(6*time.Minute+time.Second, 0, 1)   // quiet for the period
	step(6*time.Minute+2*time.Second, 9, 4) // up at once, to the max
	if len(window) > 2 {
		t.Errorf("the window keeps %d samples, want those that may still be the most only: %+v", len(window), window)
	}
}

func TestRunnerBoundsThatAreNotNumbersOrContradictAreAnErrorNamingThem(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{MinAnnotation: "two"}, `annotation opkit.dev/runners-min is "two": want a whole number, at least 0`},
		{map[string]string{MaxAnnotation: "0"}, `annotation opkit.dev/runners-max is "0": want a whole number, at least 1`},
		{map[string]string{ParallelAnnotation: "-1"}, `annotation opkit.dev/runners-parallel is "-1"`},
		{map[string]string{MinAnnotation: "5", MaxAnnotation: "3"}, "annotation opkit.dev/runners-min (5) is more than opkit.dev/runners-max (3)"},
	} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "opkit", Name: "demo-runner-0a1b2c3d", Annotations: c.annotations}}
		if _, err := boundsOf(d); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "runner Deployment opkit/demo-runner-0a1b2c3d") {
			t.Errorf("%v: %v, want an error naming the Deployment and %q", c.annotations, err, c.want)
		}
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{MaxAnnotation: "10"}}}
	if b, err := boundsOf(d); err != nil || b != (bounds{min: DefaultMin, max: 10, parallel: DefaultParallel}) {
		t.Errorf("bounds %+v (%v), want the defaults with max 10", b, err)
	}
}

func TestARunnerDeploymentIsNamedByItsOperatorAndItsImagesHash(t *testing.T) {
	// sha256("python:3.12-slim") is 1d044754... in hex.
	if got := DeploymentName("notifier", "python:3.12-slim"); got != "notifier-runner-1d044754" {
		t.Errorf("DeploymentName = %q, want notifier-runner-1d044754", got)
	}
}
