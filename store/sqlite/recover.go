package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// DiedMessage is the error message of intents recovery marks uncertain.
const DiedMessage = "the gateway process died while the call was in progress (incarnation %s); its outcome is unknown and it will not be re-run"

// validID is the shape of the incarnation ids this package makes; only such
// ids are ever turned into lock file paths.
var validID = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// recoverQuery lists the incarnations Recover examines: those not finished,
// and those with intents still started (the rows of open_intents, the calls
// in flight, not a scan of the journal).
const recoverQuery = `
	SELECT id FROM incarnations WHERE id <> ?1 AND state = 'alive'
	UNION
	SELECT DISTINCT incarnation FROM open_intents WHERE incarnation <> ?1`

// Recover marks uncertain the started intents of every other incarnation
// whose process is gone, and returns how many it marked.
//
// An incarnation is gone when its lock file can be locked: flock locks die
// with the process (or the Store) that holds them, so a lock taken here
// proves no one holds it, and a lock refused (EWOULDBLOCK) proves its owner
// is alive, whose intents are then left alone. A second Store in this same
// process holds its lock through another open file description, so it is
// seen alive too.
func (s *Store) Recover(ctx context.Context) (int, error) {
	var ids []string
	err := retryBusy(ctx, s.log, func() error {
		ids = ids[:0]
		rows, err := s.rdb.QueryContext(ctx, recoverQuery, s.incarnation)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite store: recover: %w", err)
	}
	total := 0
	for _, id := range ids {
		n, err := s.recoverIncarnation(ctx, id)
		total += n
		if err != nil {
			return total, err
		}
	}
	if err := s.sweepLocks(ctx); err != nil {
		return total, err
	}
	return total, nil
}

// recoverIncarnation recovers id if its owner is gone.
func (s *Store) recoverIncarnation(ctx context.Context, id string) (int, error) {
	var lock *os.File
	if validID.MatchString(id) {
		f, alive, err := tryLock(s.lockPath(id))
		if err != nil {
			return 0, fmt.Errorf("sqlite store: recover incarnation %s: %w", id, err)
		}
		if alive {
			return 0, nil
		}
		lock = f // nil when the lock file is gone: its owner removed it at Close, or a recoverer did
	}
	var n int64
	now := time.Now().UnixNano()
	err := s.write(ctx, func(w *wtx) error {
		var err error
		// Each started intent gets its settlement row, uncertain, and
		// leaves open_intents.
		n, err = w.affected(`INSERT INTO settlements (seq, status, error_class, error_message, settled_at)
			SELECT seq, 'uncertain', 'unknown_outcome', ?, ? FROM open_intents WHERE incarnation = ?`, fmt.Sprintf(DiedMessage, id), now, id)
		if err != nil {
			return err
		}
		if _, err := w.exec(`DELETE FROM open_intents WHERE incarnation = ?`, id); err != nil {
			return err
		}
		_, err = w.exec(`UPDATE incarnations SET state = 'dead', ended_at = ? WHERE id = ? AND state = 'alive'`, now, id)
		return err
	})
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return 0, fmt.Errorf("sqlite store: recover incarnation %s: %w", id, err)
	}
	if lock != nil {
		// Removed while still locked, so no one can take the lock of a
		// file that is about to disappear and believe in it.
		if err := os.Remove(lock.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove a dead incarnation's lock file", "incarnation", id, "error", err)
		}
		lock.Close()
	}
	if n > 0 {
		s.log.Warn("recovered a dead incarnation: its started intents are now uncertain", "incarnation", id, "intents", n)
	} else {
		s.log.Debug("recovered a dead incarnation", "incarnation", id)
	}
	return int(n), nil
}

// sweepLocks removes lock files nobody holds whose incarnation is finished
// or was never recorded (a process that died between taking its lock and
// recording itself, or a recoverer that died before removing the file).
func (s *Store) sweepLocks(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(s.dir, "incarnations"))
	if err != nil {
		return fmt.Errorf("sqlite store: recover: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || id == s.incarnation || !validID.MatchString(id) {
			continue
		}
		var state string
		err := s.rdb.QueryRowContext(ctx, `SELECT state FROM incarnations WHERE id = ?`, id).Scan(&state)
		if err == nil && state == "alive" {
			continue // Recover's business, not garbage
		}
		f, alive, lerr := tryLock(s.lockPath(id))
		if lerr != nil || alive || f == nil {
			continue
		}
		os.Remove(f.Name())
		f.Close()
	}
	return nil
}

// tryLock opens path and tries to take its flock without waiting. alive
// reports that someone holds it. f is nil when the file does not exist.
func tryLock(path string) (f *os.File, alive bool, err error) {
	f, err = os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, true, nil
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, false, nil
}
