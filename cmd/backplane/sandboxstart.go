package main

import (
	"log/slog"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/internal/sandbox"
)

// sandboxAtStart is what serve does once at start when some tool process
// runs sandboxed: it says when sandboxed tools can still reach Unix
// sockets by path (no seccomp filter here), and removes the call cgroups
// a gateway killed with SIGKILL left behind.
func sandboxAtStart(rt *assemble.Runtime, log *slog.Logger) {
	some := false
	for _, d := range rt.Sandbox {
		some = some || d.Policy != nil
	}
	if !some {
		return
	}
	if st := sandbox.Probe(); !st.UnixSockets {
		log.Warn("sandboxed tools can connect to Unix sockets by path (the store's, serve's control socket)", "reason", st.UnixReason)
	}
	sandbox.RemoveStale()
}
