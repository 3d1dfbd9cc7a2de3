package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A sandboxed tool runs with empty effective, permitted, inheritable and
// ambient capability sets whoever runs the gateway, and with an empty
// bounding set when the gateway may empty it (CAP_SETPCAP: a root
// gateway). Under no_new_privs an unprivileged tool can gain none through
// a set-user-ID or file-capability program either, so the bounding set of
// a non-root gateway (full, and not its to change) grants nothing.

// capEffective reports whether this thread has capability c in its
// effective set.
func capEffective(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// lastCap is the highest capability number the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return 63 // PR_CAPBSET_DROP refuses unknown ones with EINVAL: see below
}

// dropBoundingAndAmbient empties the ambient set and, with CAP_SETPCAP,
// the bounding set, and locks root out of capabilities at exec
// (securebits). The effective set is left for the rest of the
// confinement (opening the granted paths), emptied by clearCaps.
func dropBoundingAndAmbient() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("capabilities: clearing the ambient set: %w", err)
	}
	if !capEffective(unix.CAP_SETPCAP) {
		return nil
	}
	// linux/securebits.h: NOROOT and NO_SETUID_FIXUP, KEEP_CAPS off,
	// NO_CAP_AMBIENT_RAISE, each locked.
	const bits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return fmt.Errorf("capabilities: securebits: %w", err)
	}
	for c := 0; c <= lastCap(); c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the last capability of this kernel
			}
			return fmt.Errorf("capabilities: dropping %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// clearCaps empties this thread's effective, permitted and inheritable
// sets (always allowed: it only drops).
func clearCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	return nil
}
