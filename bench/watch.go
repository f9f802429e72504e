package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// The watch scenario: a watch operator (watch.yaml) and the baseline's
// hand-written watch (baseline.SetupWatch) on the same Deployments. Each
// reports every object it handles (stats.Handled): opkit each handler run
// that succeeded, as its archive recorded the end; the baseline its
// bookkeeping.

// watchWorkload is the watch scenario's definition for opkit; named to
// the baseline, it runs the baseline's watch.
const watchWorkload = "watch.yaml"

// watchLabels are the labels the watch selects: watch.yaml's selector.
var watchLabels = labels.Set{"team": "a"}

// watchOperator is watch.yaml's Operator.
const watchOperator = "bench-watch"

// watchSet is the watch scenario's Deployments: watched (labelled) and
// unwatched, all with 0 replicas, so that no Pod runs: the watch is
// measured, not Pods.
type watchSet struct {
	watched, unwatched []string
}

// watchSetup creates -watch-objects Deployments labelled team=a and a
// fifth as many without the label, and waits until kube-controller-manager
// has given each its ReplicaSet and status. The subjects of a run share
// them: that takes kube-controller-manager about 2 minutes for 600 (its
// client is limited to 20 requests/s), and its updates must not fall in a
// measurement.
func (b *bench) watchSetup(ctx context.Context) (*watchSet, error) {
	n := b.opts.WatchObjects
	w := &watchSet{watched: names("w", n), unwatched: names("u", max(n/5, 1))}
	if err := b.c.createDeployments(ctx, w.watched, watchLabels); err != nil {
		return nil, err
	}
	if err := b.c.createDeployments(ctx, w.unwatched, nil); err != nil {
		return nil, err
	}
	return w, b.c.waitDeploymentsObserved(ctx, len(w.watched)+len(w.unwatched))
}

