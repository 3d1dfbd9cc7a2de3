package upstream

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbackplane/backplane/internal/sandbox"
)

// TestSandboxedStdioServer: a stdio server that opted in runs confined; a
// tool of it that runs shell snippets cannot read or write outside its
// grants, reach a loopback TCP server, signal the gateway or read its
// environment. The same server unsandboxed can (the control).
func TestSandboxedStdioServer(t *testing.T) {
	if st := sandbox.Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	gw := os.Getpid()
	attempts := map[string]string{
		"read outside":         fmt.Sprintf(`cat %s && echo LEAKED`, secret),
		"write outside":        fmt.Sprintf(`echo x > %s/w.txt && echo LEAKED`, outside),
		"connect to loopback":  fmt.Sprintf(`echo hi > /dev/tcp/127.0.0.1/%d && echo LEAKED`, port),
		"signal the gateway":   fmt.Sprintf(`kill -0 %d && echo LEAKED`, gw),
		"read its environment": fmt.Sprintf(`head -c 8 /proc/%d/environ && echo LEAKED`, gw),
	}

	for _, sandboxed := range []bool{true, false} {
		e := newEnv(t)
		srv, logFile := testServerSpec(t, fmt.Sprintf("sb%t", sandboxed))
		if sandboxed {
			srv.Sandbox = &sandbox.Policy{Write: []string{filepath.Dir(logFile)}}
		}
		e.connect(t, srv, nil)
		leaks := 0
		for name, snippet := range attempts {
			res := e.mustCall(t, srv.Name+".shell", fmt.Sprintf(`{"c":%q}`, snippet))
			leaked := strings.Contains(string(res.Result), "LEAKED") || strings.Contains(string(res.Result), "TOPSECRET")
			if leaked {
				leaks++
			}
			if sandboxed && leaked {
				t.Errorf("the sandboxed server could %s: %s", name, res.Result)
			}
		}
		if !sandboxed && leaks != len(attempts) {
			t.Errorf("unsandboxed, only %d of %d attempts succeeded: the attempts prove nothing", leaks, len(attempts))
		}
		if sandboxed && accepted.Load() != 0 {
			t.Errorf("the sandboxed server reached the loopback server %d times", accepted.Load())
		}
	}
}
