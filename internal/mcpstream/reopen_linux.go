package mcpstream

import (
	"strconv"
	"syscall"
)

// reopen opens the pipe or FIFO of descriptor fd (whose fstat is st) again,
// non-blocking, for reading or writing (mode: O_RDONLY or O_WRONLY), as a
// new open file description (see Polled); false when it cannot, or when
// what it opened is not the same pipe. O_NONBLOCK also keeps the open of
// a FIFO from waiting for a writer, and makes one for writing without a
// reader fail (ENXIO).
func reopen(fd int, st *syscall.Stat_t, mode int) (int, bool) {
	own, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	var got syscall.Stat_t
	if syscall.Fstat(own, &got) != nil || got.Dev != st.Dev || got.Ino != st.Ino {
		syscall.Close(own)
		return -1, false
	}
	return own, true
}
