package assemble

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerIsServesUser refuses a control-socket peer whose user (SO_PEERCRED,
// the credentials it connected with) is not the one serve runs as.
func peerIsServesUser(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a Unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("peer uid %d (pid %d) is not serve's user (uid %d)", cred.Uid, cred.Pid, os.Geteuid())
	}
	return nil
}
