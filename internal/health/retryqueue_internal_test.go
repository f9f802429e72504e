package health

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestRetryAllMakesObjectsInBackOffReadyAtOnce(t *testing.T) {
	var qs RetryQueues
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Hour, time.Hour)
	q := qs.Options(nil, 1).NewQueue("test", limiter)
	failed := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "failed"}}

	q.AddRateLimited(failed) // waits an hour
	time.Sleep(50 * time.Millisecond)
	if q.Len() != 0 {
		t.Fatalf("an object in back-off is ready: queue length %d", q.Len())
	}
	if n := qs.RetryAll(); n != 1 {
		t.Fatalf("RetryAll retried %d objects; want 1", n)
	}
	got := make(chan reconcile.Request)
	go func() {
		req, _ := q.Get()
		got <- req
	}()
	select {
	case req := <-got:
		if req != failed {
			t.Fatalf("got %v; want %v", req, failed)
		}
		q.Done(req)
	case <-time.After(10 * time.Second):
		t.Fatal("the retried object was not ready")
	}
	if n := q.NumRequeues(failed); n != 0 {
		t.Errorf("the retried object's back-off counts %d failures; want it reset", n)
	}
	if n := qs.RetryAll(); n != 0 {
		t.Errorf("a second RetryAll retried %d objects; want none", n)
	}

	// A success forgets the object: nothing to retry.
	q.AddRateLimited(failed)
	q.Forget(failed)
	if n := qs.RetryAll(); n != 0 {
		t.Errorf("RetryAll retried %d objects after their success; want none", n)
	}

	// A queue shut down leaves the set.
	q.ShutDown()
	if len(qs.set) != 0 {
		t.Errorf("%d queues left after ShutDown; want none", len(qs.set))
	}
}
