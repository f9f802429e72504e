package delivery

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/tracing"
	"github.com/opkit-dev/opkit/internal/why"
)

// eventWorkers is how many deliveries an operator handles at once.
const eventWorkers = 4

// Queue is an operator's accepted deliveries waiting for a worker.
type Queue struct {
	opts Options
	def  *definition.Definition
	rn   *run.Runner // nil for an operator without handlers
	log  logr.Logger
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	waiting []archive.Delivery
	queued  map[string]bool // the ids waiting or being handled
	wake    chan struct{}
}

// Options are what a Queue acts with; every field is required.
type Options struct {
	// Archive holds the deliveries and the runs that handle them.
	Archive archive.Recorder
	// Client applies a source's object.
	Client client.Client
	// Namespace is the engine's Options.Namespace: a source's object
	// outside it is refused. "" for every namespace.
	Namespace string
	// Logger logs the queue's work, tagged with its operator.
	Logger logr.Logger
}

// Start starts the workers of d, an operator with sources, until ctx
// ends or Close: they first take its Pending deliveries from the archive,
// oldest first. rn runs its handlers; nil for an operator without any.
func Start(ctx context.Context, d *definition.Definition, rn *run.Runner, opts Options) (*Queue, error) {
	ctx, cancel := context.WithCancel(ctx)
	q := &Queue{
		opts: opts, def: d, rn: rn, log: opts.Logger.WithValues("operator", d.Operator.Name),
		ctx: ctx, stop: cancel, queued: map[string]bool{}, wake: make(chan struct{}, 1),
	}
	pending, err := opts.Archive.PendingDeliveries(ctx, d.Operator.Name)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("operator %s: reading its pending webhook deliveries from the archive: %w", d.Operator.Name, err)
	}
	if len(pending) > 0 {
		q.log.Info(fmt.Sprintf("handling %d webhook deliveries accepted before the engine (re)started", len(pending)))
	}
	for _, p := range pending {
		q.Add(p)
	}
	for range eventWorkers {
		q.wg.Go(q.work)
	}
	return q, nil
}

