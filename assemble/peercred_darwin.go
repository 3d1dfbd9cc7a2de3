package assemble

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerIsServesUser refuses a control-socket peer whose user
// (LOCAL_PEERCRED) is not the one serve runs as.
func peerIsServesUser(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a Unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("peer uid %d is not serve's user (uid %d)", cred.Uid, os.Geteuid())
	}
	return nil
}
