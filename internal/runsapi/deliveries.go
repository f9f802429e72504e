package runsapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// deliveries is the deliveries resource: every delivery is in the
// engine's namespace, as its operator's webhook sources are the
// engine's.
type deliveries struct {
	store     archive.Reader
	namespace string
}

var (
	deliveryLabels = map[string]string{runsv1alpha1.LabelOperator: "operator", runsv1alpha1.LabelSource: "source", runsv1alpha1.LabelOutcome: "outcome"}
	deliveryFields = map[string]string{"metadata.name": "name", "status.outcome": "outcome", "spec.operator": "operator", "spec.source": "source"}
)

// deliverySinceField selects the deliveries received at or after a time
// (RFC 3339), as runSinceField does runs.
const deliverySinceField = "status.receivedSince"

func (deliveries) resource() string { return deliveriesResource }
func (deliveries) kind() string     { return runsv1alpha1.DeliveryKind }

func (deliveries) parse(r *http.Request, namespace string) (*filter, error) {
	return parseSelection(r, namespace, deliveriesResource, deliveryLabels, deliveryFields, deliverySinceField)
}

// query is the archive's query of sel; ok is false when sel's namespace
// holds no delivery.
func (k deliveries) query(sel *filter) (archive.DeliveryQuery, bool) {
	q := archive.DeliveryQuery{Operator: sel.value("operator"), Source: sel.value("source"), Outcome: archive.DeliveryOutcome(sel.value("outcome")), Since: sel.since}
	return q, sel.namespace == "" || sel.namespace == k.namespace
}

func (k deliveries) get(ctx context.Context, id string) (*object, error) {
	return getByID(ctx, id, k.store.GetDelivery, k.object)
}

func (k deliveries) list(ctx context.Context, sel *filter, limit int, cursor string) ([]*object, string, error) {
	if name := sel.value("name"); name != "" {
		return named(ctx, k, sel, name)
	}
	q, ok := k.query(sel)
	if !ok {
		return nil, "", nil
	}
	q.Limit, q.Cursor = limit, cursor
	page, err := k.store.ListDeliveries(ctx, q)
	if err != nil {
		return nil, "", err
	}
	objs := make([]*object, len(page.Deliveries))
	for i := range page.Deliveries {
		objs[i] = k.object(&page.Deliveries[i])
	}
	return objs, page.Next, nil
}

func (k deliveries) unfinished(ctx context.Context, sel *filter) ([]*object, error) {
	return k.all(ctx, sel, func(q *archive.DeliveryQuery) { q.Outcome = archive.DeliveryPending })
}

func (k deliveries) since(ctx context.Context, sel *filter, t time.Time) ([]*object, error) {
	return k.all(ctx, sel, func(q *archive.DeliveryQuery) { q.Outcome, q.Since = "", later(t, sel.since) })
}

// all returns every delivery of sel's query, changed by edit, oldest
// first.
func (k deliveries) all(ctx context.Context, sel *filter, edit func(*archive.DeliveryQuery)) ([]*object, error) {
	q, ok := k.query(sel)
	if !ok {
		return nil, nil
	}
	edit(&q)
	q.Limit = 1000
	var objs []*object
	for {
		page, err := k.store.ListDeliveries(ctx, q)
		if err != nil {
			return nil, err
		}
		for i := range page.Deliveries {
			objs = append(objs, k.object(&page.Deliveries[i]))
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	slices.SortFunc(objs, func(a, b *object) int { return strings.Compare(a.id, b.id) })
	return objs, nil
}

// object is the API object of a delivery. Its payload and headers are
// not served.
func (k deliveries) object(d *archive.Delivery) *object {
	changed := d.ReceivedAt
	if !d.HandledAt.IsZero() {
		changed = d.HandledAt
	}
	api := &runsv1alpha1.Delivery{
		TypeMeta: metav1.TypeMeta{Kind: runsv1alpha1.DeliveryKind, APIVersion: runsv1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: d.ID, Namespace: k.namespace, CreationTimestamp: metav1.NewTime(d.ReceivedAt), ResourceVersion: resourceVersion(changed),
			Labels: labelsOf(map[string]string{runsv1alpha1.LabelOperator: d.Operator, runsv1alpha1.LabelSource: d.Source, runsv1alpha1.LabelOutcome: string(d.Outcome)}),
		},
		Spec: runsv1alpha1.DeliverySpec{
			Operator: d.Operator, Source: d.Source, DeliveryID: d.DeliveryID, Event: d.Event, PayloadBytes: d.PayloadBytes,
			PayloadTruncated: d.PayloadTruncated, RedeliveryOf: d.RedeliveryOf, RedeliveredBy: d.RedeliveredBy, RedeliveryReason: d.RedeliveryReason,
		},
		Status: runsv1alpha1.DeliveryStatus{
			Outcome: string(d.Outcome), Reason: d.Reason, ReceivedAt: metav1.NewTime(d.ReceivedAt), HandledAt: timeOrNil(d.HandledAt),
			Runs: d.Runs, Objects: d.Objects,
		},
	}
	reason := strings.ReplaceAll(d.Reason, "\n", " ")
	if len(reason) > 80 {
		reason = reason[:77] + "..."
	}
	return &object{
		id: d.ID, namespace: k.namespace, changed: changed, began: d.ReceivedAt, done: d.Outcome != archive.DeliveryPending,
		labels: labels.Set{runsv1alpha1.LabelOperator: d.Operator, runsv1alpha1.LabelSource: d.Source, runsv1alpha1.LabelOutcome: string(d.Outcome)},
		fields: fields.Set{
			"metadata.name": d.ID, "metadata.namespace": k.namespace, "status.outcome": string(d.Outcome),
			"spec.operator": d.Operator, "spec.source": d.Source,
		},
		meta: &api.ObjectMeta,
		api:  api,
		cells: []any{d.ID, d.Operator, d.Source, orText(d.Event, "-"), string(d.Outcome), int64(len(d.Runs)),
			startedAt(d.ReceivedAt), orText(reason, "-")},
	}
}

func (deliveries) columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The delivery's id in the archive."},
		{Name: "Operator", Type: "string"},
		{Name: "Source", Type: "string"},
		{Name: "Event", Type: "string"},
		{Name: "Outcome", Type: "string"},
		{Name: "Runs", Type: "integer", Description: "How many runs its handling started."},
		{Name: "Received", Type: "string", Description: "How long ago it came in."},
		{Name: "Reason", Type: "string"},
	}
}
