package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" driver, the archive's own

	"github.com/opkit-dev/opkit/internal/archive"
)

// pgLoader loads a PostgreSQL archive through a connection of its own, a
// COPY (pgx's CopyFrom, binary) per loadBatch rows.
type pgLoader struct {
	conn *pgx.Conn
}

func (l *pgLoader) load(ctx context.Context, n int, next func() *archive.Run) error {
	for done := 0; done < n; done += loadBatch {
		k := min(loadBatch, n-done)
		copied, err := l.conn.CopyFrom(ctx, pgx.Identifier{"runs"}, runColumns, pgx.CopyFromSlice(k, func(int) ([]any, error) {
			return runValues(next()), nil
		}))
		if err != nil {
			return err
		}
		if copied != int64(k) {
			return fmt.Errorf("COPY wrote %d runs of %d", copied, k)
		}
	}
	return nil
}

func (l *pgLoader) row(ctx context.Context, id string) (map[string]any, error) {
	rows, err := l.conn.Query(ctx, `SELECT * FROM runs WHERE id = $1`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, errors.Join(fmt.Errorf("run %s: not found", id), rows.Err())
	}
	values, err := rows.Values()
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(values))
	for i, fd := range rows.FieldDescriptions() {
		out[fd.Name] = values[i]
	}
	return out, nil
}

func (l *pgLoader) remove(ctx context.Context, ids ...string) error {
	_, err := l.conn.Exec(ctx, `DELETE FROM runs WHERE id = ANY($1)`, ids)
	return err
}

func (l *pgLoader) settle(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, `VACUUM (ANALYZE) runs`)
	return err
}

func (l *pgLoader) settling() string { return "VACUUM (ANALYZE)" }

// size is the archive's tables', with their indexes and TOAST, in the
// schema the store uses (the first of the search path); not the WAL.
func (l *pgLoader) size(ctx context.Context) (int64, error) {
	var n int64
	err := l.conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE c.relkind = 'r' AND s.nspname = current_schema()`).Scan(&n)
	return n, err
}

func (l *pgLoader) close() { _ = l.conn.Close(context.Background()) }
