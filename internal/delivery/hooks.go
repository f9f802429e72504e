package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/source"
	"github.com/opkit-dev/opkit/internal/tracing"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// The hooks listener receives the deliveries of the operators' webhook
// and cloudEvents sources on POST /hooks/<operator>/<source>
// (Receiver.ServeHTTP). The engine binds it when the first operator with
// such a source is applied (never for an engine without one), apart from
// the metrics and the console.
//
// A delivery is read within the source's body limit, its content type
// checked, its signature or token verified against the source's Secret,
// its delivery id and event read, its payload decoded and the source's
// filter applied. One it accepts is recorded Pending in the archive,
// durably, before it is answered 202: from then on its handling survives
// the engine's end (Queue). One it refuses is recorded Refused with
// the reason and answered with the status that says why:
//
//	401 a bad or missing signature or token
//	409 a replay: the sender's delivery id was accepted before (the
//	    reason says how to redeliver it on purpose: Redeliver)
//	413 a body larger than the source's limit
//	415 a content type that is not JSON
//	400 a body that is not JSON, or a malformed delivery id
//	200 filtered out: the sender did nothing wrong, the operator is not
//	    interested (answering an error would mark every other event of a
//	    GitHub webhook failed)
//
//	503 cannot be verified now (the source's Secret cannot be read): the
//	    sender should deliver again
//
// A cloudEvents source's request is read as package source's CloudEvents
// says (its delivery id the event's id and source, its event the type,
// its payload the data, its attributes ce-* headers), verified as a
// webhook's, and each of its events (one, or those of a batch its source
// splits) filtered and recorded as a delivery of its own before the
// request is answered: 415 also for a batch its source refuses, and for
// data that is neither JSON nor text; 400 also for an event without
// specversion 1.0, id, source or type. A batch is answered 202 when one
// of its events was accepted, with the answer to each (serveCloudEvents).
//
// Requests that do not reach a source are answered and not recorded: 404
// for an unknown operator or source, 405 for a method other than POST,
// 503 while the operator starts or the archive cannot record (the sender
// should deliver again).

// secretTTL is how long a source's secret is used before it is read
// again. A delivery that fails verification reads it again at once, so a
// rotated secret is picked up by the first delivery signed with it; those
// reads are limited to secretRereads a second (burst secretBurst) per
// Secret, so that forged deliveries cannot turn into a flood of reads.
const (
	secretTTL     = 30 * time.Second
	secretRereads = 10
	secretBurst   = 5
)

// refusedPayloadCap is how much of a refused delivery's body is recorded:
// enough to see what it was, little enough that a flood of refused
// deliveries cannot fill the archive.
const refusedPayloadCap = 64 << 10

// cachedSecret is a source's secret as last read.
type cachedSecret struct {
	value []byte
	read  time.Time
	// rereads limits the reads after a failed verification.
	rereads *rate.Limiter
}

// hookAnswer is the JSON body of every answer.
type hookAnswer struct {
	// Delivery is the archive's id of the record, when one was made.
	Delivery string `json:"delivery,omitempty"`
	// DeliveryID is the sender's delivery id, in the answer to an event
	// of a batch (Deliveries), where it says which event the answer is of.
	DeliveryID string `json:"deliveryId,omitempty"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason,omitempty"`
	// Deliveries are the answers to each event of a CloudEvents batch, in
	// its order.
	Deliveries []hookAnswer `json:"deliveries,omitempty"`
}