// watch: the controller started on the Deployments of w. The time from
// its start until it handled every labelled one; its peak memory once it
// made no write for 5s; its writes and CPU over the -watch-steady window;
// then the image of every tenth labelled Deployment is changed, and the
// time from each change to its update handled. A write to a Deployment
// at any time, or any write in the steady window, fails the scenario,
// after its figures are recorded; so does an object handled other than
// once, or an unlabelled one handled. It returns once
// kube-controller-manager has caught up with the new images.
func (b *bench) watch(ctx context.Context, w *watchSet, im impl) error {
	n := len(w.watched)
	watched, unwatched := w.watched, w.unwatched
	path := "off"
	if im.Kind == "opkit" {
		path = tempArchive(b.workDir)
	}
	start := time.Now()
	c, err := b.startController(im, watchWorkload, path)
	if err != nil {
		return err
	}
	defer c.stop()

	creates, err := c.waitHandled(ctx, "create", since(watched, time.Time{}), b.timeout(n))
	if err != nil {
		return fmt.Errorf("%s: %w", im.Name, err)
	}
	var first, last time.Time
	for _, at := range creates {
		if at.After(last) {
			last = at
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	b.add("watch", im.Name, "first handled", "s", first.Sub(start).Seconds())
	b.add("watch", im.Name, "all handled once", "s", last.Sub(start).Seconds())
	b.add("watch", im.Name, "handled/s", "/s", float64(n)/last.Sub(start).Seconds())

	if err := c.settle(ctx); err != nil {
		return err
	}
	before, after, err := c.sample(ctx, b.opts.WatchSteady)
	if err != nil {
		return err
	}
	b.add("watch", im.Name, "peak RSS", "MiB", float64(before.MaxRSS)/(1<<20))
	if !im.isPeer() { // a peer's heap is not known
		b.add("watch", im.Name, "peak heap", "MiB", float64(before.HeapPeak)/(1<<20))
	}
	b.add("watch", im.Name, "writes at start", "", float64(before.Writes))
	fmt.Fprintf(b.log, "  writes at start: %v\n", before.WritesBy)
	window := time.Duration(after.At - before.At)
	steadyWrites := after.Writes - before.Writes
	b.add("watch", im.Name, "steady writes/min", "/min", float64(steadyWrites)/window.Minutes())
	steadyCPU := (after.CPUSecond - before.CPUSecond) / window.Seconds() // CPU seconds a second
	b.add("watch", im.Name, "steady CPU", "millicores", 1000*steadyCPU)
	// Its start and its first handling of every object, in CPU (the
	// settle's quiet seconds since, at the steady rate, taken out): the
	// hand-written watch's handling is a call, opkit's a run recorded.
	toAll := before.CPUSecond - steadyCPU*time.Duration(before.At-last.UnixNano()).Seconds()
	b.add("watch", im.Name, "CPU to all handled, per object", "ms", 1000*toAll/float64(n))
	var problems []error
	if steadyWrites > 0 {
		problems = append(problems, fmt.Errorf("%s made %d writes in the %s steady window: %v (at start: %v)", im.Name, steadyWrites, window.Round(time.Second), diff(after.WritesBy, before.WritesBy), before.WritesBy))
	}

	// A new image on every tenth labelled Deployment, all at once.
	var changed []string
	for i := 0; i < n; i += 10 {
		changed = append(changed, watched[i])
	}
	var mu sync.Mutex
	changedAt, writtenAt := map[string]time.Time{}, map[string]time.Time{}
	plane0, planeErr := b.planeSeconds()
	err = inParallel(ctx, len(changed), 16, func(ctx context.Context, i int) error {
		mu.Lock()
		changedAt[changed[i]] = time.Now()
		mu.Unlock()
		err := b.c.setImage(ctx, changed[i], "registry.invalid/bench:"+im.Name)
		mu.Lock()
		writtenAt[changed[i]] = time.Now()
		mu.Unlock()
		return err
	})
	if err != nil {
		return err
	}
	updates, err := c.waitHandled(ctx, "update", changedAt, time.Minute)
	if err != nil {
		return fmt.Errorf("%s: %w", im.Name, err)
	}
	var lat, afterWrite []time.Duration
	for name, at := range updates {
		lat = append(lat, at.Sub(changedAt[name]))
		afterWrite = append(afterWrite, at.Sub(writtenAt[name]))
	}
	b.addLatencies("", "watch", im.Name, "new image handled", lat, 50, 100)
	// The controller's part of it: from the API server's answer to the
	// write (its watch event goes out about then; a call may handle it
	// before the answer is read, below 0) to the update handled.
	// The rest is the API server's, whose answers to 16 writes at once
	// wait for the CPU its watchers take too.
	b.addLatencies("", "watch", im.Name, "new image handled after its write", afterWrite, 50)

	// What a handled status change or a second run would show.
	if !sleep.For(ctx, 2*time.Second) {
		return ctx.Err()
	}
	end, err := c.stats()
	if err != nil {
		return err
	}
	// What a change costs, from the writes to 2 s after the last was
	// handled (kube-controller-manager's updates of the changed
	// Deployments included, which every controller sees): the
	// controller's CPU beyond its steady state's, and the API server's.
	// On two cores they share, the API server's answers to the writes
	// wait for both.
	changeCPU := end.CPUSecond - after.CPUSecond - steadyCPU*time.Duration(end.At-after.At).Seconds()
	b.add("watch", im.Name, "CPU per change", "ms", 1000*max(changeCPU, 0)/float64(len(changed)))
	if plane1, err := b.planeSeconds(); err == nil && planeErr == nil {
		b.add("watch", im.Name, "API server CPU per change", "ms", 1000*(plane1-plane0)/float64(len(changed)))
	}
	for what, count := range end.WritesBy {
		if _, resource, _ := strings.Cut(what, " "); strings.HasPrefix(resource, "deployments") {
			problems = append(problems, fmt.Errorf("%s wrote to Deployments: %d× %s", im.Name, count, what))
		}
	}
	problems = append(problems, c.checkHandled(watched, unwatched, changed)...)
	c.stop()
	if im.Kind == "opkit" {
		problems = append(problems, checkWatchArchive(ctx, path, n, len(changed)))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w (log: %s)", err, c.log)
	}
	return b.c.waitDeploymentsObserved(ctx, len(watched)+len(unwatched))
}

// since maps each name to t.
func since(ns []string, t time.Time) map[string]time.Time {
	m := make(map[string]time.Time, len(ns))
	for _, n := range ns {
		m[n] = t
	}
	return m
}

// diff returns the counts of b that grew since a.
func diff(b, a map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b {
		if v > a[k] {
			out[k] = v - a[k]
		}
	}
	return out
}

// firstHandled returns, for each name of after, when the controller first
// reported it handled with trigger at or after after[name].
func (c *controller) firstHandled(trigger string, after map[string]time.Time) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Time{}
	for _, h := range c.handled {
		t0, ok := after[h.Name]
		if !ok || h.Trigger != trigger {
			continue
		}
		at := time.Unix(0, h.At)
		if _, seen := out[h.Name]; !seen && !at.Before(t0) {
			out[h.Name] = at
		}
	}
	return out
}

// waitHandled waits until every name of after was handled with trigger at
// or after after[name], and returns when each first was. It gives up when
// the controller exits.
func (c *controller) waitHandled(ctx context.Context, trigger string, after map[string]time.Time, timeout time.Duration) (map[string]time.Time, error) {
	var got map[string]time.Time
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if _, err := c.stats(); err != nil {
			return false, err
		}
		got = c.firstHandled(trigger, after)
		return len(got) == len(after), nil
	})
	if err != nil {
		return got, fmt.Errorf("after %s, %d of %d Deployments had their %s handled: %w (log: %s)", timeout, len(got), len(after), trigger, err, c.log)
	}
	return got, nil
}

