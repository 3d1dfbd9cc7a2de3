package sqlite

import (
	"os"
	"syscall"
	"unsafe"
)

// Syncing the WAL without holding a P through the sync (Linux).
//
// Why: fdatasync blocks its thread for the disk's flush (0.3-0.7 ms here),
// and made through syscall.Syscall it leaves its P "in a system call",
// neither running nor idle. The runtime's sysmon thread, woken by the
// transaction's first system call after the process was idle (SQLite's
// pwrite and fcntl, made by modernc's libc through syscall.Syscall), goes
// back to sleep only once every P is idle, and until then polls every
// 20 us: with one call in flight over stdio, where the process idles
// between calls, that is tens of wake-ups of sysmon per call for the
// sync's duration (about 90 us of CPU per call, measured per thread; see
// docs/benchmarks.md, issue 27 seventh session). A process busy without
// pause (gatewaybench) never lets sysmon sleep, so its polling backs off
// to 10 ms and costs nothing there.
//
// So the sync is asked of the kernel as an asynchronous fdatasync
// (io_submit of IOCB_CMD_FDSYNC, which runs vfs_fsync(file, datasync) in a
// kernel worker, the same call fdatasync(2) makes on the same open file,
// so the same writeback errors are reported), whose completion signals an
// eventfd that the runtime's poller waits for: the goroutine parks, its P
// goes idle, sysmon sleeps. The caller still returns only once the sync
// is done, with its result: nothing about durability changes. The kernel
// worker's CPU is no longer charged to this process.
//
// If the kernel refuses the asynchronous interface (io_setup or eventfd
// failing, as under a seccomp profile that forbids them, or io_submit
// refusing the request before it was queued), the sync is fdatasync as
// before: a request refused at submission was not started, so making it
// again with fdatasync is not a second sync of anything uncertain.

const (
	iocbCmdFdsync = 3 // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 // IOCB_FLAG_RESFD
)

// iocb is the kernel's struct iocb (linux/aio_abi.h), little- and big-endian
// layouts alike for the fields used (aio_key and aio_rw_flags are zero).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

// aioSync is one AIO context and the eventfd its completions signal. Used
// under txMu (one sync at a time), as walFile is.
type aioSync struct {
	ctx  uintptr // aio_context_t
	efd  *os.File
	efdn uint32 // efd's descriptor (os.File.Fd would make it blocking)
	erc  syscall.RawConn
	cb   iocb
	cbs  [1]*iocb
	ev   ioEvent
	zero syscall.Timespec
	off  bool // the kernel refused a submission: fdatasync from now on
	// read is the eventfd's reader, made once (no allocation per sync).
	read   func(fd uintptr) bool
	rerr   syscall.Errno
	submit func(fd uintptr)
	serr   syscall.Errno
}

// newAIOSync returns an AIO context with its eventfd, or nil when the
// kernel refuses either.
func newAIOSync() *aioSync {
	a := &aioSync{}
	if _, _, e := syscall.RawSyscall(syscall.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&a.ctx)), 0); e != 0 {
		return nil
	}
	fd, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		syscall.RawSyscall(syscall.SYS_IO_DESTROY, a.ctx, 0, 0)
		return nil
	}
	a.efdn = uint32(fd)
	a.efd = os.NewFile(fd, "eventfd") // non-blocking: the poller's
	rc, err := a.efd.SyscallConn()
	if err != nil {
		a.close()
		return nil
	}
	a.erc = rc
	a.cbs[0] = &a.cb
	a.read = func(fd uintptr) bool {
		var n uint64
		_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&n)), 8)
		if e == syscall.EAGAIN {
			return false // not yet: wait in the poller
		}
		a.rerr = e
		return true
	}
	a.submit = func(fd uintptr) {
		a.cb = iocb{opcode: iocbCmdFdsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: a.efdn}
		for {
			_, _, e := syscall.RawSyscall(syscall.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&a.cbs[0])))
			if e != syscall.EINTR {
				a.serr = e
				return
			}
		}
	}
	return a
}

// sync syncs f's data (fdatasync's semantics) and waits for the outcome.
func (a *aioSync) sync(f *os.File, path string) error {
	if !a.off {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		a.serr = 0
		if err := rc.Control(a.submit); err != nil {
			return err
		}
		if a.serr == 0 {
			return a.wait(path)
		}
		// Refused before it was queued (nothing started): fdatasync,
		// now and from now on.
		a.off = true
	}
	var err error
	if cerr := controlFd(f, func(fd int) {
		for err = syscall.Fdatasync(fd); err == syscall.EINTR; err = syscall.Fdatasync(fd) {
		}
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: path, Err: err}
	}
	return nil
}

// wait waits for the submitted sync's completion and returns its result.
// Any failure to learn the outcome is the sync's failure (the Store then
// refuses writes, as after a failed fdatasync).
func (a *aioSync) wait(path string) error {
	for {
		a.rerr = 0
		if err := a.erc.Read(a.read); err != nil {
			return &os.PathError{Op: "fdatasync (wait)", Path: path, Err: err}
		}
		if a.rerr != 0 {
			return &os.PathError{Op: "fdatasync (wait)", Path: path, Err: a.rerr}
		}
		n, _, e := syscall.RawSyscall6(syscall.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&a.ev)), uintptr(unsafe.Pointer(&a.zero)), 0)
		if e == syscall.EINTR || (e == 0 && n == 0) {
			continue
		}
		if e != 0 {
			return &os.PathError{Op: "fdatasync (io_getevents)", Path: path, Err: e}
		}
		if a.ev.res < 0 {
			return &os.PathError{Op: "fdatasync", Path: path, Err: syscall.Errno(-a.ev.res)}
		}
		return nil
	}
}

// close destroys the context (the kernel waits for a sync in flight) and
// closes the eventfd.
func (a *aioSync) close() {
	syscall.Syscall(syscall.SYS_IO_DESTROY, a.ctx, 0, 0) // may block: Syscall
	if a.efd != nil {
		a.efd.Close()
	}
}
