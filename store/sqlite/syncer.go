package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The syncer goroutine makes commits durable, beside the writer: the writer
// commits a transaction (synchronous=NORMAL: written to the WAL, not
// synced), hands its durable requests to the syncer and goes on with the
// next transaction while the syncer syncs the WAL. A request is answered
// once a sync that started after its transaction's COMMIT has returned;
// each sync covers every transaction committed before it started (the WAL
// is one file, written in commit order), so the groups that queued during
// one sync share the next.
//
// A failed sync breaks the Store for writing. Its callers are told the
// sync failed; so is every caller whose transaction was handed over since,
// and every later write is refused (errSyncFailed). The reason is Linux's
// fsync semantics: after a failed writeback the kernel may mark the pages
// clean and report the error once, so a later sync that succeeds proves
// nothing about the frames of before, and the WAL's frames are chained by
// their checksums: SQLite's recovery stops at the first frame that did not
// reach the disk, dropping every commit after it. Recovering means closing
// the Store and opening the folder again, which marks this incarnation's
// started intents uncertain (never re-run).

// errSyncFailed is wrapped by the error of every write after a sync of
// the write-ahead log failed: the Store can no longer make anything
// durable, and must be closed and opened again.
var errSyncFailed = errors.New("sqlite store: an earlier sync of the write-ahead log failed; close and reopen the store")

// A syncGroup is the durable requests of one committed transaction, for
// the syncer to answer; an empty one asks for a sync alone (lazy commits
// that no durable one followed, see lazyFlush).
type syncGroup []*writeReq

// syncer runs until s.syncs is closed (by the writer, as it ends).
func (s *Store) syncer() {
	defer close(s.syncerDone)
	wal := &walFile{path: filepath.Join(s.dir, DBFile) + "-wal", dir: s.dir}
	defer wal.close()
	var groups []syncGroup
	for g := range s.syncs {
		// Everything handed over so far was committed before this sync
		// starts: one sync answers it all.
		groups = append(groups[:0], g)
		for more := true; more; {
			select {
			case g, ok := <-s.syncs:
				if ok {
					groups = append(groups, g)
				} else {
					more = false
				}
			default:
				more = false
			}
		}
		s.syncing.Store(true)
		s.handed.Add(-int32(len(groups)))
		select {
		case s.took <- struct{}{}:
		default: // a signal is pending already
		}
		err := s.syncFailed()
		if err == nil {
			err = wal.sync()
			if f := s.syncFault.Load(); err == nil && f != nil {
				err = (*f)()
			}
			if err != nil {
				s.breakSync(err)
				err = fmt.Errorf("sqlite store: sync: %w", err)
			}
		}
		s.syncing.Store(false)
		durable := 0
		for _, g := range groups {
			if len(g) > 0 {
				durable++
			}
		}
		if err == nil {
			s.nSynced.Add(int64(durable))
			if durable == 0 {
				s.nWALSync.Add(1)
			}
		} else if durable == 0 {
			// Only lazy commits were covered: their callers are gone,
			// and every later write is refused.
			s.log.Error("sync of the write-ahead log failed", "error", err)
		}
		for _, g := range groups {
			for _, r := range g {
				if err != nil {
					r.err = err
				}
				r.done <- r.err
			}
		}
		clear(groups)
	}
}

// syncFailed returns the error every write gets once a sync failed, or nil.
func (s *Store) syncFailed() error {
	if p := s.syncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// breakSync records the first failed sync.
func (s *Store) breakSync(err error) {
	werr := fmt.Errorf("%w (%v)", errSyncFailed, err)
	s.syncErr.CompareAndSwap(nil, &werr)
}

// walFile is the syncer's descriptor of the write-ahead log, opened at the
// first sync and kept: a descriptor open since before a writeback error is
// one the kernel reports it to (a fresh one may not be told). SQLite keeps
// the file while any connection has the database open (the writer's does,
// for the Store's life): a checkpoint rewinds it and journal_size_limit
// truncates it, in place; it is deleted only when the last connection
// closes (TestWALFileKept). Each sync still checks that the path names
// the file held, and opens it again if not.
type walFile struct {
	path, dir string
	f         *os.File
	fi        os.FileInfo // f's, to compare with the path's
}

// sync flushes the WAL's data (fdatasync: also the size, what reading the
// data back needs, but not the timestamps, which saves a journal commit of
// the file system per sync).
func (w *walFile) sync() error {
	if err := w.check(); err != nil {
		return err
	}
	var err error
	if cerr := controlFd(w.f, func(fd int) {
		for err = syscall.Fdatasync(fd); err == syscall.EINTR; err = syscall.Fdatasync(fd) {
		}
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: w.path, Err: err}
	}
	return nil
}

// check opens the WAL unless the file held is still the one at its path.
// A WAL file first opened here may be new: its directory entry is synced
// once, so that a crash cannot lose the file with the commits in it.
func (w *walFile) check() error {
	fi, err := os.Stat(w.path)
	if err != nil {
		return err
	}
	if w.f != nil && os.SameFile(fi, w.fi) {
		return nil
	}
	w.close()
	f, err := os.OpenFile(w.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if fi, err = f.Stat(); err == nil {
		err = syncDir(w.dir)
	}
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.fi = f, fi
	return nil
}

func (w *walFile) close() {
	if w.f != nil {
		w.f.Close()
		w.f, w.fi = nil, nil
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// controlFd runs fn with f's descriptor, which stays open meanwhile.
func controlFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}
