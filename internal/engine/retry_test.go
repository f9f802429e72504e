package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// retryRecords lists the archive's records of retries of the object name.
func retryRecords(t *testing.T, store archive.Store, ns, name string) []archive.Run {
	t.Helper()
	page, err := store.List(t.Context(), archive.Query{Namespace: ns, Name: name, Handler: v1alpha1.RetryHandler, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}

// askRetry sets obj's retry annotation to value, as opkit retry does.
func askRetry(t *testing.T, env *clustertest.Env, obj client.Object, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.RetryAnnotation: value}}})
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// waitStalled waits until the custom resource obj is Stalled.
func waitStalled(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, what string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		c := condition(obj, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
}

// TestARetryOfACustomResourceIsRecordedOnceWithWhoAskedAndWhy asks for a
// retry of a stalled Task as opkit retry does, naming who and why: the
// engine records it once in the archive (handler opkit.retry, the actor,
// the reason in its log) and names both in its RetryRequested Event. A
// bare timestamp, as older CLIs wrote, still retries, recorded as asked
// by someone unknown.
func TestARetryOfACustomResourceIsRecordedOnceWithWhoAskedAndWhy(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)
	broken := task(env.Namespace, "broken", "broken", "x")
	create(t, env, broken)
	waitStalled(t, env, broken, "the broken Task is Stalled")

	askRetry(t, env, broken, v1alpha1.RetryRequest{By: "alice", Reason: "the disk is free again", At: time.Now().UTC().Format(time.RFC3339Nano)}.Value())
	const said = "retry asked by alice: the disk is free again"
	var recorded []archive.Run
	eventually(t, 60*time.Second, "the retry recorded in the archive and in an Event", func(ctx context.Context) (bool, error) {
		recorded = retryRecords(t, store, env.Namespace, "broken")
		return len(recorded) > 0 && hasEvent(ctx, env, "broken", "RetryRequested", said), nil
	})
	r := recorded[0]
	if r.Actor != "alice" || r.Trigger != v1alpha1.TriggerRetry || r.Outcome != archive.Succeeded || r.UID != string(broken.GetUID()) {
		t.Errorf("the retry is recorded as %+v; want actor alice, trigger retry, Succeeded, of the Task", r)
	}
	logs, err := logData(store.Logs(t.Context(), r.ID, 0))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(logs), "\n"); !strings.Contains(first, said) {
		t.Errorf("the retry's log begins %q, want who asked and why", first)
	}
	// It runs again from attempt 1, gives up again; the request was
	// recorded once across all those reconciles.
	recs := waitRecords(t, out, "broken", 4, "a run after the retry request")
	if recs[3].Attempt != 1 {
		t.Errorf("the retried run is attempt %d, want 1", recs[3].Attempt)
	}
	waitRecords(t, out, "broken", 6, "the retried handler's attempts")
	waitStalled(t, env, broken, "the broken Task Stalled again")
	if _, has := broken.GetAnnotations()[v1alpha1.RetryAnnotation]; has {
		t.Errorf("annotations %v; want the retry request consumed", broken.GetAnnotations())
	}
	if n := len(retryRecords(t, store, env.Namespace, "broken")); n != 1 {
		t.Errorf("%d records of one retry, want 1", n)
	}

	// An old-style value retries too, by someone unknown.
	askRetry(t, env, broken, time.Now().UTC().Format(time.RFC3339Nano))
	waitRecords(t, out, "broken", 7, "a run after the old-style retry request")
	eventually(t, 60*time.Second, "the old-style retry recorded", func(ctx context.Context) (bool, error) {
		recorded = retryRecords(t, store, env.Namespace, "broken")
		return len(recorded) == 2 && hasEvent(ctx, env, "broken", "RetryRequested", "retry asked by someone"), nil
	})
	if r := recorded[0]; r.Actor != "" || r.Trigger != v1alpha1.TriggerRetry {
		t.Errorf("the old-style retry is recorded as %+v; want no actor, trigger retry", r)
	}
}
