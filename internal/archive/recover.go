package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// watch runs Check every Options.CheckEvery until Close.
func (s *SQLite) watch() {
	defer close(s.stopped)
	t := time.NewTicker(s.opts.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = s.Check(ctx)
		cancel()
	}
}

// Check verifies that the file at the archive's path is the one open, and
// recovers when it is not. A file deleted while in use (rm runs.db) lives
// on as long as it is open, and every run recorded into it would be lost
// when the engine stops: so its records, the new ones included, are copied
// to a new file at the path (VACUUM INTO, from the open file) and the
// archive goes on there. A file replaced by another one keeps the path:
// the open file's records are copied beside it, to PATH.recovered-TIME,
// and the archive goes on in the new file, with the open file's state
// records, webhook deliveries and source cursors: they are what the
// running engine has done, and it goes on from them (a Pending delivery
// is still to handle, an accepted one's key still refuses its replays, a
// poll goes on from its cursor). Until a copy succeeds
// the archive refuses to record runs and deliveries (so no run starts and
// no sender is acknowledged: nothing is done that is not recorded) and
// Check returns why. Each change is reported once through Options.Log.
// After Close it returns the archive's closed error and reopens nothing.
func (s *SQLite) Check(ctx context.Context) error {
	s.mu.RLock()
	fi, err := os.Stat(s.path)
	same := err == nil && os.SameFile(fi, s.file)
	lost := s.lost
	s.mu.RUnlock()
	if same && lost == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(s.lost, errClosed) {
		return s.lost
	}
	fi, err = os.Stat(s.path)
	if err == nil && os.SameFile(fi, s.file) && s.lost == nil {
		return nil
	}
	replaced := err == nil
	dest := s.path
	what := "was deleted"
	if replaced {
		dest = fmt.Sprintf("%s.recovered-%s", s.path, time.Now().UTC().Format("20060102T150405Z"))
		what = "was replaced by another file"
	}
	if rerr := s.copyOut(ctx, dest); rerr != nil {
		lost := fmt.Errorf("the archive file %s %s and its records could not be copied back (%w): no run starts until they are", s.path, what, rerr)
		if s.lost == nil || s.lost.Error() != lost.Error() {
			s.opts.Log(lost.Error())
		}
		s.lost = lost
		return lost
	}
	if replaced {
		var carried []string
		for _, c := range []struct{ what, statement string }{{"its handler records", carryStatesSQL}, {"its webhook deliveries", carryDeliveriesSQL}, {"its source cursors", carryCursorsSQL}} {
			if err := s.carry(ctx, dest, c.statement); err != nil {
				carried = append(carried, fmt.Sprintf("%s could not be carried over (%v) and are there only", c.what, err))
			} else {
				carried = append(carried, c.what+" were carried over")
			}
		}
		s.opts.Log(fmt.Sprintf("archive: %s %s while in use: the runs recorded in the old file are in %s, %s; recording goes on in %s",
			s.path, what, dest, strings.Join(carried, ", "), s.path))
	} else {
		s.opts.Log(fmt.Sprintf("archive: %s %s while in use: its runs were copied back from the open file; recording goes on there", s.path, what))
	}
	s.lost = nil
	return nil
}

// copyOut copies the open database to dest, then reopens the archive at
// its path. The caller holds s.mu.
func (s *SQLite) copyOut(ctx context.Context, dest string) error {
	if s.w != nil {
		// The open file's WAL is still in place: fold it in first, so
		// that a new file at the path never meets the old one's WAL.
		if _, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		tmp := dest + ".tmp"
		_ = os.Remove(tmp)
		if _, err := s.w.ExecContext(ctx, `VACUUM INTO ?`, tmp); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("copying: %w", err)
		}
		// Closing the last connection removes the old WAL and shared
		// memory files, which still have the path's names.
		_ = s.closeHandles()
		s.w, s.db = nil, nil
		if err := os.Rename(tmp, dest); err != nil {
			return err
		}
	}
	if err := s.open(ctx); err != nil {
		s.w, s.db = nil, nil
		return fmt.Errorf("reopening: %w", err)
	}
	return nil
}

// carry runs a statement that copies records of the archive at from,
// attached as recovered, into the one open. The caller holds s.mu.
func (s *SQLite) carry(ctx context.Context, from, statement string) error {
	conn, err := s.w.Conn(ctx) // ATTACH is the connection's
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS recovered`, from); err != nil {
		return err
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE recovered`) }()
	_, err = conn.ExecContext(ctx, statement)
	return err
}

// carryStatesSQL copies the attached archive's handler records, replacing
// those of the same operator and key. WHERE true tells SQLite that ON
// CONFLICT is the upsert's, not the join's.
const carryStatesSQL = `INSERT INTO main.states (operator, state_key, api_version, kind, namespace, name, data, updated_at)
	SELECT operator, state_key, api_version, kind, namespace, name, data, updated_at FROM recovered.states WHERE true
	ON CONFLICT (operator, state_key) DO UPDATE SET api_version = excluded.api_version, kind = excluded.kind,
		namespace = excluded.namespace, name = excluded.name, data = excluded.data, updated_at = excluded.updated_at`

// carryDeliveriesSQL copies the attached archive's deliveries. One the new
// file has too (an older copy of the same archive) takes the open file's
// outcome and handling, which are newer. One whose key an accepted one of
// the new file has is left out: the new file's was accepted first.
const carryDeliveriesSQL = `INSERT INTO main.deliveries (id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, payload)
	SELECT id, operator, source, delivery_id, received_at, outcome, reason, event, runs, objects,
		handled_at, payload_bytes, payload_truncated, headers, payload FROM recovered.deliveries WHERE true
	ON CONFLICT (id) DO UPDATE SET outcome = excluded.outcome, reason = excluded.reason, runs = excluded.runs,
		objects = excluded.objects, handled_at = excluded.handled_at
	ON CONFLICT DO NOTHING`
