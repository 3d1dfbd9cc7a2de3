package procsup

import "golang.org/x/sys/unix"

// waitExited waits for child pid to exit without reaping it: the zombie
// keeps the pid, and so the group id, reserved until exec.Cmd.Wait.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
