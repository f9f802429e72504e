package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// DeliveryOutcome is where a webhook delivery stands.
type DeliveryOutcome string

// Delivery outcomes. Pending, Handled and Failed deliveries were accepted
// (the sender was acknowledged); a Refused one was not, and is never
// handled.
const (
	// DeliveryPending: accepted and durably recorded, not handled yet.
	// An engine that starts handles its operators' Pending deliveries.
	DeliveryPending DeliveryOutcome = "Pending"
	// DeliveryHandled: handled; Runs and Objects say what it caused.
	DeliveryHandled DeliveryOutcome = "Handled"
	// DeliveryFailed: accepted, but its handling gave up; Reason says why.
	DeliveryFailed DeliveryOutcome = "Failed"
	// DeliveryRefused: not accepted; Reason says why (a bad signature, a
	// replay, filtered out, too large).
	DeliveryRefused DeliveryOutcome = "Refused"
)

// Accepted reports whether the delivery was accepted: Pending, Handled or
// Failed.
func (o DeliveryOutcome) Accepted() bool {
	return o == DeliveryPending || o == DeliveryHandled || o == DeliveryFailed
}

// TurnedDown reports whether d was turned away: Refused by the source's
// checks, or Handled with a Reason (a handler refused it). These are what
// DeliveryQuery.Refused selects.
func (d *Delivery) TurnedDown() bool {
	return d.Outcome == DeliveryRefused || d.Outcome == DeliveryHandled && d.Reason != ""
}

// known reports whether o is one of the four outcomes.
func (o DeliveryOutcome) known() bool { return o.Accepted() || o == DeliveryRefused }

// Delivery is the record of one webhook delivery received on
// POST /hooks/<operator>/<source>, accepted or refused, and of what its
// handling caused.
type Delivery struct {
	// ID is the archive's id of the record, NewID(ReceivedAt): ids sort by
	// the time received. RecordDelivery sets an empty one.
	ID string `json:"id"`
	// Operator is the operator the delivery was addressed to.
	Operator string `json:"operator"`
	// Source is the event source of that operator it came in on, e.g.
	// github.
	Source string `json:"source"`
	// DeliveryID is the sender's id of the delivery (GitHub's
	// X-GitHub-Delivery); with Operator and Source it is the idempotency
	// key. Empty for a sender that gives none: such a delivery is never
	// taken for a replay.
	DeliveryID string `json:"deliveryId,omitempty"`
	// ReceivedAt is when the delivery came in. RecordDelivery sets a zero
	// one to the time of the call.
	ReceivedAt time.Time `json:"receivedAt"`
	// Outcome is where the delivery stands. RecordDelivery takes Pending
	// (the default) or Refused; FinishDelivery sets Handled or Failed.
	Outcome DeliveryOutcome `json:"outcome"`
	// Reason says why a delivery was Refused ("bad signature", "replay of
	// delivery <id>", "filtered out", "body larger than 1.0 MiB",
	// "content type text/plain") or why its handling Failed; required for
	// both. A Handled delivery has one when a handler turned it down
	// ("refused by handler deploy: ..."): nothing was done.
	Reason string `json:"reason,omitempty"`
	// Event is the kind of event the sender says it is (GitHub's
	// X-GitHub-Event, e.g. issue_comment); empty if it says none.
	Event string `json:"event,omitempty"`
	// Headers are the request's headers, their credentials (signatures,
	// tokens) redacted by the caller: the archive stores what it is
	// given. An http.Header can be assigned.
	Headers map[string][]string `json:"headers,omitempty"`
	// Trace is the W3C traceparent of the delivery's receipt (package
	// tracing), which its handling continues, after a restart too; "" for
	// one recorded before opkit traced deliveries.
	Trace string `json:"trace,omitempty"`
	// Payload is the request's body as received: an accepted delivery's
	// handling reads it from here, after a restart too, so readers that
	// show it redact it (RedactPayload). A Refused delivery's is capped
	// by the store at Options.PayloadLimit: a longer one keeps its start;
	// an accepted one is kept whole (the source's body limit bounds it).
	// ListDeliveries leaves it out; GetDelivery and PendingDeliveries
	// return it.
	Payload []byte `json:"payload,omitempty"`
	// PayloadBytes is the size of the body as received. The caller may set
	// it above len(Payload) when it read only a part of the body (one too
	// large); RecordDelivery raises it to at least len(Payload).
	PayloadBytes int64 `json:"payloadBytes"`
	// PayloadTruncated says that Payload is not the whole body: the store
	// cut it at PayloadLimit, or the caller gave only a part of it.
	PayloadTruncated bool `json:"payloadTruncated,omitempty"`
	// Runs are the ids of the runs the delivery's handling started,
	// oldest first: those recorded so far while it is Pending (its
	// handlers' runs, retries included, found by the delivery's id).
	Runs []string `json:"runs,omitempty"`
	// Objects are the objects its handling created or patched, each as
	// "Kind namespace/name" ("Kind name" for a cluster-scoped one).
	Objects []string `json:"objects,omitempty"`
	// HandledAt is when its handling ended, Handled or Failed; zero before.
	// FinishDelivery sets a zero one to the time of the call.
	HandledAt time.Time `json:"handledAt,omitzero"`
	// RedeliveryOf is, for a delivery redelivered on purpose (opkit events
	// redeliver), the archive id of the delivery
	// it handles again; empty for one a sender sent. A redelivery has the
	// original's DeliveryID, Event, Headers and Payload, is recorded
	// Pending, and is never taken for a replay, nor makes a later one
	// of the sender's a replay.
	RedeliveryOf string `json:"redeliveryOf,omitempty"`
	// RedeliveredBy is who asked for a redelivery (the Kubernetes user),
	// and RedeliveryReason why, in their words; both set with
	// RedeliveryOf, and required with it.
	RedeliveredBy    string `json:"redeliveredBy,omitempty"`
	RedeliveryReason string `json:"redeliveryReason,omitempty"`
	// Redeliveries are the ids of the redeliveries of this delivery,
	// oldest first: the other end of their RedeliveryOf. GetDelivery
	// fills it; ListDeliveries and PendingDeliveries leave it out, and
	// RecordDelivery ignores it.
	Redeliveries []string `json:"redeliveries,omitempty"`
}

