package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/tracing"
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
// on event of its source run again, under keys of their own (Key). An engine answers only the Redeliveries of the
// operators it runs: one of an operator it does not run (yet: at a start,
// Redeliveries are read before every operator is applied) is left to the
// engine that runs it, and read again whenever an operator with a source
// starts here. Refused: an id the archive does not
// hold; a source the operator no longer has; a delivery
// still being handled (Pending, or its last redelivery Pending); a
// refused delivery that was refused before its signature was verified,
// or whose payload was cut; one the source's filter refuses now.

// refusedAfterVerification are the starts of the reasons of deliveries
// refused once their sender was verified: those may be redelivered.
var refusedAfterVerification = []string{reasonFiltered, reasonReplay}

// Reasons the receiver records, in part.
const (
	reasonFiltered = "filtered out"
	reasonReplay   = "replay of delivery "
)

// RedeliveryRefusal is a redelivery the engine refuses, and why.
type RedeliveryRefusal struct{ Reason string }

func (r *RedeliveryRefusal) Error() string { return r.Reason }

// ErrElsewhere is the error of a delivery whose operator does not run in
// this engine: its Redelivery is left for the engine that runs it.
var ErrElsewhere = errors.New("does not run in this engine")

func refuseRedelivery(format string, args ...any) error {
	return &RedeliveryRefusal{Reason: fmt.Sprintf(format, args...)}
}

// Redeliver records the delivery id again as a redelivery by who, for
// why, and queues it; see above. A refusal is a *RedeliveryRefusal;
// another error (the archive cannot be read) may pass if tried again.
func (rc *Receiver) Redeliver(ctx context.Context, id, by, why string) (*archive.Delivery, error) {
	if rc.Deliveries == nil {
		return nil, refuseRedelivery("the engine's run archive does not read deliveries")
	}
	if strings.TrimSpace(by) == "" {
		return nil, refuseRedelivery("a redelivery must say who asks for it (spec.by)")
	}
	// One at a time: two requests for one delivery must not both pass the
	// check that none is being handled.
	rc.redeliverMu.Lock()
	defer rc.redeliverMu.Unlock()
	if !archive.ValidID(id) {
		return nil, refuseRedelivery("%q is not a delivery id: opkit events lists them", id)
	}
	d, err := rc.Deliveries.GetDelivery(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, refuseRedelivery("no delivery %s in the run archive: it was never received here, or retention pruned it", id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading delivery %s: %w", id, err)
	}
	def, q, restarting := rc.Running(d.Operator)
	switch {
	case def == nil && restarting:
		return nil, fmt.Errorf("operator %s is restarting", d.Operator)
	case def == nil:
		return nil, fmt.Errorf("operator %s of delivery %s %w", d.Operator, id, ErrElsewhere)
	}
	src := def.EventSource(d.Source)
	if src == nil {
		return nil, refuseRedelivery("operator %s no longer has the source %s of delivery %s", d.Operator, d.Source, id)
	}
	if q == nil {
		return nil, fmt.Errorf("operator %s is starting", d.Operator)
	}
	if d.Outcome == archive.DeliveryPending || q.Handling(id) {
		return nil, refuseRedelivery("delivery %s is still being handled (Pending): redeliver it once it is Handled or Failed", id)
	}
	if n := len(d.Redeliveries); n > 0 {
		last := d.Redeliveries[n-1]
		if q.Handling(last) {
			return nil, refuseRedelivery("redelivery %s of delivery %s is still being handled: redeliver it once that one is Handled or Failed", last, id)
		}
		if l, err := rc.Deliveries.GetDelivery(ctx, last); err == nil && l.Outcome == archive.DeliveryPending {
			return nil, refuseRedelivery("redelivery %s of delivery %s is still being handled (Pending): redeliver it once that one is Handled or Failed", last, id)
		}
	}
	if d.Outcome == archive.DeliveryRefused {
		verified := false
		for _, prefix := range refusedAfterVerification {
			verified = verified || strings.HasPrefix(d.Reason, prefix)
		}
		switch {
		case !verified:
			return nil, refuseRedelivery("delivery %s was refused before its sender was verified (%s): only a delivery filtered out or refused as a replay can be redelivered", id, d.Reason)
		case d.PayloadTruncated:
			return nil, refuseRedelivery("delivery %s was refused and the archive kept only the start of its payload: it cannot be handled", id)
		}
	}
	if err := stillAccepts(src, d); err != nil {
		return nil, err
	}
	r := &archive.Delivery{
		Operator: d.Operator, Source: d.Source, DeliveryID: d.DeliveryID, Event: d.Event, Headers: d.Headers,
		Payload: d.Payload, PayloadBytes: d.PayloadBytes, ReceivedAt: time.Now().UTC(), Outcome: archive.DeliveryPending,
		RedeliveryOf: d.ID, RedeliveredBy: by, RedeliveryReason: why,
	}
	// A person's request: a trace of its own, linked to the delivery's.
	ctx, span := tracing.Tracer().Start(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), "redeliver "+d.Source,
		trace.WithLinks(trace.Link{SpanContext: tracing.Parse(d.Trace)}), trace.WithNewRoot())
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opkit.operator", d.Operator), attribute.String("opkit.source", d.Source),
			attribute.String("opkit.delivery.redelivery_of", d.ID), attribute.String("opkit.actor", by))
	}
	defer span.End()
	r.Trace, _ = tracing.Traceparent(ctx)
	if err := rc.Archive.RecordDelivery(ctx, r); err != nil {
		return nil, fmt.Errorf("recording the redelivery of %s: %w", id, err)
	}
	q.Add(*r)
	return r, nil
}

// stillAccepts checks a recorded delivery against its source's filter as
// it is now.
func stillAccepts(src *definition.EventSource, d *archive.Delivery) error {
	payload, err := source.Payload(d.Payload)
	if err != nil {
		return refuseRedelivery("delivery %s: %v", d.ID, err)
	}
	vars := definition.EventVars{Payload: payload, Headers: source.Headers(d.Headers), Event: d.Event, DeliveryID: d.DeliveryID, Source: src.Name}
	match, err := src.Accepts(vars)
	switch {
	case err != nil:
		return refuseRedelivery("the filter of source %s fails on delivery %s: %v", src.Name, d.ID, err)
	case !match:
		return refuseRedelivery("the filter of source %s refuses delivery %s: filtered out", src.Name, d.ID)
	}
	return nil
}