// checkHandled reports the Deployments not handled as they should have
// been: each watched one created once, each changed one updated once,
// nothing else.
func (c *controller) checkHandled(watched, unwatched, changed []string) []error {
	c.mu.Lock()
	counts := map[[2]string]int{}
	for _, h := range c.handled {
		counts[[2]string{h.Name, h.Trigger}]++
	}
	c.mu.Unlock()
	var errs []error
	for k, count := range counts {
		name, trigger := k[0], k[1]
		want := 0
		switch {
		case trigger == "create" && slices.Contains(watched, name):
			want = 1
		case trigger == "update" && slices.Contains(changed, name):
			want = 1
		case slices.Contains(unwatched, name):
			errs = append(errs, fmt.Errorf("%s is not labelled, yet was handled on %s", name, trigger))
			continue
		}
		if count != want {
			errs = append(errs, fmt.Errorf("%s was handled on %s %d times, want %d", name, trigger, count, want))
		}
	}
	return errs
}

// checkWatchArchive checks what opkit's archive holds once it stopped: n
// create runs and u update runs, all succeeded, and one handler record per
// watched Deployment.
func checkWatchArchive(ctx context.Context, path string, n, u int) error {
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		return fmt.Errorf("opening opkit's archive: %w", err)
	}
	defer func() { _ = store.Close() }()
	var errs []error
	for trigger, want := range map[string]int{"create": n, "update": u} {
		all, err := archive.ListAll(ctx, store, archive.Query{Operator: watchOperator, Trigger: trigger})
		if err != nil {
			return fmt.Errorf("reading opkit's archive: %w", err)
		}
		runs, failed := len(all), 0
		for _, r := range all {
			if r.Outcome != archive.Succeeded {
				failed++
			}
		}
		if runs != want || failed > 0 {
			errs = append(errs, fmt.Errorf("opkit's archive holds %d %s runs (%d not succeeded), want %d succeeded", runs, trigger, failed, want))
		}
	}
	states, err := store.HandlerRecords(ctx, watchOperator)
	if err != nil {
		return fmt.Errorf("reading opkit's archive: %w", err)
	}
	if len(states) != n {
		errs = append(errs, fmt.Errorf("opkit's archive holds %d records of watched objects, want %d", len(states), n))
	}
	return errors.Join(errs...)
}

// deployment is a Deployment of no replicas: the watch is measured, not
// Pods.
func deployment(ns, name string, lbls labels.Set) *appsv1.Deployment {
	app := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: app},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: app},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/bench:1"}}},
			},
		},
	}
}

// createDeployments creates the named Deployments with the labels, from 16
// clients at once.
func (c *cluster) createDeployments(ctx context.Context, names []string, lbls labels.Set) error {
	return inParallel(ctx, len(names), 16, func(ctx context.Context, i int) error {
		if _, err := c.cs.AppsV1().Deployments(c.ns).Create(ctx, deployment(c.ns, names[i], lbls), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", names[i], err)
		}
		return nil
	})
}

// setImage sets the image of a Deployment's container (a strategic merge
// patch: no conflict with kube-controller-manager's status updates).
func (c *cluster) setImage(ctx context.Context, name, image string) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, image)
	if _, err := c.cs.AppsV1().Deployments(c.ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the image of Deployment %s: %w", name, err)
	}
	return nil
}

// waitDeploymentsObserved waits until the namespace holds n Deployments
// and kube-controller-manager has observed the generation of each.
func (c *cluster) waitDeploymentsObserved(ctx context.Context, n int) error {
	var pending int
	timeout := 2*time.Minute + time.Duration(n)*time.Second/2
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pending = n - len(list.Items)
		for _, d := range list.Items {
			if d.Status.ObservedGeneration < d.Generation {
				pending++
			}
		}
		return pending == 0, nil
	})
	if err != nil {
		return fmt.Errorf("after %s, kube-controller-manager has not yet observed %d of %d Deployments: %w", timeout, pending, n, err)
	}
	return nil
}