func answer(w http.ResponseWriter, status int, a hookAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// ServeHTTP receives one delivery: the hooks listener's handler.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/hooks/")
	opName, srcName, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || opName == "" || srcName == "" || strings.Contains(srcName, "/") {
		answer(w, http.StatusNotFound, hookAnswer{Outcome: "NotFound", Reason: "deliveries are posted to /hooks/<operator>/<source>"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(w, http.StatusMethodNotAllowed, hookAnswer{Outcome: "NotFound", Reason: "deliveries are POSTed"})
		return
	}
	def, queue, restarting := rc.Running(opName)
	if def == nil && restarting {
		answer(w, http.StatusServiceUnavailable, hookAnswer{Outcome: "Unavailable", Reason: "the operator is restarting; deliver again"})
		return
	}
	if def == nil {
		answer(w, http.StatusNotFound, hookAnswer{Outcome: "NotFound", Reason: fmt.Sprintf("no operator %q runs here", webhook.ClipName(opName))})
		return
	}
	src := def.EventSource(srcName)
	if src == nil {
		answer(w, http.StatusNotFound, hookAnswer{Outcome: "NotFound", Reason: fmt.Sprintf("operator %s has no source %q", opName, webhook.ClipName(srcName))})
		return
	}
	if src.Consumed() {
		answer(w, http.StatusNotFound, hookAnswer{Outcome: "NotFound", Reason: fmt.Sprintf("operator %s's source %s is a %s source: the engine takes its events, nothing is posted to it", opName, srcName, src.Kind)})
		return
	}
	cw := &countingWriter{ResponseWriter: w, operator: opName, source: srcName}
	w = cw
	ctx, span := receiveSpan(r.Context(), trace.SpanKindServer, "POST /hooks/{operator}/{source}", r.Header, hookAttributes(r, opName, srcName)...)
	r = r.WithContext(ctx)
	var d *archive.Delivery
	defer func() {
		if d != nil && d.ID != "" {
			recorded(span, d)
		}
		if span.IsRecording() && cw.status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", cw.status))
		}
		span.End()
	}()
	if queue == nil {
		answer(w, http.StatusServiceUnavailable, hookAnswer{Outcome: "Unavailable", Reason: "the operator is starting; deliver again"})
		return
	}
	d = &archive.Delivery{Operator: opName, Source: srcName, ReceivedAt: time.Now().UTC(), Headers: archive.RedactHeaders(r.Header, src.SignatureHeader)}
	d.Trace, _ = tracing.Traceparent(ctx)
	if src.Kind == definition.KindCloudEvents {
		rc.serveCloudEvents(w, r, queue, src, d)
		return
	}
	status, err := rc.check(r, src, d)
	if err != nil {
		rc.recordRefused(r.Context(), w, d, refusal(err))
		return
	}
	status, a, err := rc.accept(r.Context(), queue, d, status)
	if err != nil {
		answer(w, http.StatusServiceUnavailable, hookAnswer{Outcome: "Unavailable", Reason: "the archive cannot record the delivery; deliver again: " + err.Error()})
		return
	}
	answer(w, status, a)
}

// refusal is the refusal of a delivery that check could not accept: its
// *source.Refusal, or, for an error that is not the sender's fault, a
// 503 recorded, so that it is seen, and answered so that the sender
// delivers again.
func refusal(err error) *source.Refusal {
	var ref *source.Refusal
	if !errors.As(err, &ref) {
		ref = &source.Refusal{Status: http.StatusServiceUnavailable, Reason: "cannot be verified now: " + err.Error()}
	}
	return ref
}

// accept records a delivery that passed its checks Pending and queues it
// for its handlers: status (202) and its answer, or 409 and the answer of
// its refusal, recorded, when it is a replay. An error is the archive's:
// nothing is recorded, and the sender should deliver again.
func (rc *Receiver) accept(ctx context.Context, q *Queue, d *archive.Delivery, status int) (int, hookAnswer, error) {
	if err := rc.Archive.RecordDelivery(ctx, d); err != nil {
		if errors.Is(err, archive.ErrDuplicateDelivery) {
			// The refused record's id is known before it is recorded, so
			// that the answer can say how to handle it again on purpose.
			d.ID = archive.NewID(d.ReceivedAt)
			ref := &source.Refusal{Status: http.StatusConflict, Reason: reasonReplay + d.DeliveryID + ": it was accepted before" +
				"; to handle it again on purpose: opkit events redeliver " + d.ID + ", or the console's Redeliver button"}
			return ref.Status, rc.recordRefusal(ctx, d, ref), nil
		}
		return 0, hookAnswer{}, err
	}
	q.Add(*d)
	return status, hookAnswer{Delivery: d.ID, Outcome: string(d.Outcome)}, nil
}

// check reads and checks a delivery into d: 202 for one to accept, or a
// *source.Refusal (d then holds what was read of it), or another error
// when it cannot be checked now (its source's Secret cannot be read).
func (rc *Receiver) check(r *http.Request, src *definition.EventSource, d *archive.Delivery) (int, error) {
	body, err := source.ReadBody(r, src.MaxBodyBytes)
	d.Payload, d.PayloadBytes = body, max(r.ContentLength, int64(len(body)))
	if err != nil {
		return 0, err
	}
	if err := source.CheckContentType(r.Header); err != nil {
		return 0, err
	}
	// Read before verifying, so that a refused delivery is recorded
	// with them; a malformed one is refused once it is verified.
	var idErr error
	d.DeliveryID, d.Event, idErr = source.Identity(src, r.Header)
	if err := rc.verify(r.Context(), src, r.Header, body); err != nil {
		return 0, err
	}
	if idErr != nil {
		return 0, idErr
	}
	payload, err := source.Payload(body)
	if err != nil {
		return 0, err
	}
	vars := definition.EventVars{Payload: payload, Headers: source.Headers(r.Header), Event: d.Event, DeliveryID: d.DeliveryID, Source: src.Name}
	if ref := filter(src, vars); ref != nil {
		return 0, ref
	}
	return http.StatusAccepted, nil
}

// verify checks that a delivery of body comes from the holder of the
// source's secret: nil, a *source.Refusal (401), or an error when the
// secret cannot be read.
func (rc *Receiver) verify(ctx context.Context, src *definition.EventSource, h http.Header, body []byte) error {
	secret, fresh, err := rc.secret(ctx, src.Secret, false)
	if err != nil {
		return err
	}
	err = source.Verify(src, secret, h, body)
	if err != nil && !fresh {
		// Perhaps rotated: read it again, once, when the limit of rereads
		// allows. The failed verification stands unless the secret read
		// now verifies the delivery: a reread refused by the limit (a
		// flood of forged deliveries) leaves the delivery refused.
		again, fresh, rerr := rc.secret(ctx, src.Secret, true)
		if rerr != nil {
			return rerr
		}
		if fresh {
			err = source.Verify(src, again, h, body)
		}
	}
	if errors.Is(err, source.ErrNoSecret) {
		return fmt.Errorf("source %s: key %s of Secret %s/%s is empty: it verifies nothing", src.Name, src.Secret.Key, src.Secret.Namespace, src.Secret.Name)
	}
	return err
}

// filter applies the source's filter to a delivery: nil when it accepts
// it, the 200 refusal of one filtered out otherwise.
func filter(src *definition.EventSource, vars definition.EventVars) *source.Refusal {
	match, err := src.Accepts(vars)
	switch {
	case err != nil:
		return &source.Refusal{Status: http.StatusOK, Reason: reasonFiltered + ": the filter failed on it: " + err.Error()}
	case !match:
		return &source.Refusal{Status: http.StatusOK, Reason: reasonFiltered}
	}
	return nil
}

// recordRefused records a refused delivery and answers it.
func (rc *Receiver) recordRefused(ctx context.Context, w http.ResponseWriter, d *archive.Delivery, ref *source.Refusal) {
	answer(w, ref.Status, rc.recordRefusal(ctx, d, ref))
}

// recordRefusal records a refused delivery and returns its answer.
func (rc *Receiver) recordRefusal(ctx context.Context, d *archive.Delivery, ref *source.Refusal) hookAnswer {
	d.Outcome, d.Reason = archive.DeliveryRefused, ref.Reason
	if len(d.Payload) > refusedPayloadCap {
		d.Payload = d.Payload[:refusedPayloadCap]
	}
	if err := rc.Archive.RecordDelivery(ctx, d); err != nil {
		rc.Log.Error(err, "recording a refused delivery", "operator", d.Operator, "source", d.Source, "reason", d.Reason)
		d.ID = ""
	}
	return hookAnswer{Delivery: d.ID, Outcome: string(archive.DeliveryRefused), Reason: ref.Reason}
}

// serveCloudEvents receives a request to a cloudEvents source: one event
// (structured or binary mode), or the events of a batch (a Split
// source's), each checked by the filter and recorded as a delivery of its
// own (Pending, or Refused as filtered out or a replay) before the
// request is answered. req holds what is recorded of a request refused
// as a whole. One event is answered as a webhook's delivery is; a batch
// 202 when one of its events was accepted, else 409 when one was a
// replay, else 200, with each event's answer in its order.
func (rc *Receiver) serveCloudEvents(w http.ResponseWriter, r *http.Request, q *Queue, src *definition.EventSource, req *archive.Delivery) {
	ctx := r.Context()
	events, batch, err := rc.checkCloudEvents(r, src, req)
	if err != nil {
		rc.recordRefused(ctx, w, req, refusal(err))
		return
	}
	all := hookAnswer{Outcome: string(archive.DeliveryRefused)}
	status := http.StatusOK
	var replays []string
	for i, ev := range events {
		h := ev.Headers(r.Header)
		// The payload recorded is what handlers read (package delivery
		// decodes it again), the attributes are in the headers: a
		// redelivery and the handlers see what the filter saw.
		d := &archive.Delivery{
			Operator: req.Operator, Source: req.Source, ReceivedAt: req.ReceivedAt,
			DeliveryID: ev.DeliveryID, Event: ev.Type, Headers: archive.RedactHeaders(h, src.SignatureHeader),
			Payload: ev.Payload, PayloadBytes: int64(len(ev.Payload)), Trace: req.Trace,
		}
		endEvent := eventTrace(ctx, ev, d)
		vars := definition.EventVars{Payload: ev.Data, Headers: source.Headers(h), Event: d.Event, DeliveryID: d.DeliveryID, Source: src.Name}
		var a hookAnswer
		st := http.StatusAccepted
		if ref := filter(src, vars); ref != nil {
			st, a = ref.Status, rc.recordRefusal(ctx, d, ref)
		} else {
			st, a, err = rc.accept(ctx, q, d, st)
		}
		endEvent()
		if err != nil {
			reason := "the archive cannot record the delivery; deliver again: " + err.Error()
			if batch {
				reason = fmt.Sprintf("the archive cannot record event %d of the batch (%s); deliver the batch again (the events recorded before it are then refused as replays): %v", i+1, ev.DeliveryID, err)
			}
			answer(w, http.StatusServiceUnavailable, hookAnswer{Outcome: "Unavailable", Reason: reason, Deliveries: all.Deliveries})
			return
		}
		if !batch {
			answer(w, st, a)
			return
		}
		a.DeliveryID = ev.DeliveryID
		all.Deliveries = append(all.Deliveries, a)
		switch st {
		case http.StatusAccepted:
			status, all.Outcome = st, string(archive.DeliveryPending)
		case http.StatusConflict:
			replays = append(replays, ev.DeliveryID)
			if status != http.StatusAccepted {
				status = st
			}
		}
	}
	if len(replays) > 0 {
		all.Reason = fmt.Sprintf("%d of the batch's %d events are replays, accepted before: %s", len(replays), len(events), strings.Join(replays, ", "))
	}
	answer(w, status, all)
}

// checkCloudEvents reads and checks a request to a cloudEvents source:
// its events, and whether it is a batch; or a *source.Refusal of the
// request as a whole (req then holds what was read of it), or another
// error when it cannot be checked now. A content type it does not take
// is refused before the sender is verified, as a webhook's is; an event
// that cannot be read, or whose data is neither JSON nor text, only
// after.
func (rc *Receiver) checkCloudEvents(r *http.Request, src *definition.EventSource, req *archive.Delivery) ([]source.CloudEvent, bool, error) {
	body, err := source.ReadBody(r, src.MaxBodyBytes)
	req.Payload, req.PayloadBytes = body, max(r.ContentLength, int64(len(body)))
	if err != nil {
		return nil, false, err
	}
	split := src.CloudEvents != nil && src.CloudEvents.Batch == v1alpha1.BatchSplit
	if batch, err := source.CloudEventsMode(r.Header, split); err != nil {
		return nil, batch, err
	}
	events, batch, readErr := source.CloudEvents(r.Header, body, split)
	if readErr == nil && !batch {
		// Recorded with a refusal of its sender, as a webhook's are.
		req.DeliveryID, req.Event = events[0].DeliveryID, events[0].Type
	}
	if err := rc.verify(r.Context(), src, r.Header, body); err != nil {
		return nil, batch, err
	}
	if readErr != nil {
		return nil, batch, readErr
	}
	return events, batch, nil
}

// secret returns a source's secret, and whether it was read from the
// API now: it comes from the cache unless it is older than secretTTL, or
// reread asks for a new read and the limit of rereads allows one.
func (rc *Receiver) secret(ctx context.Context, ref v1alpha1.SecretKeySelector, reread bool) ([]byte, bool, error) {
	rc.mu.Lock()
	c, ok := rc.secrets[ref]
	rc.mu.Unlock()
	if ok && time.Since(c.read) < secretTTL && (!reread || !c.rereads.Allow()) {
		return c.value, false, nil
	}
	v, err := rc.ReadSecret(ctx, ref)
	if err != nil {
		return nil, false, err
	}
	rc.mu.Lock()
	if rc.secrets == nil {
		rc.secrets = map[v1alpha1.SecretKeySelector]cachedSecret{}
	}
	limiter := rc.secrets[ref].rereads
	if limiter == nil {
		limiter = rate.NewLimiter(secretRereads, secretBurst)
	}
	rc.secrets[ref] = cachedSecret{value: v, read: time.Now(), rereads: limiter}
	rc.mu.Unlock()
	return v, true, nil
}

// countingWriter counts a source's answers by status
// (opkit_webhook_deliveries_total).
type countingWriter struct {
	http.ResponseWriter
	operator, source string
	status           int // the answer's, once written
}

func (c *countingWriter) WriteHeader(status int) {
	c.status = status
	metrics().deliveries.WithLabelValues(c.operator, c.source, strconv.Itoa(status)).Inc()
	c.ResponseWriter.WriteHeader(status)
}
