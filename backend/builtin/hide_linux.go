package builtin

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// realPath asks the kernel where f's descriptor is: /proc/self/fd/N names
// the file with every symbolic link resolved, as it was reached. ok is
// false when /proc is not there or names no path.
func realPath(f *os.File) (string, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", false
	}
	var (
		p    string
		rerr error
	)
	if err := rc.Control(func(fd uintptr) {
		p, rerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	}); err != nil || rerr != nil {
		return "", false
	}
	// A file removed since it was opened is shown with this suffix; where
	// it was is what counts.
	p = strings.TrimSuffix(p, " (deleted)")
	if !filepath.IsAbs(p) {
		return "", false // "anon_inode:...", a socket: not a path
	}
	return filepath.Clean(p), true
}

// resolveOpenFlags open what a resolution found only to ask where it is
// and what it is: O_PATH needs no read permission and never blocks.
const resolveOpenFlags = oPath

// oPath is Linux's O_PATH, which package syscall does not define: its
// value on every Linux port Go supports (golang.org/x/sys/unix.O_PATH).
const oPath = 0x200000

// locateRoot returns where the folder r is opened on. "." is opened with
// O_PATH: it needs no read permission on the folder, and "." is never a
// symbolic link to be refused.
func locateRoot(r *os.Root, lex string) (string, error) {
	f, err := r.OpenFile(".", oPath|syscall.O_DIRECTORY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return locate(f, lex), nil
}
