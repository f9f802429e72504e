package archive

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The statements of delivery records. Deliveries are far fewer than runs:
// they are not prepared, and a Pending one's cost is its sync to disk.
const (
	// recordDeliverySQL inserts a delivery, or nothing when an accepted
	// one has its key (deliveries_accepted): the index decides, so
	// concurrent replays cannot both pass a check made before the insert.
	// A redelivery (redelivery_of set) is outside the index, and never
	// conflicts.
	recordDeliverySQL = `INSERT INTO deliveries (id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, redelivery_of, redelivered_by, redelivery_reason, trace, payload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (operator, source, delivery_id) WHERE delivery_id != '' AND outcome != 'Refused' AND redelivery_of = '' DO NOTHING`
	finishDeliverySQL = `UPDATE deliveries SET outcome = ?, reason = ?, runs = ?, objects = ?, handled_at = ? WHERE id = ? AND outcome != 'Refused'`
	// The outcome is literal, as deliveries_pending's condition is.
	pendingDeliveriesSQL = `SELECT ` + deliveryColumns + `, payload FROM deliveries WHERE operator = ? AND outcome = 'Pending' ORDER BY id`
	getDeliverySQL       = `SELECT ` + deliveryColumns + `, payload FROM deliveries WHERE id = ?`
	// Through deliveries_redeliveries.
	redeliveriesSQL = `SELECT id FROM deliveries WHERE redelivery_of = ? AND redelivery_of != '' ORDER BY id`
	// The pruning of deliveries, by age and by count; Pending ones stay,
	// as running runs do.
	pruneDeliveriesByAgeSQL = `DELETE FROM deliveries WHERE id < ? AND outcome != 'Pending'`
	// By count, refused and accepted deliveries are counted apart, so that
	// a flood of forged deliveries cannot push out the accepted ones
	// (whose records recognise replays).
	pruneRefusedByCountSQL = `DELETE FROM deliveries WHERE outcome = 'Refused' AND id < (
		SELECT id FROM deliveries WHERE outcome = 'Refused' ORDER BY id DESC LIMIT 1 OFFSET ?)`
	pruneAcceptedByCountSQL = `DELETE FROM deliveries WHERE outcome IN ('Handled', 'Failed') AND id < (
		SELECT id FROM deliveries WHERE outcome != 'Refused' ORDER BY id DESC LIMIT 1 OFFSET ?)`
)

// deliveryColumns are the columns of a delivery but its payload, which is
// the table's last: a list that does not read it does not read its
// overflow pages either.
const deliveryColumns = `id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
	handled_at, payload_bytes, payload_truncated, headers, redelivery_of, redelivered_by, redelivery_reason, trace`

// errClosed is the archive's state after Close.
var errClosed = errors.New("archive: closed")