// DeliveryQuery selects deliveries. Zero fields do not filter.
type DeliveryQuery struct {
	Operator string
	Source   string
	// Refused selects every delivery that was turned away (opkit events
	// --refused): those Refused by the source's checks (a bad signature,
	// a replay, filtered out, too large), and those Handled with a
	// Reason, which a handler refused (nothing was done).
	Refused bool
	// Outcome selects the deliveries of one outcome.
	Outcome DeliveryOutcome
	// Since and Until bound the time received.
	Since, Until time.Time
	// Limit is the page size: defaults to 50, at most 1000.
	Limit int
	// Cursor is DeliveryPage.Next of the previous page.
	Cursor string
}

// DeliveryPage is one page of deliveries, newest first, without their
// payloads.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	// Next is the cursor of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// DefaultPayloadLimit is the default cap of a delivery's stored payload.
const DefaultPayloadLimit = 256 << 10

// ErrDuplicateDelivery is returned (wrapped) by RecordDelivery for an
// accepted delivery whose sender's id was accepted before: a replay.
var ErrDuplicateDelivery = errors.New("delivery already accepted")

// DeliveryRecorder keeps the record of every webhook delivery received,
// and is how an engine hands a delivery from the request that brought it
// to its handling, across a restart. Its methods are safe for concurrent
// use.
type DeliveryRecorder interface {
	// RecordDelivery records a delivery as received, Pending (accepted;
	// the default) or Refused (Reason required). Operator and Source must
	// be set. It sets an empty ID and a zero ReceivedAt, caps Payload at
	// Options.PayloadLimit and sets PayloadBytes and PayloadTruncated, on
	// d. A Pending record is durable when it returns, a crash of the
	// machine included: the caller acknowledges the sender only then. It
	// refuses (and records nothing) while the archive cannot keep what it
	// records (see SQLite.Check).
	//
	// A Pending delivery with a DeliveryID whose (Operator, Source,
	// DeliveryID) an accepted record already has is a replay: it returns
	// an error that wraps ErrDuplicateDelivery and stores nothing. The
	// caller then records it Refused, Reason "replay of delivery <id>". A
	// Refused record never conflicts, nor does an empty DeliveryID. Of
	// concurrent calls with the same key, exactly one is accepted. A key
	// is remembered as long as its accepted record is kept (Prune).
	RecordDelivery(ctx context.Context, d *Delivery) error
	// FinishDelivery records how an accepted delivery's handling ended:
	// Outcome (Handled or Failed; Failed needs a Reason), Reason, Runs,
	// Objects and HandledAt (a zero one is set to the time of the call,
	// on d). It may be called again, and replaces what the last call
	// recorded. An unknown id is ErrNotFound; a Refused delivery is an
	// error.
	FinishDelivery(ctx context.Context, d *Delivery) error
	// PendingDeliveries returns the operator's Pending deliveries with
	// their payloads, oldest first: what an engine handles when it
	// starts. None is an empty slice.
	PendingDeliveries(ctx context.Context, operator string) ([]Delivery, error)
}

// DeliveryReader reads the deliveries kept. Its methods are safe for
// concurrent use.
type DeliveryReader interface {
	// GetDelivery returns one delivery with its payload, or ErrNotFound.
	GetDelivery(ctx context.Context, id string) (*Delivery, error)
	// ListDeliveries returns the deliveries q selects, newest first,
	// without their payloads.
	ListDeliveries(ctx context.Context, q DeliveryQuery) (*DeliveryPage, error)
}

