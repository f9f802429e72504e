package archive

import (
	"context"
	"fmt"
	"os"
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
// records: they are what the running engine has done, and it goes on from
// them. Until a copy succeeds the archive refuses to record runs (so none
// starts: nothing runs that is not recorded) and Check returns why. Each
// change is reported once through Options.Log.
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
		states := "its state records were carried over"
		if err := s.carryStates(ctx, dest); err != nil {
			states = fmt.Sprintf("its state records could not be carried over (%v) and are there only", err)
		}
		s.opts.Log(fmt.Sprintf("archive: %s %s while in use: the runs recorded in the old file are in %s, %s; recording goes on in %s", s.path, what, dest, states, s.path))
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

// carryStates copies the state records of the archive at from into the one
// open, replacing those of the same operator and key. The caller holds
// s.mu.
func (s *SQLite) carryStates(ctx context.Context, from string) error {
	conn, err := s.w.Conn(ctx) // ATTACH is the connection's
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS recovered`, from); err != nil {
		return err
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE recovered`) }()
	_, err = conn.ExecContext(ctx, carryStatesSQL)
	return err
}

// carryStatesSQL copies the attached archive's state records. WHERE true
// tells SQLite that ON CONFLICT is the upsert's, not the join's.
const carryStatesSQL = `INSERT INTO main.states (operator, state_key, api_version, kind, namespace, name, data, updated_at)
	SELECT operator, state_key, api_version, kind, namespace, name, data, updated_at FROM recovered.states WHERE true
	ON CONFLICT (operator, state_key) DO UPDATE SET api_version = excluded.api_version, kind = excluded.kind,
		namespace = excluded.namespace, name = excluded.name, data = excluded.data, updated_at = excluded.updated_at`
