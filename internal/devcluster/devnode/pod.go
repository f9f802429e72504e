package devnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/internal/sleep"
)

// podWorker runs one Pod: it owns the Pod's directory, its container
// processes and its status. Its methods are safe for concurrent use.
type podWorker struct {
	node      *Node
	uid       types.UID
	namespace string
	name      string
	created   time.Time
	dir       string

	changed  chan struct{} // a new pod object arrived (capacity 1)
	stopping chan struct{} // closed when the node stops
	stopOnce sync.Once

	mu         sync.Mutex
	pod        *corev1.Pod
	gone       bool // the object was removed from the API
	containers []*container
	startTime  *metav1.Time
	prepared   bool
	renewAt    map[string]time.Time // projected volumes by name: when their tokens are renewed

	statusMu sync.Mutex // serializes status writes
}

func newPodWorker(n *Node, pod *corev1.Pod) *podWorker {
	w := &podWorker{
		node: n, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		created: pod.CreationTimestamp.Time, dir: filepath.Join(n.opts.Dir, string(pod.UID)),
		changed: make(chan struct{}, 1), stopping: make(chan struct{}), pod: pod,
	}
	for _, c := range pod.Spec.InitContainers {
		w.containers = append(w.containers, newContainer(w, c, true))
	}
	for _, c := range pod.Spec.Containers {
		w.containers = append(w.containers, newContainer(w, c, false))
	}
	return w
}

func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.notify()
}

func (w *podWorker) removed() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.notify()
}

func (w *podWorker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) current() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.gone
}

// deleting reports whether the pod is being deleted or is gone.
func (w *podWorker) deleting() bool {
	pod, gone := w.current()
	return gone || pod.DeletionTimestamp != nil
}

// shutdown kills the containers without touching the API: the node stops.
func (w *podWorker) shutdown(grace time.Duration) {
	w.stopOnce.Do(func() { close(w.stopping) })
	w.killAll(grace)
}

func (w *podWorker) killAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		wg.Add(1)
		go func() { defer wg.Done(); c.kill(grace) }()
	}
	wg.Wait()
}

// run drives the pod to its end: containers run while the pod lives; when it
// is deleted, they are stopped and the object is finally removed.
func (w *podWorker) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		w.runContainers(ctx)
	}()
	for {
		select {
		case <-ctx.Done():
			<-finished
			return
		case <-w.changed:
		}
		if w.deleting() {
			w.terminate(ctx)
			cancel()
			<-finished
			return
		}
	}
}

// runContainers prepares the pod's directory, runs the init containers in
// order, then the containers together, until all have finished for good.
func (w *podWorker) runContainers(ctx context.Context) {
	if w.isTerminal() {
		return
	}
	now := metav1.Now()
	w.mu.Lock()
	w.startTime = &now
	w.mu.Unlock()
	for {
		err := w.prepare(ctx)
		if err == nil {
			break
		}
		for _, c := range w.containers {
			c.setWaiting("CreateContainerConfigError", err.Error())
		}
		w.syncStatus(ctx)
		if !sleep.For(ctx, 2*time.Second) {
			return
		}
	}
	w.mu.Lock()
	w.prepared = true
	w.mu.Unlock()
	go w.renewTokens(ctx)
	w.syncStatus(ctx)

	policy := w.restartPolicy()
	for _, c := range w.containers {
		if !c.init {
			continue
		}
		// An init container must succeed; it restarts unless the policy is Never.
		if ok := c.loop(ctx, policy, true); !ok {
			w.syncStatus(ctx)
			return
		}
	}
	var wg sync.WaitGroup
	for _, c := range w.containers {
		if c.init {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.loop(ctx, policy, false) }()
	}
	wg.Wait()
	w.syncStatus(ctx)
}

func (w *podWorker) restartPolicy() corev1.RestartPolicy {
	pod, _ := w.current()
	if pod.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

func (w *podWorker) isTerminal() bool {
	pod, _ := w.current()
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// terminate stops the containers within the pod's grace period, reports the
// final status and removes the object, as a kubelet does for a deleted pod.
func (w *podWorker) terminate(ctx context.Context) {
	pod, gone := w.current()
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	w.killAll(grace)
	defer os.RemoveAll(w.dir)
	if gone {
		return
	}
	w.syncStatus(ctx)
	err := w.node.client.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(w.uid)},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Fprintf(w.node.opts.Log, "dev node: removing pod %s/%s: %v\n", w.namespace, w.name, err)
	}
}