// DeliveryRuns returns the ids of the runs of operator's handlers on event
// for the delivery id (recorded with its id as their object's UID),
// oldest first: those of an engine before a restart too.
func DeliveryRuns(ctx context.Context, r interface {
	List(context.Context, Query) (*Page, error)
}, operator, id string) ([]string, error) {
	var ids []string
	q := Query{Operator: operator, Kind: v1alpha1.Kind, UID: id, Trigger: v1alpha1.OnEvent, Limit: 1000}
	for {
		page, err := r.List(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, run := range page.Runs {
			ids = append(ids, run.ID)
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	slices.Reverse(ids)
	return ids, nil
}

// runsSoFar sets the Runs of the Pending deliveries of ds to the runs
// recorded so far: a delivery's record lists its runs once its handling
// ends, and until then a reader sees them being made (a handler failing
// and retried) rather than none.
func runsSoFar(ctx context.Context, r interface {
	List(context.Context, Query) (*Page, error)
}, ds []Delivery) error {
	for i := range ds {
		if ds[i].Outcome != DeliveryPending {
			continue
		}
		ids, err := DeliveryRuns(ctx, r, ds[i].Operator, ds[i].ID)
		if err != nil {
			return fmt.Errorf("archive: the runs so far of delivery %s: %w", ds[i].ID, err)
		}
		ds[i].Runs = ids
	}
	return nil
}

// prepareDelivery checks a delivery about to be recorded and fills in
// what RecordDelivery fills in, its payload capped at limit; for stores.
func prepareDelivery(d *Delivery, limit int64) error {
	if d.Operator == "" || d.Source == "" {
		return fmt.Errorf("archive: delivery %q of operator %q, source %q: both the operator and the source must be set", d.DeliveryID, d.Operator, d.Source)
	}
	if d.Outcome == "" {
		d.Outcome = DeliveryPending
	}
	switch {
	case d.Outcome != DeliveryPending && d.Outcome != DeliveryRefused:
		return fmt.Errorf("archive: delivery %q of %s/%s: outcome %q; a delivery is recorded Pending or Refused, and finished Handled or Failed",
			d.DeliveryID, d.Operator, d.Source, d.Outcome)
	case d.Outcome == DeliveryRefused && d.Reason == "":
		return fmt.Errorf("archive: delivery %q of %s/%s is Refused without a reason: set Reason to why", d.DeliveryID, d.Operator, d.Source)
	case d.RedeliveryOf == "" && (d.RedeliveredBy != "" || d.RedeliveryReason != ""):
		return fmt.Errorf("archive: delivery %q of %s/%s names who redelivered it, but no RedeliveryOf: set the id of the delivery it redelivers", d.DeliveryID, d.Operator, d.Source)
	case d.RedeliveryOf == "":
	case !ValidID(d.RedeliveryOf):
		return fmt.Errorf("archive: delivery %q of %s/%s: RedeliveryOf %q is not one of NewID", d.DeliveryID, d.Operator, d.Source, d.RedeliveryOf)
	case d.Outcome != DeliveryPending:
		return fmt.Errorf("archive: redelivery of %s is %s: a redelivery is recorded Pending (a refused one is not recorded)", d.RedeliveryOf, d.Outcome)
	case d.RedeliveredBy == "":
		return fmt.Errorf("archive: redelivery of %s without RedeliveredBy: a redelivery says who asked for it", d.RedeliveryOf)
	}
	if d.ReceivedAt.IsZero() {
		d.ReceivedAt = time.Now()
	}
	if d.ID == "" {
		d.ID = NewID(d.ReceivedAt)
	} else if !ValidID(d.ID) {
		return fmt.Errorf("archive: delivery id %q is not one of NewID", d.ID)
	}
	d.PayloadBytes = max(d.PayloadBytes, int64(len(d.Payload)))
	if d.Outcome == DeliveryRefused && int64(len(d.Payload)) > limit {
		d.Payload = d.Payload[:limit]
	}
	if d.PayloadBytes > int64(len(d.Payload)) {
		d.PayloadTruncated = true
	}
	return nil
}

// checkFinish checks a delivery's end about to be recorded, and sets a
// zero HandledAt; for stores.
func checkFinish(d *Delivery) error {
	switch {
	case d.Outcome != DeliveryHandled && d.Outcome != DeliveryFailed:
		return fmt.Errorf("archive: finishing delivery %s: outcome %q; a delivery's handling ends Handled or Failed", d.ID, d.Outcome)
	case d.Outcome == DeliveryFailed && d.Reason == "":
		return fmt.Errorf("archive: finishing delivery %s as Failed without a reason: set Reason to why", d.ID)
	}
	if d.HandledAt.IsZero() {
		d.HandledAt = time.Now()
	}
	return nil
}
