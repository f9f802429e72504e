package archive

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The SQLite archive's reads of runs: Get, List and its filters, Counts,
// and the idempotency keys' lookups.

// listSQL is List's statement for a WHERE clause of Query.sql; its last
// parameter is the limit.
func listSQL(where string) string {
	return `SELECT ` + runColumns + ` FROM runs` + where + ` ORDER BY id DESC LIMIT ?`
}

// sql turns a query into a WHERE clause with ? placeholders.
func (q Query) sql() (string, []any, int, error) {
	var w where
	w.eq("operator", q.Operator)
	w.eq("handler", q.Handler)
	w.eq("namespace", q.Namespace)
	if q.NoNamespace {
		if q.Namespace != "" {
			return "", nil, 0, fmt.Errorf("archive: a query for the runs of namespace %q and of no namespace at once: set one of Namespace and NoNamespace", q.Namespace)
		}
		// A literal, so that runs_object serves it as it serves a
		// namespace's runs.
		w.conds = append(w.conds, "namespace = ''")
	}
	w.eq("name", q.Name)
	w.eq("uid", q.UID)
	// Kind and trigger have no index: each would cost every run's insert a
	// fifth more, to spare a rare query. Without one, the runs are read
	// newest first until the page is full; a kind or trigger that no run
	// has reads all of them, some 40ms for 100k runs.
	w.eq("kind", q.Kind)
	w.eq("trigger_name", q.Trigger)
	w.eq("outcome", string(q.Outcome))
	if q.Failed {
		w.conds = append(w.conds, "failed = 1")
	}
	if err := w.ids(q.Since, q.Until, q.Cursor); err != nil {
		return "", nil, 0, err
	}
	return w.sql(), w.args, pageLimit(q.Limit), nil
}

// where is a WHERE clause being built, with ? placeholders.
type where struct {
	conds []string
	args  []any
}

// eq adds col = v, unless v is empty.
func (w *where) eq(col, v string) {
	if v != "" {
		w.conds = append(w.conds, col+" = ?")
		w.args = append(w.args, v)
	}
}

// ids bounds the ids: ids sort by time, so time bounds are id bounds, on
// the primary key; a page's cursor is the last id it returned.
func (w *where) ids(since, until time.Time, cursor string) error {
	if !since.IsZero() {
		w.conds = append(w.conds, "id >= ?")
		w.args = append(w.args, idPrefix(since))
	}
	if !until.IsZero() {
		w.conds = append(w.conds, "id < ?")
		w.args = append(w.args, idPrefix(until))
	}
	if cursor != "" {
		if !ValidID(cursor) {
			return fmt.Errorf("archive: cursor %q is not one this archive returned", cursor)
		}
		w.conds = append(w.conds, "id < ?")
		w.args = append(w.args, cursor)
	}
	return nil
}

// sql is the clause, "" without conditions.
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// pageLimit is a page's size: 50 unless asked, at most 1000.
func pageLimit(n int) int {
	switch {
	case n <= 0:
		return 50
	case n > 1000:
		return 1000
	}
	return n
}

// cutPage cuts rows, read one past a page of limit rows so as to know
// whether another page follows, to the page. It returns the page and the
// next page's cursor: the id of the page's last row, or "" on the last.
func cutPage[T any](rows []T, limit int, id func(T) string) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	return rows[:limit], id(rows[limit-1])
}

// runID and deliveryID are the ids cutPage makes cursors of.
func runID(r Run) string           { return r.ID }
func deliveryID(d Delivery) string { return d.ID }

const runColumns = `id, operator, handler, action, trigger_name, api_version, kind, namespace, name, uid, generation, idem_key, attempt, diff,
	started_at, finished_at, outcome, error, next_retry_at, writes, log_bytes, log_truncated, actor, runner, rerun_of, reason, trace`

// runDetailColumns are runColumns and what Get gives beside: the binding
// context and the result (scanRun's detail).
const runDetailColumns = runColumns + `, input, result`

type scanner interface{ Scan(...any) error }