// podPhase derives the pod phase from its containers, as a kubelet does.
func podPhase(statuses []corev1.ContainerStatus, initStatuses []corev1.ContainerStatus, policy corev1.RestartPolicy) corev1.PodPhase {
	for _, s := range initStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		if t := s.State.Terminated; t != nil && policy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodPending
	}
	var pending, running, succeeded, failed int
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil && s.State.Terminated.ExitCode == 0:
			succeeded++
		case s.State.Terminated != nil:
			failed++
		case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
			running++ // waiting to restart
		default:
			pending++
		}
	}
	switch {
	case pending > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case policy == corev1.RestartPolicyAlways:
		return corev1.PodRunning
	case failed > 0 && policy == corev1.RestartPolicyNever:
		return corev1.PodFailed
	case failed > 0:
		return corev1.PodRunning // OnFailure: restarting
	default:
		return corev1.PodSucceeded
	}
}

// status computes the pod status from the containers.
func (w *podWorker) status() corev1.PodStatus {
	pod, _ := w.current()
	w.mu.Lock()
	startTime, prepared := w.startTime, w.prepared
	w.mu.Unlock()
	st := corev1.PodStatus{
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP: w.node.podIP(), PodIPs: []corev1.PodIP{{IP: w.node.podIP()}},
		StartTime: startTime,
		QOSClass:  pod.Status.QOSClass,
	}
	for _, c := range w.containers {
		if c.init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, c.status())
		} else {
			st.ContainerStatuses = append(st.ContainerStatuses, c.status())
		}
	}
	if pod.DeletionTimestamp != nil {
		// Stopped for deletion: a kubelet reports every container terminated.
		for i := range st.ContainerStatuses {
			forceTerminated(&st.ContainerStatuses[i])
		}
	}
	policy := w.restartPolicy()
	st.Phase = podPhase(st.ContainerStatuses, st.InitContainerStatuses, policy)
	if pod.DeletionTimestamp != nil && st.Phase != corev1.PodSucceeded {
		st.Phase = corev1.PodFailed
	}

	initialized := st.Phase != corev1.PodPending || allInitDone(st.InitContainerStatuses)
	ready := st.Phase == corev1.PodRunning
	for _, s := range st.ContainerStatuses {
		ready = ready && s.Ready
	}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: now}
		if ok {
			c.Status = corev1.ConditionTrue
		} else {
			c.Reason = reason
		}
		// Keep the transition time while the status does not change.
		for _, old := range pod.Status.Conditions {
			if old.Type == t && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	notReadyReason := "ContainersNotReady"
	if st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed {
		notReadyReason = "PodCompleted"
	}
	ours := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, prepared, ""),
		cond(corev1.PodInitialized, initialized, "ContainersNotInitialized"),
		cond(corev1.ContainersReady, ready, notReadyReason),
		cond(corev1.PodReady, ready, notReadyReason),
	}
	for _, old := range pod.Status.Conditions {
		mine := false
		for _, c := range ours {
			mine = mine || c.Type == old.Type
		}
		if !mine {
			st.Conditions = append(st.Conditions, old) // PodScheduled, DisruptionTarget, ...
		}
	}
	st.Conditions = append(st.Conditions, ours...)
	return st
}

func allInitDone(statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return true
}

func forceTerminated(s *corev1.ContainerStatus) {
	if s.State.Terminated != nil {
		return
	}
	if s.State.Running != nil || s.LastTerminationState.Terminated == nil {
		s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "Error", Message: "stopped because the pod was deleted",
			FinishedAt: metav1.Now(),
		}}
	} else {
		s.State = s.LastTerminationState
	}
	s.Ready, s.Started = false, ptr.To(false)
}

// syncStatus writes the computed status with a merge patch of the status
// subresource, skipping the write when nothing changed.
func (w *podWorker) syncStatus(ctx context.Context) {
	w.statusMu.Lock()
	defer w.statusMu.Unlock()
	if _, gone := w.current(); gone {
		return
	}
	st := w.status()
	pod, _ := w.current()
	if statusEqual(pod.Status, st) {
		return
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return
	}
	updated, err := w.node.client.CoreV1().Pods(w.namespace).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if ctx.Err() == nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(w.node.opts.Log, "dev node: updating status of pod %s/%s: %v\n", w.namespace, w.name, err)
		}
		return
	}
	// An older informer event may follow; its status differs, so the next
	// sync re-sends this status, which the API server treats as a no-op.
	w.mu.Lock()
	w.pod = updated
	w.mu.Unlock()
}

// statusEqual compares two statuses ignoring condition timestamps.
func statusEqual(a, b corev1.PodStatus) bool {
	strip := func(s corev1.PodStatus) string {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
			s.Conditions[i].LastProbeTime = metav1.Time{}
		}
		data, _ := json.Marshal(s)
		return string(data)
	}
	return strip(a) == strip(b)
}