// Add queues an accepted delivery, unless it is queued already.
func (q *Queue) Add(d archive.Delivery) {
	q.mu.Lock()
	if !q.queued[d.ID] {
		q.queued[d.ID] = true
		q.waiting = append(q.waiting, d)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close stops the workers and waits for them: a delivery being handled
// stays Pending, for the next start.
func (q *Queue) Close() {
	q.stop()
	q.wg.Wait()
}

func (q *Queue) work() {
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.mu.Unlock()
			select {
			case <-q.ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		d := q.waiting[0]
		q.waiting = q.waiting[1:]
		more := len(q.waiting) > 0
		q.mu.Unlock()
		if more {
			select { // another worker may take the next one
			case q.wake <- struct{}{}:
			default:
			}
		}
		q.handle(d)
		q.mu.Lock()
		delete(q.queued, d.ID)
		q.mu.Unlock()
		if q.ctx.Err() != nil {
			return
		}
	}
}

// handle handles one accepted delivery and records how it ended, unless
// the engine stops first.
func (q *Queue) handle(d archive.Delivery) {
	ctx, span := handleSpan(q.ctx, &d)
	defer func() {
		if d.Outcome == archive.DeliveryFailed {
			tracing.Fail(span, d.Reason)
		}
		span.End()
	}()
	log := q.log.WithValues("source", d.Source, "delivery", d.ID, "deliveryId", d.DeliveryID)
	d.Outcome, d.Reason = archive.DeliveryHandled, ""
	src := q.def.EventSource(d.Source)
	if src == nil {
		d.Outcome, d.Reason = archive.DeliveryFailed, fmt.Sprintf("operator %s no longer has the source %s", q.def.Operator.Name, d.Source)
		q.finish(ctx, &d, log)
		return
	}
	// Checked as it was accepted; recorded by an older engine, perhaps not.
	payload, err := source.Payload(d.Payload)
	if err != nil {
		d.Outcome, d.Reason = archive.DeliveryFailed, "the recorded delivery: "+err.Error()
		q.finish(ctx, &d, log)
		return
	}
	headers := source.Headers(d.Headers)
	if src.Object != nil {
		vars := definition.EventVars{Payload: payload, Headers: headers, Event: d.Event, DeliveryID: d.DeliveryID, Source: d.Source}
		obj, err := q.applyObject(ctx, src, vars, d.ID, log)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.Outcome, d.Reason = archive.DeliveryFailed, err.Error()
			q.finish(ctx, &d, log)
			return
		}
		d.Objects = []string{obj}
	}
	ev := &run.EventContext{
		ID: d.ID, Source: d.Source, DeliveryID: d.DeliveryID, Event: d.Event, ReceivedAt: d.ReceivedAt.UTC().Format(time.RFC3339Nano),
		Headers: headers, Payload: d.Payload,
		RedeliveryOf: d.RedeliveryOf, RedeliveredBy: d.RedeliveredBy, RedeliveryReason: d.RedeliveryReason,
	}
	for _, h := range src.Handlers {
		out := q.rn.RunForOperator(ctx, run.OperatorRun{
			Handler: h, Trigger: v1alpha1.OnEvent, UID: d.ID,
			Key:   Key(q.def.Operator.Name, &d, h.Name),
			Log:   log.WithValues("handler", h.Name),
			Event: ev,
		})
		if out.Stopped {
			return // Pending: the next start handles it
		}
		if out.Run != nil && out.Run.Outcome == archive.GaveUp {
			d.Outcome, d.Reason = archive.DeliveryFailed, fmt.Sprintf("handler %s gave up: %s", h.Name, out.Run.Error)
			break
		}
		if out.Refuse != "" {
			d.Reason = fmt.Sprintf("refused by handler %s: %s", h.Name, out.Refuse)
			break
		}
	}
	q.finish(ctx, &d, log)
}

// Key is the idempotency key of handler's run on a delivery:
// <operator>/event/<source>/<delivery id>/<handler>, with the sender's
// delivery id, or the archive's id for a sender that gives none. A
// redelivery on purpose is handled anew, under a key of its own:
// <operator>/event/<source>/<delivery id>/redelivery/<its archive id>/<handler>.
func Key(operator string, d *archive.Delivery, handler string) string {
	id := d.DeliveryID
	if id == "" {
		id = d.ID
	}
	if d.RedeliveryOf != "" {
		id += "/redelivery/" + d.ID
	}
	return fmt.Sprintf("%s/event/%s/%s/%s", operator, d.Source, id, handler)
}

// Handling reports whether a delivery is queued or being handled.
func (q *Queue) Handling(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued[id]
}

// finish records how a delivery's handling ended, with every run of it the
// archive holds (those of an engine before a restart too), retried until
// the archive takes it or the engine stops.
func (q *Queue) finish(ctx context.Context, d *archive.Delivery, log logr.Logger) {
	d.HandledAt = time.Time{}
	for {
		runs, err := archive.DeliveryRuns(ctx, q.opts.Archive, q.def.Operator.Name, d.ID)
		if err == nil {
			d.Runs = runs
			err = q.opts.Archive.FinishDelivery(ctx, d)
		}
		if err == nil {
			if d.Outcome == archive.DeliveryFailed {
				log.Info("delivery failed: "+d.Reason, "runs", d.Runs)
			}
			return
		}
		log.Error(err, "recording the delivery's end; tried again in 5s")
		if !sleep.For(ctx, 5*time.Second) {
			return
		}
	}
}

// objectAttempts is how often a source's object is applied before the
// delivery fails.
const objectAttempts = 5

// applyObject creates or patches a source's object (server-side apply,
// its own field manager per source) and names it "Kind namespace/name".
// The object names the delivery (why.DeliveryAnnotation, its archive
// id) and carries its handling's trace (tracing.Annotation).
func (q *Queue) applyObject(ctx context.Context, src *definition.EventSource, vars definition.EventVars, delivery string, log logr.Logger) (string, error) {
	obj, err := src.Object.Render(vars)
	if err != nil {
		return "", fmt.Errorf("the source's object: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	name := u.GetKind() + " " + u.GetName()
	if u.GetNamespace() != "" {
		name = u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	}
	if why := outside(q.opts.Namespace, u.GetNamespace()); why != "" {
		return "", fmt.Errorf("the source's object %s: %s", name, why)
	}
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[why.DeliveryAnnotation] = delivery
	tracing.Annotate(ctx, a)
	u.SetAnnotations(a)
	owner := client.FieldOwner("opkit-source-" + src.Name)
	delay := time.Second
	for attempt := 1; ; attempt++ {
		err := q.opts.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), owner, client.ForceOwnership)
		switch {
		case err == nil:
			return name, nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
			return "", fmt.Errorf("applying %s: %s", name, run.APIMessage(err))
		case attempt >= objectAttempts:
			return "", fmt.Errorf("applying %s, %d attempts: %s", name, attempt, run.APIMessage(err))
		}
		log.Error(err, "applying the source's object; tried again", "object", name, "in", delay)
		if !sleep.For(ctx, delay) {
			return "", ctx.Err()
		}
		delay *= 2
	}
}

// outside says why an object in namespace ns is outside the engine's
// namespace; "" when it is not.
func outside(namespace, ns string) string {
	if namespace == "" || ns == "" || ns == namespace {
		return ""
	}
	return fmt.Sprintf("namespace %s is outside the engine's namespace %s (Options.Namespace)", ns, namespace)
}
