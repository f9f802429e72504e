package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The SQLite archive's run logs: appended in pieces, their head and tail
// kept past the limit.

// AppendLog adds p to the run's log. Up to the limit it is kept whole;
// past it, the first LogHead bytes stay and the rest of the limit holds
// the latest bytes: older ones past the head are deleted, and a piece
// that straddles the cut is shortened to its part after it.
func (s *SQLite) AppendLog(ctx context.Context, id string, p []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return s.lost
	}
	if len(p) == 0 {
		return nil
	}
	return s.commit.write(ctx, s.w, func(ctx context.Context, tx *sql.Tx) error {
		return s.appendLog(ctx, tx, id, p)
	})
}

// appendLog is AppendLog's write, in tx.
func (s *SQLite) appendLog(ctx context.Context, tx *sql.Tx, id string, p []byte) error {
	var size int64
	var truncated bool
	err := tx.StmtContext(ctx, s.logHead).QueryRowContext(ctx, id).Scan(&size, &truncated)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("archive: log of run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("archive: log of run %s: %w", id, err)
	}
	limit, head := s.opts.LogLimit, s.opts.LogHead
	pieces, end, cut := placeLog(size, p, limit, head)
	for _, piece := range pieces {
		if _, err := tx.StmtContext(ctx, s.logInsert).ExecContext(ctx, id, piece.Pos, piece.Data); err != nil {
			return fmt.Errorf("archive: log of run %s: %w", id, err)
		}
	}
	if end > limit {
		truncated = true
		if _, err := tx.ExecContext(ctx, logCutSQL, id, head, cut); err != nil {
			return fmt.Errorf("archive: log of run %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, logShortenSQL, cut, cut, id, head, cut, cut); err != nil {
			return fmt.Errorf("archive: log of run %s: %w", id, err)
		}
	}
	if _, err := tx.StmtContext(ctx, s.logSize).ExecContext(ctx, end, truncated, id); err != nil {
		return fmt.Errorf("archive: log of run %s: %w", id, err)
	}
	return nil
}

// placeLog places data, appended to a log of size bytes, within the
// limits of both stores: up to limit bytes a log is kept whole; past it,
// its first head bytes stay and the rest of the limit holds its latest
// bytes. It returns the pieces of data to insert, in order, the log's new
// size, and the cut, where the kept tail starts (end, when all fits).
// Past the limit, the caller deletes the older pieces between the head
// and the cut, and shortens the one that straddles the cut.
func placeLog(size int64, data []byte, limit, head int64) (pieces []LogPiece, end, cut int64) {
	end = size + int64(len(data))
	cut = max(end-(limit-head), head) // the tail starts here
	if end <= limit {
		cut = end // all fits
	}
	add := func(pos int64, piece []byte) {
		if len(piece) > 0 {
			pieces = append(pieces, LogPiece{Pos: pos, Data: piece})
		}
	}
	pos := size
	if pos < head && cut > head {
		// The head's last piece ends at the head, exactly.
		n := head - pos
		add(pos, data[:n])
		data, pos = data[n:], head
	}
	if pos < cut && cut < end && pos >= head {
		data, pos = data[cut-pos:], cut // the start of data is cut already
	}
	add(pos, data)
	return pieces, end, cut
}

// The statements that keep a long log's tail: delete the pieces between
// the head and the cut, and shorten the one that straddles the cut.
const (
	logCutSQL     = `DELETE FROM logs WHERE run_id = ? AND pos >= ? AND pos + length(data) <= ?`
	logShortenSQL = `UPDATE logs SET data = substr(data, ? - pos + 1), pos = ? WHERE run_id = ? AND pos >= ? AND pos < ? AND pos + length(data) > ?`
)

// Logs returns the run's log from offset on.
func (s *SQLite) Logs(ctx context.Context, id string, offset int64) (*Log, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w == nil {
		return nil, s.lost
	}
	var truncated bool
	err := s.db.QueryRowContext(ctx, `SELECT log_truncated FROM runs WHERE id = ?`, id).Scan(&truncated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: log of run %s: %w", id, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT pos, data FROM logs WHERE run_id = ? AND pos + length(data) > ? ORDER BY pos`, id, offset)
	if err != nil {
		return nil, fmt.Errorf("archive: log of run %s: %w", id, err)
	}
	defer func() { _ = rows.Close() }()
	var pieces []LogPiece
	for rows.Next() {
		var p LogPiece
		if err := rows.Scan(&p.Pos, &p.Data); err != nil {
			return nil, err
		}
		pieces = append(pieces, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: log of run %s: %w", id, err)
	}
	l := JoinLog(offset, pieces)
	l.Truncated = truncated
	return l, nil
}
