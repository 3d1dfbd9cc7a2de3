package mcpstream

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Reading and writing a polled pipe or socket without the runtime's
// system-call bookkeeping (Linux).
//
// Why: os.File's Read and Write make each read(2) and write(2) through
// syscall.Syscall, whose entersyscall wakes the runtime's sysmon thread
// when it sleeps, as it does whenever every P of the process was idle: a
// futex wake (~5 us, on the caller's path) before each first read of a
// message after a wait, which with one call in flight is every read, and a
// sysmon that then polls every 20 us. The bookkeeping is for a call that
// may block, so that sysmon can hand the P on; a read or write of a
// non-blocking descriptor never blocks (EAGAIN instead), so it is made
// here with syscall.RawSyscall, inside the file's RawConn, which still
// waits for readiness through the runtime's poller, honours deadlines and
// keeps Close from racing the call. Only a stream the runtime polls (one
// with deadlines: non-blocking) is read or written so; anything else as it
// is.

// syscallConner is a stream with a descriptor (an *os.File, or a type
// embedding one, as exec.Cmd's StdinPipe).
type syscallConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// rawReader returns r read with raw system calls when it is a polled file,
// else r.
func rawReader(r io.Reader) io.Reader {
	if u, ok := r.(unclosed); ok {
		r = u.deadlineReader
	}
	f, ok := r.(interface {
		syscallConner
		SetReadDeadline(time.Time) error
	})
	if !ok || f.SetReadDeadline(time.Time{}) != nil {
		return r
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return r
	}
	return newRawFile(rc, nameOf(r))
}

// rawWriter returns w written with raw system calls when it is a polled
// file, else w.
func rawWriter(w io.Writer) io.Writer {
	f, ok := w.(interface {
		syscallConner
		SetWriteDeadline(time.Time) error
	})
	if !ok || f.SetWriteDeadline(time.Time{}) != nil {
		return w
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return w
	}
	return newRawFile(rc, nameOf(w))
}

func nameOf(v any) string {
	if n, ok := v.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "stream"
}

// rawFile reads or writes a non-blocking descriptor with raw system
// calls (see above); its errors are those os.File returns. One goroutine
// at a time reads it (the connection's reader) or writes it (under the
// connection's write lock): the call in progress is held in the rawFile,
// so that the function RawConn calls is made once, not per call.
type rawFile struct {
	rc   syscall.RawConn
	name string

	buf     []byte
	n       int
	errno   syscall.Errno
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

func newRawFile(rc syscall.RawConn, name string) *rawFile {
	f := &rawFile{rc: rc, name: name}
	f.readFn, f.writeFn = f.readOnce, f.writeSome
	return f
}

func (f *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	f.buf, f.n, f.errno = p, 0, 0
	err := f.rc.Read(f.readFn)
	n, errno := f.n, f.errno
	f.buf = nil
	switch {
	case err != nil:
		return 0, &os.PathError{Op: "read", Path: f.name, Err: err}
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: f.name, Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is one read(2) of f.buf; false to wait in the poller.
func (f *rawFile) readOnce(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&f.buf[0])), uintptr(len(f.buf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		f.n, f.errno = int(r), e
		return true
	}
}

func (f *rawFile) Write(p []byte) (int, error) {
	f.buf, f.n, f.errno = p, 0, 0
	err := f.rc.Write(f.writeFn)
	n, errno := f.n, f.errno
	f.buf = nil
	switch {
	case err != nil:
		return n, &os.PathError{Op: "write", Path: f.name, Err: err}
	case errno != 0:
		return n, &os.PathError{Op: "write", Path: f.name, Err: errno}
	}
	return n, nil
}

// writeSome writes what is left of f.buf; false to wait in the poller for
// room in the pipe.
func (f *rawFile) writeSome(fd uintptr) bool {
	for f.n < len(f.buf) {
		w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&f.buf[f.n])), uintptr(len(f.buf)-f.n))
		switch e {
		case 0:
			f.n += int(w)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			f.errno = e
			return true
		}
	}
	return true
}
