package archive

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The SQLite archive's handler records (watched objects, schedules).

// The statements of handler records. A state is written as often as the
// engine handles its object; its statement is prepared.
const (
	putStateSQL = `INSERT INTO states (operator, state_key, api_version, kind, namespace, name, data, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (operator, state_key) DO UPDATE SET api_version = excluded.api_version, kind = excluded.kind,
			namespace = excluded.namespace, name = excluded.name, data = excluded.data, updated_at = excluded.updated_at`
	// putLaterStateSQL is putStateSQL for a run's Record: it replaces a
	// record no later than itself, never a later one.
	putLaterStateSQL = putStateSQL + ` WHERE excluded.updated_at >= states.updated_at`
	statesSQL        = `SELECT operator, state_key, api_version, kind, namespace, name, data, updated_at FROM states WHERE operator = ? ORDER BY state_key`
	deleteStateSQL   = `DELETE FROM states WHERE operator = ? AND state_key = ?`
)

// HandlerRecords returns an operator's handler records, ordered by key.
func (s *SQLite) HandlerRecords(ctx context.Context, operator string) ([]HandlerRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	rows, err := s.db.QueryContext(ctx, statesSQL, operator)
	if err != nil {
		return nil, fmt.Errorf("archive: handler records of operator %s: %w", operator, err)
	}
	defer func() { _ = rows.Close() }()
	states := []HandlerRecord{}
	for rows.Next() {
		var st HandlerRecord
		var updated int64
		if err := rows.Scan(&st.Operator, &st.Key, &st.APIVersion, &st.Kind, &st.Namespace, &st.Name, &st.Data, &updated); err != nil {
			return nil, fmt.Errorf("archive: handler records of operator %s: %w", operator, err)
		}
		st.UpdatedAt = fromNanos(updated)
		states = append(states, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: handler records of operator %s: %w", operator, err)
	}
	return states, nil
}

// prepareState checks a handler record about to be stored, and returns its
// time (a zero one is the time of the call) and its data (never nil: the
// column is NOT NULL, and a nil slice is bound as NULL); for stores.
func prepareState(st *HandlerRecord) (time.Time, []byte, error) {
	if st.Operator == "" || st.Key == "" {
		return time.Time{}, nil, fmt.Errorf("archive: handler record %q of operator %q: both the operator and the key must be set", st.Key, st.Operator)
	}
	updated := st.UpdatedAt
	if updated.IsZero() {
		updated = time.Now()
	}
	data := st.Data
	if data == nil {
		data = []byte{}
	}
	return updated, data, nil
}

// PutHandlerRecord inserts or replaces a handler record. Like a run's end, it is
// written while the archive's file is lost but still open: it is what
// was done, and goes with the file when the file is copied back.
func (s *SQLite) PutHandlerRecord(ctx context.Context, st *HandlerRecord) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	updated, data, err := prepareState(st)
	if err != nil {
		return err
	}
	err = s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.StmtContext(ctx, s.putState).ExecContext(ctx, st.Operator, st.Key, st.APIVersion, st.Kind, st.Namespace, st.Name, data, updated.UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("archive: recording state %s of operator %s: %w", st.Key, st.Operator, err)
	}
	return nil
}

// DeleteHandlerRecord deletes a handler record, if there is one.
func (s *SQLite) DeleteHandlerRecord(ctx context.Context, operator, key string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	err := s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, deleteStateSQL, operator, key)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive: deleting state %s of operator %s: %w", key, operator, err)
	}
	return nil
}
