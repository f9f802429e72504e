package health

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A reconcile that fails is retried with a per-object back-off that
// doubles from 5 ms up to 1000 s (controller-runtime's). Through an API
// outage every reconcile fails, so an object whose reconcile kept failing
// for 40 s waits 40 s more before its next try, although the API server
// came back long before: its change (a run's outcome, say) stays
// unrecorded for as long again as the outage lasted. Watch events do not
// end the wait of an object that did not change. So each controller's
// queue remembers the objects that wait in back-off, and when the API
// server answers again (Watch) the engine retries them at once
// with their back-off reset: catching up takes seconds, whatever the
// outage's length.

// RetryQueues are the work queues of the engine's running controllers,
// which remember the objects that wait in back-off (see above).
type RetryQueues struct {
	mu  sync.Mutex
	set map[*retryQueue]struct{}
}

// Options returns a controller's options with a queue that takes part in
// RetryAll.
func (qs *RetryQueues) Options(r reconcile.Reconciler, workers int) controller.TypedOptions[reconcile.Request] {
	return controller.TypedOptions[reconcile.Request]{
		Reconciler:              r,
		MaxConcurrentReconciles: workers,
		SkipNameValidation:      ptr.To(true),
		NewQueue: func(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			q := &retryQueue{
				PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = limiter }),
				owner:         qs,
				failed:        map[reconcile.Request]struct{}{},
			}
			qs.mu.Lock()
			if qs.set == nil {
				qs.set = map[*retryQueue]struct{}{}
			}
			qs.set[q] = struct{}{}
			qs.mu.Unlock()
			return q
		},
	}
}

// RetryAll makes every object that waits in back-off ready now, with its
// back-off reset, and returns how many there were.
func (qs *RetryQueues) RetryAll() int {
	qs.mu.Lock()
	queues := make([]*retryQueue, 0, len(qs.set))
	for q := range qs.set {
		queues = append(queues, q)
	}
	qs.mu.Unlock()
	n := 0
	for _, q := range queues {
		n += q.retryNow()
	}
	return n
}

// retryQueue is a controller's priority queue that knows which objects
// wait in back-off: those added rate-limited since their last success.
type retryQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	owner *RetryQueues

	mu     sync.Mutex
	failed map[reconcile.Request]struct{}
}

func (q *retryQueue) AddRateLimited(req reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, req)
}

// AddWithOpts is how the controller queues a failed reconcile again.
func (q *retryQueue) AddWithOpts(o priorityqueue.AddOpts, reqs ...reconcile.Request) {
	if o.RateLimited {
		q.mu.Lock()
		for _, req := range reqs {
			q.failed[req] = struct{}{}
		}
		q.mu.Unlock()
	}
	q.PriorityQueue.AddWithOpts(o, reqs...)
}

// Forget is how the controller says a reconcile succeeded.
func (q *retryQueue) Forget(req reconcile.Request) {
	q.mu.Lock()
	delete(q.failed, req)
	q.mu.Unlock()
	q.PriorityQueue.Forget(req)
}

func (q *retryQueue) ShutDown() {
	q.owner.mu.Lock()
	delete(q.owner.set, q)
	q.owner.mu.Unlock()
	q.PriorityQueue.ShutDown()
}

// retryNow makes the objects in back-off ready now, their back-off reset.
// An item already waiting is moved up, not added twice.
func (q *retryQueue) retryNow() int {
	q.mu.Lock()
	reqs := make([]reconcile.Request, 0, len(q.failed))
	for req := range q.failed {
		reqs = append(reqs, req)
	}
	clear(q.failed)
	q.mu.Unlock()
	for _, req := range reqs {
		q.PriorityQueue.Forget(req)
	}
	q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{}, reqs...)
	return len(reqs)
}
