package sandbox

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// BenchmarkSandboxedTrue is the launcher's cost per call: /bin/true,
// sandboxed and supervised as bash and command tools run.
func BenchmarkSandboxedTrue(b *testing.B) {
	if st := Probe(); !st.Available {
		b.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	ws := b.TempDir()
	for b.Loop() {
		cmd := exec.Command("/bin/true")
		cleanup, err := Wrap(cmd, &Policy{Write: []string{ws}, Limits: DefaultLimits}, true)
		if err != nil {
			b.Fatal(err)
		}
		cmd.Path = os.Args[0]
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		cleanup()
	}
}
