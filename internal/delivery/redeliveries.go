package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Redelivery on purpose: a person asks the engine to handle a delivery of
// its archive again (opkit events redeliver ID),
// by creating a Redelivery object (v1alpha1.RedeliveryCRD), so that RBAC
// says who may. The engine that acts (a standby applies no operator, so
// starts none of this) installs the CRD with its first operator that has
// a source, and answers each Redelivery of its namespaces once, in its
// status: Accepted, with the new delivery record's id, or Refused, with
// why. An accepted redelivery is recorded Pending with RedeliveryOf (the
// original), RedeliveredBy and RedeliveryReason, and queued as a delivery
// the sender sent: its source's object is applied again and the handlers
// on event of its source run again, under keys of their own
// (delivery.Key). An engine answers only the Redeliveries of the
// operators it runs: one of an operator it does not run (yet: at a start,
// Redeliveries are read before every operator is applied) is left to the
// engine that runs it, and read again whenever an operator with a source
// starts here (Redeliveries.Wake). Refused: an id the archive does not
// hold; a source the operator no longer has; a delivery
// still being handled (Pending, or its last redelivery Pending); a
// refused delivery that was refused before its signature was verified,
// or whose payload was cut; one the source's filter refuses now.

// Redeliveries answers the Redelivery objects: each once, with
// Receiver.Redeliver. Set the fields, then Start it (once an operator
// with a source is applied) and Wake it whenever one starts.
type Redeliveries struct {
	Receiver *Receiver
	Client   client.Client // writes the answers
	Reader   client.Reader // reads each Redelivery from the API server
	Cache    cache.Cache   // watches the Redeliveries
	// Namespace is the engine's one namespace ("" for all): the
	// Redeliveries of the others are not its own.
	Namespace string
	Log       logr.Logger
	// Queue is a controller's options with its reconciler and workers
	// (health.RetryQueues.Options).
	Queue func(r reconcile.Reconciler, workers int) controller.TypedOptions[reconcile.Request]
	// InstallCRD installs the Redelivery CRD, once.
	InstallCRD func(context.Context) error

	mu    sync.Mutex
	wakes chan event.GenericEvent // nil until started
}

// Start installs the Redelivery CRD (with ctx) and starts answering
// Redelivery objects until run ends, once.
func (r *Redeliveries) Start(ctx, run context.Context) error {
	r.mu.Lock()
	started := r.wakes != nil
	r.mu.Unlock()
	if started {
		return nil
	}
	if err := r.InstallCRD(ctx); err != nil {
		return err
	}
	c, err := controller.NewTypedUnmanaged("redeliveries", r.Queue(reconcile.Func(r.answer), 1))
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind))
	if err := c.Watch(crsource.Kind[client.Object](r.Cache, obj, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	wakes := make(chan event.GenericEvent, 64)
	if err := c.Watch(crsource.Channel(wakes, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wakes != nil {
		return nil
	}
	r.wakes = wakes
	go func() {
		if err := c.Start(run); err != nil && run.Err() == nil {
			r.Log.Error(err, "answering Redeliveries")
		}
	}()
	return nil
}

// Wake reads again each Redelivery not answered yet, once an operator
// with a source starts: those this engine left, since it did not run
// their operator then, are answered now if it is the one. It does
// nothing before Start.
func (r *Redeliveries) Wake(ctx context.Context) {
	r.mu.Lock()
	wakes := r.wakes
	r.mu.Unlock()
	if wakes == nil {
		return
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind + "List"))
	var opts []client.ListOption
	if r.Namespace != "" {
		opts = append(opts, client.InNamespace(r.Namespace))
	}
	if err := r.Cache.List(ctx, list, opts...); err != nil {
		// Not read: those not answered yet are read when the cache is,
		// as each object is when it is first seen.
		r.Log.V(1).Info("reading the Redeliveries again: " + err.Error())
		return
	}
	for i := range list.Items {
		obj := &list.Items[i]
		if _, status, err := v1alpha1.ReadRedelivery(obj); err != nil || status.Outcome != "" {
			continue
		}
		select {
		case wakes <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
			return
		}
	}
}

// answer answers one Redelivery, once: read from the API server, so that
// one answered is never answered again.
func (r *Redeliveries) answer(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind))
	if err := r.Reader.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if why := outsideNamespace(r.Namespace, obj.GetNamespace()); why {
		return reconcile.Result{}, nil
	}
	spec, status, err := v1alpha1.ReadRedelivery(obj)
	if err != nil || status.Outcome != "" {
		return reconcile.Result{}, nil
	}
	log := r.Log.WithValues("redelivery", req.String(), "delivery", spec.Delivery, "by", spec.By)
	answer := v1alpha1.RedeliveryStatus{At: time.Now().UTC().Format(time.RFC3339)}
	d, err := r.Receiver.Redeliver(ctx, spec.Delivery, spec.By, spec.Reason)
	var refusal *RedeliveryRefusal
	switch {
	case errors.Is(err, ErrElsewhere):
		log.V(1).Info("left for the engine that runs its operator: " + err.Error())
		return reconcile.Result{}, nil // read again when an operator starts here
	case errors.As(err, &refusal):
		answer.Outcome, answer.Reason = v1alpha1.RedeliveryRefused, refusal.Reason
		log.Info("redelivery refused: " + refusal.Reason)
	case err != nil:
		return reconcile.Result{}, err // tried again, with back-off
	default:
		answer.Outcome, answer.Redelivery = v1alpha1.RedeliveryAccepted, d.ID
		log.Info("redelivering", "as", d.ID, "reason", spec.Reason)
	}
	patch, err := json.Marshal(map[string]any{"status": answer})
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		// Recorded already when accepted: say so in the log, since the
		// next try would find it being handled.
		log.Error(err, "writing the Redelivery's answer")
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// outsideNamespace reports whether ns is outside the engine's namespace
// (Redeliveries.Namespace, "" for every one).
func outsideNamespace(namespace, ns string) bool {
	return namespace != "" && ns != namespace
}
