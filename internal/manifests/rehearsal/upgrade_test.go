package rehearsal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/manifests"
)

// upgrade: day two. The engine's Pod is replaced three times, as a team
// replaces it: a changed flag applied (--run-events), the flag changed
// back and applied again, and kubectl rollout restart. After each, every
// run and delivery recorded before is still in the archive (its claim
// outlives the Pod), and a Probe created once the new engine's Pod runs
// has both its handlers run by the runners within seconds: the runners
// left the old engine's connections and found the new one by its
// Service.
func (in *install) upgrade(t *testing.T) {
	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"--run-events applied", func(t *testing.T) { in.apply(t, func(o *manifests.Options) { o.RunEvents = true }) }},
		{"--run-events off, applied again", func(t *testing.T) { in.apply(t, func(o *manifests.Options) { o.RunEvents = false }) }},
		{"kubectl rollout restart", func(t *testing.T) {
			if out, err := kubectl(t, "rollout", "restart", "-n", in.ns, "deployment/"+in.m.Options.Name); err != nil {
				t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
			}
		}},
	}
	before := in.history(t)
	if len(before.runs) == 0 || len(before.deliveries) == 0 {
		t.Fatalf("the archive holds %d runs and %d deliveries before the upgrade; want some of each (the deploy notifier's)", len(before.runs), len(before.deliveries))
	}
	for i, step := range steps {
		old := in.enginePod(t)
		step.do(t)
		started := in.waitNewEngine(t, old)
		took := in.probeRuns(t, fmt.Sprintf("after-%d", i)).Sub(started)
		t.Logf("%s: the new engine's Pod started; a Probe's handlers ran in the runners %s after it", step.name, took.Round(time.Millisecond))
		// Seconds on a quiet machine: the engine's start and the runners'
		// next take; an agent that waits on the old engine takes minutes.
		if bound := clustertest.Scaled(30 * time.Second); took > bound {
			t.Errorf("%s: the Probe's handlers ran %s after the new engine's Pod started; want within %s", step.name, took.Round(time.Millisecond), bound)
		}
		after := in.history(t)
		if lost := missing(before.runs, after.runs); len(lost) > 0 {
			t.Errorf("%s: %d of %d runs recorded before are gone from the archive: %v", step.name, len(lost), len(before.runs), lost)
		}
		if lost := missing(before.deliveries, after.deliveries); len(lost) > 0 {
			t.Errorf("%s: %d of %d deliveries recorded before are gone from the archive: %v", step.name, len(lost), len(before.deliveries), lost)
		}
		if len(after.runs) < len(before.runs)+2 {
			t.Errorf("%s: the archive holds %d runs, %d before; want the Probe's two more", step.name, len(after.runs), len(before.runs))
		}
		before = after
	}
}

// apply applies the install again from its source, with options changed.
func (in *install) apply(t *testing.T, change func(*manifests.Options)) {
	t.Helper()
	opts := in.m.Options
	change(&opts)
	m, err := manifests.New(in.defs, opts)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := in.source.objects(t, m)
	if out, err := kubectl(t, "apply", "--server-side", "-f", file); err != nil {
		t.Fatalf("kubectl apply --server-side -f %s: %v\n%s", file, err, out)
	}
	in.m = m
}

// enginePod is the UID of the engine's running Pod.
func (in *install) enginePod(t *testing.T) string {
	t.Helper()
	var uid string
	clustertest.Eventually(t, time.Minute, "one engine Pod runs", func(ctx context.Context) (bool, error) {
		pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil
		}
		uid = string(pods.Items[0].UID)
		return true, nil
	})
	return uid
}

// waitNewEngine waits until the engine's Pod is another than old, alone
// and running, and returns when it started.
func (in *install) waitNewEngine(t *testing.T, old string) time.Time {
	t.Helper()
	var started time.Time
	clustertest.Eventually(t, 3*time.Minute, "a new engine Pod replaces "+old+" and runs", func(ctx context.Context) (bool, error) {
		pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 || string(pods.Items[0].UID) == old || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil
		}
		for _, cs := range pods.Items[0].Status.ContainerStatuses {
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt.Time
			}
		}
		return !started.IsZero(), nil
	})
	return started
}

// probeRuns creates a Probe and waits until both its handlers reported in
// its status: when they had.
func (in *install) probeRuns(t *testing.T, name string) time.Time {
	t.Helper()
	p := &unstructured.Unstructured{}
	p.SetAPIVersion("probe.example.com/v1")
	p.SetKind("Probe")
	p.SetNamespace(in.ns)
	p.SetName(name)
	if err := in.c.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	var reported time.Time
	clustertest.Eventually(t, 3*time.Minute, "both handlers of Probe "+name+" report", func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(p.GroupVersionKind())
		if err := in.c.Get(ctx, client.ObjectKeyFromObject(p), u); err != nil {
			return false, nil
		}
		status, _ := u.Object["status"].(map[string]any)
		_, bare := status["bare"]
		_, account := status["account"]
		reported = time.Now()
		return bare && account, nil
	})
	return reported
}

// history is what the archive holds: its runs' and deliveries' IDs.
type history struct {
	runs, deliveries map[string]bool
}

func (in *install) history(t *testing.T) history {
	t.Helper()
	ctx := t.Context()
	store := in.openArchive(t)
	h := history{runs: map[string]bool{}, deliveries: map[string]bool{}}
	runs, err := archive.ListAll(ctx, store, archive.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		h.runs[r.ID] = true
	}
	for q := (archive.DeliveryQuery{Limit: 1000}); ; {
		page, err := store.ListDeliveries(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			h.deliveries[d.ID] = true
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	return h
}

// missing lists the keys of before that after lacks (ten at most).
func missing(before, after map[string]bool) string {
	var out []string
	for id := range before {
		if !after[id] {
			out = append(out, id)
		}
	}
	if len(out) > 10 {
		out = append(out[:10], "…")
	}
	return strings.Join(out, ", ")
}