// scanRun reads a row of runColumns, or of runDetailColumns when detail
// is set.
func scanRun(row scanner, detail ...bool) (*Run, error) {
	var r Run
	var diff, writes, outcome, input, result string
	var started, finished, retry int64
	dest := []any{&r.ID, &r.Operator, &r.Handler, &r.Action, &r.Trigger, &r.APIVersion, &r.Kind, &r.Namespace, &r.Name, &r.UID, &r.Generation,
		&r.Key, &r.Attempt, &diff, &started, &finished, &outcome, &r.Error, &retry, &writes, &r.LogBytes, &r.LogTruncated, &r.Actor, &r.Runner,
		&r.RerunOf, &r.Reason, &r.Trace}
	if len(detail) > 0 && detail[0] {
		dest = append(dest, &input, &result)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if input != "" {
		r.Input = json.RawMessage(input)
	}
	if result != "" {
		r.Result = json.RawMessage(result)
	}
	r.Outcome = Outcome(outcome)
	r.StartedAt, r.FinishedAt, r.NextRetryAt = fromNanos(started), fromNanos(finished), fromNanos(retry)
	if diff != "" {
		if err := json.Unmarshal([]byte(diff), &r.Diff); err != nil {
			return nil, fmt.Errorf("run %s: diff: %w", r.ID, err)
		}
		r.Diff = keptDiff(r.Diff) // as an older opkit may have kept it
	}
	if writes != "" {
		if err := json.Unmarshal([]byte(writes), &r.Writes); err != nil {
			return nil, fmt.Errorf("run %s: writes: %w", r.ID, err)
		}
	}
	return &r, nil
}

// List returns the runs q selects, newest first.
func (s *SQLite) List(ctx context.Context, q Query) (*Page, error) {
	return readList(s, q, func(where string, args []any, limit int) (*Page, error) {
		rows, err := s.db.QueryContext(ctx, listSQL(where), append(args, limit+1)...)
		if err != nil {
			return nil, fmt.Errorf("archive: listing runs: %w", err)
		}
		defer func() { _ = rows.Close() }()
		runs := []Run{}
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return nil, err
			}
			runs = append(runs, *r)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		page := &Page{}
		page.Runs, page.Next = cutPage(runs, limit, runID)
		return page, nil
	})
}

// listQuery is a query of a list read, Query or DeliveryQuery.
type listQuery interface {
	// sql turns the query into a WHERE clause with ? placeholders, its
	// arguments, and the page's size.
	sql() (where string, args []any, limit int, err error)
}

// readList runs read, a SQLite list read, with q's WHERE clause,
// arguments and page size, under the read lock that keeps the handles in
// place. A lost archive fails first, with why, then a query that is not
// one.
func readList[P any](s *SQLite, q listQuery, read func(where string, args []any, limit int) (P, error)) (P, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var none P
	if s.w == nil {
		return none, s.lost
	}
	where, args, limit, err := q.sql()
	if err != nil {
		return none, err
	}
	return read(where, args, limit)
}

// Counts returns each operator's runs since a time, and its failed ones.
func (s *SQLite) Counts(ctx context.Context, since time.Time) (map[string]Counts, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	// +operator keeps SQLite from scanning the whole runs_operator index
	// for the grouping: the id range on the primary key is the small part.
	rows, err := s.db.QueryContext(ctx, `SELECT operator, count(*), sum(failed) FROM runs WHERE id >= ? GROUP BY +operator`, idPrefix(since))
	if err != nil {
		return nil, fmt.Errorf("archive: counting runs: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]Counts{}
	for rows.Next() {
		var op string
		var c Counts
		if err := rows.Scan(&op, &c.Runs, &c.Failed); err != nil {
			return nil, fmt.Errorf("archive: counting runs: %w", err)
		}
		out[op] = c
	}
	return out, rows.Err()
}

// Succeeded reports whether a run with this idempotency key succeeded.
func (s *SQLite) Succeeded(ctx context.Context, key string) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return false, s.lost
	}
	var found bool
	err := s.succeeded.QueryRowContext(ctx, key).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("archive: %w", err)
	}
	return found, nil
}

// SucceededRun returns the latest run with this idempotency key that
// succeeded, or nil.
func (s *SQLite) SucceededRun(ctx context.Context, key string) (*Run, error) {
	s.mu.RLock()
	if s.w == nil {
		s.mu.RUnlock()
		return nil, s.lost
	}
	var id string
	err := s.succeededRun.QueryRowContext(ctx, key).Scan(&id)
	s.mu.RUnlock()
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive: the succeeded run of key %s: %w", key, err)
	}
	return s.Get(ctx, id)
}
