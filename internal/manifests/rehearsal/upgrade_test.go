package rehearsal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
		old := in.engine(t)
		step.do(t)
		started := in.waitEngine(t, 3*time.Minute, "a new engine Pod replaces "+old.uid+" and runs", func(s engineState) bool { return s.uid != old.uid }).started
		took := in.probeRuns(t, fmt.Sprintf("after-%d", i)).Sub(started)
		t.Logf("%s: the new engine's Pod started; a Probe's handlers ran in the runners %s after it", step.name, took.Round(time.Millisecond))
		// Seconds on a quiet machine: the engine's start and the runners'
		// next take; an agent that waits on the old engine takes minutes.
		if bound := clustertest.Scaled(30 * time.Second); took > bound {
			t.Errorf("%s: the Probe's handlers ran %s after the new engine's Pod started; want within %s", step.name, took.Round(time.Millisecond), bound)
		}
		after := in.history(t)
		if lost := missing(before.runs, after.runs); len(lost) > 0 {
			t.Errorf("%s: %d of %d runs recorded before are gone from the archive: %s", step.name, len(lost), len(before.runs), some(lost))
		}
		if lost := missing(before.deliveries, after.deliveries); len(lost) > 0 {
			t.Errorf("%s: %d of %d deliveries recorded before are gone from the archive: %s", step.name, len(lost), len(before.deliveries), some(lost))
		}
		if len(after.runs) < len(before.runs)+2 {
			t.Errorf("%s: the archive holds %d runs, %d before; want the Probe's two more", step.name, len(after.runs), len(before.runs))
		}
		before = after
	}
	// The runs API the manifests serve, through the API server's
	// aggregation layer (which reaches its Service's ClusterIP through
	// the dev node): every run, from before the upgrades too.
	clustertest.Eventually(t, 2*time.Minute, "kubectl get runs lists every run the archive holds", func(context.Context) (bool, error) {
		out, err := kubectl(t, "get", "runs", "-A", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
		if err != nil {
			t.Logf("kubectl get runs: %v: %s", err, out)
			return false, nil
		}
		listed := map[string]bool{}
		for _, id := range strings.Fields(out) {
			listed[id] = true
		}
		if lost := missing(before.runs, listed); len(lost) > 0 {
			t.Logf("kubectl get runs lists %d runs; %d of the archive's %d are not among them: %s", len(listed), len(lost), len(before.runs), some(lost))
			return false, nil
		}
		return true, nil
	})
	// And opkit runs, from outside the cluster with its kubeconfig alone:
	// no --archive, no archive file on this side.
	cmd := exec.CommandContext(t.Context(), opkitLink, "runs", "--limit", "1000", "-o", "json")
	cmd.Env = append(os.Environ(), "OPKIT_ARCHIVE=", "KUBECONFIG="+plane.KubeconfigPath(), "HOME="+t.TempDir(), "XDG_STATE_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("opkit runs, no --archive: %v\n%s", err, stderr.String())
	}
	var page archive.Page
	if err := json.Unmarshal(stdout.Bytes(), &page); err != nil {
		t.Fatalf("opkit runs -o json: %v\n%s", err, stdout.String())
	}
	listed := map[string]bool{}
	for _, r := range page.Runs {
		listed[r.ID] = true
	}
	if lost := missing(before.runs, listed); len(lost) > 0 && page.Next == "" {
		t.Errorf("opkit runs, no --archive, lists %d runs; %d of the archive's %d are not among them: %s\n%s", len(listed), len(lost), len(before.runs), some(lost), stderr.String())
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

// engineState is the engine's one Pod, running: its UID, its
// container's restarts, and when the container last started.
type engineState struct {
	uid      string
	restarts int32
	started  time.Time
}

// waitEngine waits until the engine runs in one Pod, its container
// running, in a state that ok accepts, and returns that state.
func (in *install) waitEngine(t *testing.T, within time.Duration, what string, ok func(engineState) bool) engineState {
	t.Helper()
	var s engineState
	clustertest.Eventually(t, within, what, func(ctx context.Context) (bool, error) {
		pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || len(pods.Items[0].Status.ContainerStatuses) == 0 {
			return false, nil
		}
		p, cs := pods.Items[0], pods.Items[0].Status.ContainerStatuses[0]
		if cs.State.Running == nil {
			return false, nil
		}
		s = engineState{uid: string(p.UID), restarts: cs.RestartCount, started: cs.State.Running.StartedAt.Time}
		return ok(s), nil
	})
	return s
}

// engine is the engine's Pod as it runs now.
func (in *install) engine(t *testing.T) engineState {
	t.Helper()
	return in.waitEngine(t, time.Minute, "one engine Pod runs", func(engineState) bool { return true })
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

// history is what the archive holds: its runs' and deliveries' IDs (the
// runs Skipped or still in flight aside).
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
		// A Skipped run replaces the object's earlier Skipped runs of its
		// handler, by design (the deploy notifier's rechecks): kept
		// until the next. A run in flight may end Skipped, and go with
		// the next: only finished runs are held to stay.
		if r.Outcome != archive.Skipped && r.Outcome != archive.Running {
			h.runs[r.ID] = true
		}
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

// missing lists the keys of before that after lacks.
func missing(before, after map[string]bool) []string {
	var out []string
	for id := range before {
		if !after[id] {
			out = append(out, id)
		}
	}
	return out
}

// some is the first ten of ids, and how many more.
func some(ids []string) string {
	if len(ids) > 10 {
		return strings.Join(ids[:10], ", ") + fmt.Sprintf(" and %d more", len(ids)-10)
	}
	return strings.Join(ids, ", ")
}

// drainThroughReplacements: four drains of Items through the runners
// (each run half a second of python), and mid-drain, one each of: a
// changed flag applied, kubectl rollout restart, a runner Pod deleted,
// the engine's process SIGKILLed (its container restarted by the node).
// Every Item is handled, and succeeded once: a run interrupted is
// Cancelled and runs again with its key, never recorded Succeeded twice.
// After each replacement of the engine, the drain goes on within seconds
// of the new engine's start: the runners found it.
func (in *install) drainThroughReplacements(t *testing.T) {
	steps := []struct {
		name string
		do   func(t *testing.T) (engineReplaced bool)
	}{
		{"--run-events applied", func(t *testing.T) bool {
			in.apply(t, func(o *manifests.Options) { o.RunEvents = !o.RunEvents })
			return true
		}},
		{"kubectl rollout restart", func(t *testing.T) bool {
			if out, err := kubectl(t, "rollout", "restart", "-n", in.ns, "deployment/"+in.m.Options.Name); err != nil {
				t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
			}
			return true
		}},
		{"a runner Pod deleted", func(t *testing.T) bool {
			pods, err := in.cs.CoreV1().Pods(in.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opkit-runner,opkit.dev/operator=drain"})
			if err != nil || len(pods.Items) == 0 {
				t.Fatalf("the drain's runner Pods: %v (%d)", err, len(pods.Items))
			}
			if err := in.cs.CoreV1().Pods(in.ns).Delete(t.Context(), pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return false
		}},
		{"the engine SIGKILLed", func(t *testing.T) bool {
			killEngine(t, in.engine(t).uid)
			return true
		}},
	}
	const perStep = 60
	var all []string
	for i, step := range steps {
		names := in.createItems(t, fmt.Sprintf("s%d", i), perStep)
		all = append(all, names...)
		clustertest.Eventually(t, 2*time.Minute, step.name+": the drain under way (5 handled)", func(ctx context.Context) (bool, error) {
			return in.handled(ctx, names) >= 5, nil
		})
		old := in.engine(t)
		replaced := step.do(t)
		if replaced {
			// Another Pod, or the same one's container started again.
			started := in.waitEngine(t, 3*time.Minute, "the engine runs again", func(s engineState) bool {
				return s.uid != old.uid || s.restarts > old.restarts
			}).started
			before := in.handled(t.Context(), names)
			var progressed time.Time
			clustertest.Eventually(t, 3*time.Minute, step.name+": the drain goes on after the engine's start", func(ctx context.Context) (bool, error) {
				progressed = time.Now()
				return in.handled(ctx, names) > before || before == len(names), nil
			})
			took := progressed.Sub(started)
			t.Logf("%s: the drain went on %s after the new engine started", step.name, took.Round(100*time.Millisecond))
			if bound := clustertest.Scaled(30 * time.Second); took > bound {
				t.Errorf("%s: the drain went on %s after the new engine started; want within %s", step.name, took.Round(100*time.Millisecond), bound)
			}
		}
		clustertest.Eventually(t, 5*time.Minute, step.name+": every Item of the drain handled", func(ctx context.Context) (bool, error) {
			return in.handled(ctx, names) == len(names), nil
		})
	}

	// Once each: an interrupted run is Cancelled, never Succeeded twice.
	store := in.openArchive(t)
	var runs []archive.Run
	clustertest.Eventually(t, time.Minute, "no drain run left Running", func(ctx context.Context) (bool, error) {
		var err error
		runs, err = archive.ListAll(ctx, store, archive.Query{Operator: "drain"})
		if err != nil {
			return false, err
		}
		for _, r := range runs {
			if r.FinishedAt.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	succeeded := map[string]int{}
	outcomes := map[archive.Outcome]int{}
	for _, r := range runs {
		outcomes[r.Outcome]++
		if r.Outcome == archive.Succeeded {
			succeeded[r.Name]++
		}
	}
	t.Logf("the drain's %d runs: %v", len(runs), outcomes)
	for _, name := range all {
		if succeeded[name] != 1 {
			t.Errorf("Item %s succeeded %d times; want once", name, succeeded[name])
		}
	}
	for o, n := range outcomes {
		if o != archive.Succeeded && o != archive.Cancelled {
			t.Errorf("%d drain runs ended %s; want Succeeded, or Cancelled when interrupted", n, o)
		}
	}
}

// createItems creates n Items named PREFIX-NNN, eight at a time.
func (in *install) createItems(t *testing.T, prefix string, n int) []string {
	t.Helper()
	names := make([]string, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, 8)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			item := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "drain.example.com/v1", "kind": "Item",
				"metadata": map[string]any{"name": names[i], "namespace": in.ns}, "spec": map[string]any{"n": int64(i)},
			}}
			if err := in.c.Create(t.Context(), item); err != nil {
				t.Errorf("creating Item %s: %v", names[i], err)
			}
		})
	}
	wg.Wait()
	return names
}

// handled counts the Items of names whose status says handled.
func (in *install) handled(ctx context.Context, names []string) int {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("drain.example.com/v1")
	list.SetKind("ItemList")
	if err := in.c.List(ctx, list, client.InNamespace(in.ns)); err != nil {
		return 0
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	count := 0
	for _, it := range list.Items {
		if done, _, _ := unstructured.NestedBool(it.Object, "status", "handled"); done && want[it.GetName()] {
			count++
		}
	}
	return count
}

// killEngine sends SIGKILL to the engine's process, a process of this
// host the dev node runs for the Pod uid: the one whose $OPKIT_POD_ROOT
// is under the Pod's directory.
func killEngine(t *testing.T, uid string) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte("OPKIT_POD_ROOT=" + filepath.Join(plane.DataDir(), "pods", uid))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing the engine's process %d: %v", pid, err)
		}
		t.Logf("SIGKILLed the engine's process %d", pid)
		return
	}
	t.Fatalf("no process of the engine's Pod %s found (no $OPKIT_POD_ROOT under %s)", uid, marker)
}
