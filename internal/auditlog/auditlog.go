// Package auditlog is the audit log's file: JSON lines (one per Write, as
// a slog handler writes them) appended in batches and rotated by size.
//
// What it promises:
//
//   - Write copies a record into memory and returns; records reach the
//     file in the order written, whole (a record is never split across a
//     write or across two files), at the latest FlushEvery after they were
//     written, at once when the batch grows past a threshold, and on Flush
//     and Close. A process that dies without Close loses what it wrote in
//     the last FlushEvery; the store's journal, not the audit log, is the
//     durable record of calls.
//   - Every batch is one write(2) to a file opened with O_APPEND, so other
//     processes appending to the same file (a CLI command's operator action
//     while serve runs) interleave whole batches and never overwrite each
//     other.
//   - When a batch would take the file past MaxSize, the file is renamed
//     with a timestamp (audit-2026-12-01T09-30-00.000.log beside
//     audit.log) and a new one started; MaxFiles rotated files are kept, the
//     oldest beyond that removed. Rotation is done by
//     gopkg.in/natefinch/lumberjack.v2.
//   - Files are the owner's alone (0600); an existing file readable by
//     others is made so at Open, or Open fails.
//   - A path that is not a regular file (/dev/null, a fifo) is written the
//     same way and never rotated.
package auditlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Defaults.
const (
	DefaultMaxSize    = 100 << 20
	DefaultMaxFiles   = 10
	DefaultFlushEvery = 200 * time.Millisecond
	// MinMaxSize is the smallest MaxSize: rotation works in whole MiB.
	MinMaxSize = 1 << 20
	// batchBytes is the batch size written at once, without waiting for
	// the interval.
	batchBytes = 64 << 10
)

// ErrClosed is returned by Write and Flush after Close.
var ErrClosed = errors.New("auditlog: closed")

// Options configure Open. A nil *Options, and each zero field, mean the
// defaults.
type Options struct {
	// MaxSize is the size in bytes past which the file is rotated, rounded
	// up to a whole MiB (at least MinMaxSize). Default DefaultMaxSize;
	// negative: never rotated.
	MaxSize int64
	// MaxFiles is how many rotated files are kept besides the current one.
	// Default DefaultMaxFiles; negative: every rotated file is kept.
	MaxFiles int
	// FlushEvery is the longest a record waits in memory. Default
	// DefaultFlushEvery.
	FlushEvery time.Duration
	// OnError, when set, is told of each failed background write (the
	// records of that batch are lost); Flush and Close return their own.
	OnError func(error)
}

// Writer is an open audit log. It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	buf     []byte
	path    string
	file    io.WriteCloser // *lumberjack.Logger, or an appendFile
	closed  bool
	onError func(error)

	stop chan struct{}
	done chan struct{}
}

// Open opens (creating it if needed) the audit log at path and starts its
// background flushing. Close it to write what is buffered.
func Open(path string, opts *Options) (*Writer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.MaxSize < 0:
		o.MaxSize = 1 << 60 // lumberjack has no "never"
	case o.MaxSize == 0:
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	regular, err := prepare(path)
	if err != nil {
		return nil, err
	}
	var file io.WriteCloser = &appendFile{path: path}
	if regular {
		mib := (max(o.MaxSize, MinMaxSize) + MinMaxSize - 1) / MinMaxSize
		file = &lumberjack.Logger{Filename: path, MaxSize: int(min(mib, 1<<30)), MaxBackups: max(o.MaxFiles, 0)}
	}
	w := &Writer{
		buf:     make([]byte, 0, batchBytes),
		path:    path,
		file:    file,
		onError: o.OnError,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.flushEvery(o.FlushEvery)
	return w, nil
}

// prepare creates the file if it is missing, so that a path that cannot be
// written fails Open rather than a later flush, makes an existing one the
// owner's alone (the audit log names callers and tools), and reports
// whether it is a regular file (only those are rotated).
func prepare(path string) (regular bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(fi.Mode().Perm() & 0o600); err != nil {
			return false, fmt.Errorf("%s is readable by others and cannot be made private: %w", path, err)
		}
	}
	return fi.Mode().IsRegular(), nil
}

// appendFile is the sink of a path that is not a regular file: each batch
// is appended to it as to the rotated kind, without rotation.
type appendFile struct {
	path string
	f    *os.File
}

func (a *appendFile) Write(p []byte) (int, error) {
	if a.f == nil {
		f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return 0, err
		}
		a.f = f
	}
	return a.f.Write(p)
}

func (a *appendFile) Close() error {
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// Write buffers one record (p is copied).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if len(w.buf)+len(p) > batchBytes && len(w.buf) > 0 {
		if err := w.flushLocked(); err != nil {
			w.report(err)
		}
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.flushLocked()
}

// flushLocked writes the batch in one write, then closes the file: the next
// batch opens it again with O_APPEND (lumberjack opens a file it has just
// rotated without it), and sees its size as other processes left it.
func (w *Writer) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.file.Write(w.buf)
	w.buf = w.buf[:0]
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("auditlog: writing %s: %w", w.path, err)
	}
	return nil
}

func (w *Writer) report(err error) {
	if w.onError != nil {
		w.onError(err)
	}
}

func (w *Writer) flushEvery(every time.Duration) {
	defer close(w.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if err := w.flushLocked(); err != nil {
				w.report(err)
			}
			w.mu.Unlock()
		}
	}
}

// Close writes what is buffered and stops the background flushing. It may
// be called more than once.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	err := w.flushLocked()
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	return err
}
