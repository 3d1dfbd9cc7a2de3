package sandbox

import (
	"encoding/json"
	"testing"
)

// The launcher reads the policy and the call's cgroups as one JSON object,
// the wire form it had when the cgroups were fields of Policy: the options
// moved to package sandbox, the cgroups stayed here.
func TestLaunchSpecWireForm(t *testing.T) {
	spec := launchSpec{Path: "/bin/true", Argv: []string{"true"}, Policy: &confinement{
		Policy: Policy{Read: []string{"/r"}, Write: []string{"/w"}, Network: Network{Ports: []uint16{443}}, Limits: Limits{CPUSeconds: 1}},
		Cgroup: "/sys/fs/cgroup/pids/c", MemoryCgroup: "/sys/fs/cgroup/memory/c",
	}}
	b, err := json.Marshal(&spec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"policy":{"read":["/r"],"write":["/w"],"network":{"ports":[443]},"limits":{"cpu_seconds":1},` +
		`"cgroup":"/sys/fs/cgroup/pids/c","memory_cgroup":"/sys/fs/cgroup/memory/c"},"path":"/bin/true","argv":["true"]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back launchSpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Policy.Cgroup != spec.Policy.Cgroup || back.Policy.MemoryCgroup != spec.Policy.MemoryCgroup ||
		back.Policy.Network.Ports[0] != 443 || back.Policy.Write[0] != "/w" {
		t.Fatalf("read back %+v", back.Policy)
	}
}
