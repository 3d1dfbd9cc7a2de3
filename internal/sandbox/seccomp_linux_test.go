package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestSeccompFilterAssembles: the filter of each architecture it knows
// assembles (every jump in range), starts by checking the architecture
// word, and ends in the two verdicts; the bad jump of a hand-made program
// is an error, not a filter.
func TestSeccompFilterAssembles(t *testing.T) {
	arm64 := seccompArch{audit: unix.AUDIT_ARCH_AARCH64, socket: 198, socketpair: 199, uringSetup: 425, uringEnter: 426, uringRegister: 427, x32Limit: 0x40000000}
	for name, a := range map[string]seccompArch{"native": nativeArch, "arm64": arm64} {
		if a.audit == 0 {
			continue
		}
		prog, err := seccompFilter(a)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prog[0].Code != ldAbs || prog[0].K != offArch || prog[1].K != a.audit {
			t.Errorf("%s: the filter does not begin with the architecture check: %+v", name, prog[:2])
		}
		last := prog[len(prog)-1]
		if last.Code != retK || last.K != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
			t.Errorf("%s: the last instruction %+v, want ENOSYS", name, last)
		}
		for i, ins := range prog {
			if ins.Code&0x07 == unix.BPF_JMP && i+1+int(max(ins.Jt, ins.Jf)) >= len(prog) {
				t.Errorf("%s: instruction %d jumps past the end", name, i)
			}
		}
	}
	b := &bpf{labels: map[string]int{}}
	b.jump(jeqK, 1, "nowhere", "")
	if _, err := b.assemble(); err == nil {
		t.Error("a jump to a missing label assembled")
	}
}