// RecordDelivery records a delivery as received. A Pending one is synced
// to disk before it returns (synchronous FULL for its commit; runs are
// written with NORMAL, which a crash of the engine cannot undo, but a
// crash of the machine can). Before it writes, it checks that the
// archive's file is still the one open, so that a delivery is never
// acknowledged into a deleted file.
func (s *SQLite) RecordDelivery(ctx context.Context, d *Delivery) error {
	if err := prepareDelivery(d, s.opts.PayloadLimit); err != nil {
		return err
	}
	what := fmt.Sprintf("archive: recording delivery %q of %s/%s", d.DeliveryID, d.Operator, d.Source)
	if err := s.Check(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.lost != nil {
		return fmt.Errorf("%s: %w", what, s.lost)
	}
	payload := d.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL; a nil slice is bound as NULL
	}
	conn, err := s.w.Conn(ctx) // the writer's one connection, for the pragmas around the insert
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = conn.Close() }()
	if d.Outcome == DeliveryPending {
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = NORMAL`) }()
	}
	res, err := conn.ExecContext(ctx, recordDeliverySQL, d.ID, d.Operator, d.Source, d.DeliveryID, nanos(d.ReceivedAt), string(d.Outcome),
		d.Reason, d.Event, marshal(d.Runs), marshal(d.Objects), nanos(d.HandledAt), d.PayloadBytes, d.PayloadTruncated, marshal(d.Headers),
		d.RedeliveryOf, d.RedeliveredBy, d.RedeliveryReason, d.Trace, payload)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: %w", what, ErrDuplicateDelivery)
	}
	return nil
}

// FinishDelivery records how a delivery's handling ended. Like a run's
// end, it is written while the archive's file is lost but still open: it
// is what was done, and goes with the file when the file is copied back.
func (s *SQLite) FinishDelivery(ctx context.Context, d *Delivery) error {
	if err := checkFinish(d); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	res, err := s.w.ExecContext(ctx, finishDeliverySQL, string(d.Outcome), d.Reason, marshal(d.Runs), marshal(d.Objects), nanos(d.HandledAt), d.ID)
	if err != nil {
		return fmt.Errorf("archive: finishing delivery %s: %w", d.ID, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var outcome string
	err = s.w.QueryRowContext(ctx, `SELECT outcome FROM deliveries WHERE id = ?`, d.ID).Scan(&outcome)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("archive: finishing delivery %s: %w", d.ID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("archive: finishing delivery %s: %w", d.ID, err)
	default:
		return fmt.Errorf("archive: finishing delivery %s: it was %s, and a delivery not accepted is never handled", d.ID, outcome)
	}
}

// PendingDeliveries returns an operator's Pending deliveries, oldest
// first.
func (s *SQLite) PendingDeliveries(ctx context.Context, operator string) ([]Delivery, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	out, err := s.queryDeliveries(ctx, true, pendingDeliveriesSQL, operator)
	if err != nil {
		return nil, fmt.Errorf("archive: pending deliveries of operator %s: %w", operator, err)
	}
	return out, nil
}

// GetDelivery returns one delivery, with its payload.
func (s *SQLite) GetDelivery(ctx context.Context, id string) (*Delivery, error) {
	d, err := s.getDelivery(ctx, id)
	if err != nil {
		return nil, err
	}
	ds := []Delivery{*d}
	if err := runsSoFar(ctx, s, ds); err != nil {
		return nil, err
	}
	return &ds[0], nil
}

func (s *SQLite) getDelivery(ctx context.Context, id string) (*Delivery, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	d, err := scanDelivery(s.db.QueryRowContext(ctx, getDeliverySQL, id), true)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delivery %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: delivery %s: %w", id, err)
	}
	if d.Redeliveries, err = s.ids(ctx, redeliveriesSQL, id); err != nil {
		return nil, fmt.Errorf("archive: delivery %s: its redeliveries: %w", id, err)
	}
	return d, nil
}

// ids returns the ids a query of one column of them selects, in its
// order; nil for none.
func (s *SQLite) ids(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// ListDeliveries returns the deliveries q selects, newest first, without
// their payloads.
func (s *SQLite) ListDeliveries(ctx context.Context, q DeliveryQuery) (*DeliveryPage, error) {
	page, err := s.listDeliveries(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := runsSoFar(ctx, s, page.Deliveries); err != nil {
		return nil, err
	}
	return page, nil
}

func (s *SQLite) listDeliveries(ctx context.Context, q DeliveryQuery) (*DeliveryPage, error) {
	return readList(s, q, func(where string, args []any, limit int) (*DeliveryPage, error) {
		all, err := s.queryDeliveries(ctx, false, listDeliveriesSQL(where), append(args, limit+1)...)
		if err != nil {
			return nil, fmt.Errorf("archive: listing deliveries: %w", err)
		}
		page := &DeliveryPage{}
		page.Deliveries, page.Next = cutPage(all, limit, deliveryID)
		return page, nil
	})
}

// listDeliveriesSQL is ListDeliveries' statement for a WHERE clause of
// DeliveryQuery.sql; its last parameter is the limit.
func listDeliveriesSQL(where string) string {
	return `SELECT ` + deliveryColumns + ` FROM deliveries` + where + ` ORDER BY id DESC LIMIT ?`
}

// turnedDown is the condition of the deliveries that were turned away:
// refused by the source's checks, or accepted and refused by a handler
// (Handled, with the handler's reason). It is the partial index
// deliveries_turned_down's condition, in both stores.
const turnedDown = "(outcome = 'Refused' OR outcome = 'Handled' AND reason != '')"

// sql turns a query into a WHERE clause with ? placeholders.
func (q DeliveryQuery) sql() (string, []any, int, error) {
	var w where
	// Through deliveries_operator. The source has no index of its own: an
	// operator has few sources, and its deliveries are read newest first
	// until the page is full.
	w.eq("operator", q.Operator)
	w.eq("source", q.Source)
	// Outcomes are literal, checked to be one of the four: SQLite uses a
	// partial index (deliveries_turned_down, deliveries_refused,
	// deliveries_pending) only for a condition it can see implies the
	// index's: turnedDown is the index's condition, word for word.
	if q.Refused {
		w.conds = append(w.conds, turnedDown)
	}
	if q.Outcome != "" {
		if !q.Outcome.known() {
			return "", nil, 0, fmt.Errorf("archive: delivery outcome %q is none of Pending, Handled, Failed, Refused", q.Outcome)
		}
		w.conds = append(w.conds, "outcome = '"+string(q.Outcome)+"'")
	}
	// Ids sort by the time received: time bounds are id bounds.
	if err := w.ids(q.Since, q.Until, q.Cursor); err != nil {
		return "", nil, 0, err
	}
	return w.sql(), w.args, pageLimit(q.Limit), nil
}

// queryDeliveries runs a query of deliveryColumns, and of the payload
// after them if withPayload.
func (s *SQLite) queryDeliveries(ctx context.Context, withPayload bool, query string, args ...any) ([]Delivery, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := []Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows, withPayload)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, rows.Err()
}

func scanDelivery(row scanner, withPayload bool) (*Delivery, error) {
	var d Delivery
	var outcome, runs, objects, headers string
	var received, handled int64
	dest := []any{&d.ID, &d.Operator, &d.Source, &d.DeliveryID, &received, &outcome, &d.Reason, &d.Event, &runs, &objects,
		&handled, &d.PayloadBytes, &d.PayloadTruncated, &headers, &d.RedeliveryOf, &d.RedeliveredBy, &d.RedeliveryReason, &d.Trace}
	if withPayload {
		dest = append(dest, &d.Payload)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	d.Outcome = DeliveryOutcome(outcome)
	d.ReceivedAt, d.HandledAt = fromNanos(received), fromNanos(handled)
	for _, f := range []struct {
		name string
		text string
		into any
	}{{"runs", runs, &d.Runs}, {"objects", objects, &d.Objects}, {"headers", headers, &d.Headers}} {
		if f.text == "" {
			continue
		}
		if err := json.Unmarshal([]byte(f.text), f.into); err != nil {
			return nil, fmt.Errorf("delivery %s: %s: %w", d.ID, f.name, err)
		}
	}
	return &d, nil
}

// pruneDeliveries deletes the deliveries, but the Pending ones, beyond the
// retention, counted apart from runs (and the refused apart from the
// accepted), and returns how many.
func (s *SQLite) pruneDeliveries(ctx context.Context, keep Retention) (int64, error) {
	var total int64
	if keep.MaxAge > 0 {
		res, err := s.w.ExecContext(ctx, pruneDeliveriesByAgeSQL, idPrefix(time.Now().Add(-keep.MaxAge)))
		if err != nil {
			return 0, fmt.Errorf("archive: pruning deliveries: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	if keep.MaxRuns > 0 {
		for _, q := range []string{pruneRefusedByCountSQL, pruneAcceptedByCountSQL} {
			res, err := s.w.ExecContext(ctx, q, keep.MaxRuns-1)
			if err != nil {
				return total, fmt.Errorf("archive: pruning deliveries: %w", err)
			}
			n, _ := res.RowsAffected()
			total += n
		}
	}
	return total, nil
}
