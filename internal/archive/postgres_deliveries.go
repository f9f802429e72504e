package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements of delivery records; see sqlite_deliveries.go for why
// each is as it is.
const (
	// pgRecordDeliverySQL inserts a delivery, or nothing when an accepted
	// one has its key: the unique index deliveries_accepted decides, so
	// that of concurrent replays, from any number of engines, one only
	// is inserted.
	pgRecordDeliverySQL = `INSERT INTO deliveries (id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, redelivery_of, redelivered_by, redelivery_reason, trace, payload)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
		ON CONFLICT (operator, source, delivery_id) WHERE delivery_id <> '' AND outcome <> 'Refused' AND redelivery_of = '' DO NOTHING`
	// pgDurableCommitSQL makes the transaction's commit wait for its WAL
	// to be flushed when the session's synchronous_commit is off: any
	// other setting (on, local, remote_write, remote_apply) flushes it
	// on the server's disk already, and is kept.
	pgDurableCommitSQL = `SELECT set_config('synchronous_commit', 'on', true) WHERE current_setting('synchronous_commit') = 'off'`

	pgFinishDeliverySQL = `UPDATE deliveries SET outcome = $1, reason = $2, runs = $3, objects = $4, handled_at = $5
		WHERE id = $6 AND outcome <> 'Refused'`
	pgDeliveryOutcomeSQL   = `SELECT outcome FROM deliveries WHERE id = $1`
	pgPendingDeliveriesSQL = `SELECT ` + deliveryColumns + `, payload FROM deliveries WHERE operator = $1 AND outcome = 'Pending' ORDER BY id`
	pgGetDeliverySQL       = `SELECT ` + deliveryColumns + `, payload FROM deliveries WHERE id = $1`
	pgRedeliveriesSQL      = `SELECT id FROM deliveries WHERE redelivery_of = $1 AND redelivery_of <> '' ORDER BY id`

	// Pending deliveries are never pruned; by count, refused and accepted
	// deliveries are counted apart, so that a flood of forged deliveries
	// cannot push out the accepted ones, whose records recognise replays.
	pgPruneDeliveriesByAge = `DELETE FROM deliveries WHERE id < $1 AND outcome <> 'Pending'`
	pgPruneRefusedByCount  = `DELETE FROM deliveries WHERE outcome = 'Refused' AND id < (
		SELECT id FROM deliveries WHERE outcome = 'Refused' ORDER BY id DESC LIMIT 1 OFFSET $1)`
	pgPruneAcceptedByCount = `DELETE FROM deliveries WHERE outcome IN ('Handled', 'Failed') AND id < (
		SELECT id FROM deliveries WHERE outcome <> 'Refused' ORDER BY id DESC LIMIT 1 OFFSET $1)`
)

// RecordDelivery records a delivery as received. A Pending one is durable
// when it returns: its transaction commits with synchronous_commit on.
func (p *Postgres) RecordDelivery(ctx context.Context, d *Delivery) error {
	if err := prepareDelivery(d, p.opts.PayloadLimit); err != nil {
		return err
	}
	what := fmt.Sprintf("recording delivery %q of %s/%s", d.DeliveryID, d.Operator, d.Source)
	payload := d.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL; a nil slice is sent as NULL
	}
	args := []any{d.ID, d.Operator, d.Source, d.DeliveryID, nanos(d.ReceivedAt), string(d.Outcome), d.Reason, d.Event,
		marshal(d.Runs), marshal(d.Objects), nanos(d.HandledAt), d.PayloadBytes, d.PayloadTruncated, marshal(d.Headers),
		d.RedeliveryOf, d.RedeliveredBy, d.RedeliveryReason, d.Trace, payload}
	var inserted int64
	var err error
	if d.Outcome == DeliveryPending {
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgDurableCommitSQL); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, pgRecordDeliverySQL, args...)
			inserted = tag.RowsAffected()
			return err
		})
	} else {
		tag, execErr := p.pool.Exec(ctx, pgRecordDeliverySQL, args...)
		inserted, err = tag.RowsAffected(), execErr
	}
	if err != nil {
		return p.fail(what, err)
	}
	if inserted == 0 {
		return fmt.Errorf("archive: %s: %w", what, ErrDuplicateDelivery)
	}
	return nil
}

// FinishDelivery records how a delivery's handling ended.
func (p *Postgres) FinishDelivery(ctx context.Context, d *Delivery) error {
	if err := checkFinish(d); err != nil {
		return err
	}
	what := "finishing delivery " + d.ID
	tag, err := p.pool.Exec(ctx, pgFinishDeliverySQL, string(d.Outcome), d.Reason, marshal(d.Runs), marshal(d.Objects), nanos(d.HandledAt), d.ID)
	if err != nil {
		return p.fail(what, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var outcome string
	err = p.pool.QueryRow(ctx, pgDeliveryOutcomeSQL, d.ID).Scan(&outcome)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("archive: %s: %w", what, ErrNotFound)
	case err != nil:
		return p.fail(what, err)
	default:
		return fmt.Errorf("archive: %s: it was %s, and a delivery not accepted is never handled", what, outcome)
	}
}

// PendingDeliveries returns an operator's Pending deliveries, oldest
// first.
func (p *Postgres) PendingDeliveries(ctx context.Context, operator string) ([]Delivery, error) {
	out, err := p.queryDeliveries(ctx, true, pgPendingDeliveriesSQL, operator)
	if err != nil {
		return nil, p.fail("pending deliveries of operator "+operator, err)
	}
	return out, nil
}

// GetDelivery returns one delivery, with its payload.
func (p *Postgres) GetDelivery(ctx context.Context, id string) (*Delivery, error) {
	d, err := scanDelivery(p.pool.QueryRow(ctx, pgGetDeliverySQL, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("delivery %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, p.fail("delivery "+id, err)
	}
	if d.Redeliveries, err = p.ids(ctx, pgRedeliveriesSQL, id); err != nil {
		return nil, p.fail("the redeliveries of delivery "+id, err)
	}
	ds := []Delivery{*d}
	if err := runsSoFar(ctx, p, ds); err != nil {
		return nil, err
	}
	return &ds[0], nil
}

// ListDeliveries returns the deliveries q selects, newest first, without
// their payloads.
func (p *Postgres) ListDeliveries(ctx context.Context, q DeliveryQuery) (*DeliveryPage, error) {
	where, args, limit, err := q.sql()
	if err != nil {
		return nil, err
	}
	all, err := p.queryDeliveries(ctx, false, numbered(listDeliveriesSQL(where)), append(args, limit+1)...)
	if err != nil {
		return nil, p.fail("listing deliveries", err)
	}
	page := &DeliveryPage{}
	page.Deliveries, page.Next = cutPage(all, limit, deliveryID)
	if err := runsSoFar(ctx, p, page.Deliveries); err != nil {
		return nil, err
	}
	return page, nil
}

// queryDeliveries runs a query of deliveryColumns, and of the payload
// after them if withPayload.
func (p *Postgres) queryDeliveries(ctx context.Context, withPayload bool, query string, args ...any) ([]Delivery, error) {
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		d, err := scanDelivery(row, withPayload)
		if err != nil {
			return Delivery{}, err
		}
		return *d, nil
	})
	if out == nil {
		out = []Delivery{}
	}
	return out, err
}
