package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// CursorStore keeps the cursors of the sources an engine reaches out to
// and whose source keeps no position of its own (a GitHub poll's newest
// event handed to the engine): one per operator and source, replaced by
// each SetCursor. It is package source's Cursors. A cursor is not a run:
// neither retention nor CancelRunning touches it, and a SQLite archive
// replaced while in use carries it over with the handler records. Its
// methods are safe for concurrent use.
type CursorStore interface {
	// Cursor returns the cursor of an operator's source, "" when it has
	// none yet. An operator or source that SetCursor refuses is an error.
	Cursor(ctx context.Context, operator, source string) (string, error)
	// SetCursor records the cursor of an operator's source, replacing
	// the one before. Operator and source must be set; they and the
	// cursor are UTF-8 text without NUL bytes, which every store keeps
	// as it is given, and the cursor is at most 1 KiB; one that is not is
	// refused with an error wrapping ErrInvalidCursor, which says nothing
	// of the store.
	SetCursor(ctx context.Context, operator, source, cursor string) error
}

// ErrInvalidCursor is wrapped by the error of a cursor, operator or
// source a CursorStore refuses for what it is (too long, not text), not
// for the store's state: the source's value, not the archive, is wrong.
var ErrInvalidCursor = errors.New("invalid cursor")

// maxCursor is the longest cursor kept: a cursor is a position (an event
// id, an offset), never a payload.
const maxCursor = 1 << 10

// checkKey checks the operator and source of a cursor about to be read or
// stored; for stores. Both are text every store keeps as it is: UTF-8
// without NUL bytes, which PostgreSQL's text refuses (SQLite would keep
// them, and a cursor set in one archive would not move to the other).
func checkKey(operator, source string) error {
	switch {
	case operator == "" || source == "":
		return fmt.Errorf("archive: cursor of operator %q, source %q: both the operator and the source must be set: %w", operator, source, ErrInvalidCursor)
	case !isText(operator) || !isText(source):
		return fmt.Errorf("archive: cursor of operator %q, source %q: an operator's and a source's names are UTF-8 text without NUL bytes: %w", operator, source, ErrInvalidCursor)
	}
	return nil
}

// checkCursor checks a cursor about to be stored; for stores.
func checkCursor(operator, source, cursor string) error {
	if err := checkKey(operator, source); err != nil {
		return err
	}
	switch {
	case len(cursor) > maxCursor:
		return fmt.Errorf("archive: cursor of %s/%s is %d bytes long; a cursor is a position, at most %d bytes: %w", operator, source, len(cursor), maxCursor, ErrInvalidCursor)
	case !isText(cursor):
		return fmt.Errorf("archive: cursor of %s/%s, %q, is not UTF-8 text without NUL bytes; a cursor is a position, as text: %w", operator, source, cursor, ErrInvalidCursor)
	}
	return nil
}

// isText reports whether s is UTF-8 without NUL bytes.
func isText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

const (
	cursorSQL    = `SELECT cursor FROM source_cursors WHERE operator = ? AND source = ?`
	setCursorSQL = `INSERT INTO source_cursors (operator, source, cursor, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (operator, source) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at`

	pgCursorSQL    = `SELECT cursor FROM source_cursors WHERE operator = $1 AND source = $2`
	pgSetCursorSQL = `INSERT INTO source_cursors (operator, source, cursor, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (operator, source) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at`

	// carryCursorsSQL copies the attached archive's cursors, replacing
	// those of the same operator and source: the open file's are where
	// the running engine stands.
	carryCursorsSQL = `INSERT INTO main.source_cursors (operator, source, cursor, updated_at)
	SELECT operator, source, cursor, updated_at FROM recovered.source_cursors WHERE true
	ON CONFLICT (operator, source) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at`
)

// Cursor returns the cursor of an operator's source, "" when none.
func (s *SQLite) Cursor(ctx context.Context, operator, source string) (string, error) {
	if err := checkKey(operator, source); err != nil {
		return "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return "", s.lost
	}
	var cursor string
	err := s.db.QueryRowContext(ctx, cursorSQL, operator, source).Scan(&cursor)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("archive: cursor of %s/%s: %w", operator, source, err)
	}
	return cursor, nil
}

// SetCursor records the cursor of an operator's source. Like a state
// record, it is written while the archive's file is lost but still open:
// it goes with the file when the file is copied back.
func (s *SQLite) SetCursor(ctx context.Context, operator, source, cursor string) error {
	if err := checkCursor(operator, source, cursor); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	now := time.Now().UnixNano()
	err := s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, setCursorSQL, operator, source, cursor, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive: recording the cursor of %s/%s: %w", operator, source, err)
	}
	return nil
}

// Cursor returns the cursor of an operator's source, "" when none.
func (p *Postgres) Cursor(ctx context.Context, operator, source string) (string, error) {
	if err := checkKey(operator, source); err != nil {
		return "", err
	}
	var cursor string
	err := p.pool.QueryRow(ctx, pgCursorSQL, operator, source).Scan(&cursor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", p.fail(fmt.Sprintf("cursor of %s/%s", operator, source), err)
	}
	return cursor, nil
}

// SetCursor records the cursor of an operator's source.
func (p *Postgres) SetCursor(ctx context.Context, operator, source, cursor string) error {
	if err := checkCursor(operator, source, cursor); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, pgSetCursorSQL, operator, source, cursor, time.Now().UnixNano()); err != nil {
		return p.fail(fmt.Sprintf("recording the cursor of %s/%s", operator, source), err)
	}
	return nil
}
