package sandbox_test

import (
	"fmt"

	"github.com/agentbackplane/backplane/sandbox"
)

// How a policy reads in the audit events of the calls it confined.
func ExampleAuditAttrs() {
	p := &sandbox.Policy{Write: []string{"/srv/ws"}, Network: sandbox.Network{Ports: []uint16{443}}}
	fmt.Println(sandbox.AuditAttrs(p)...)
	fmt.Println(sandbox.AuditAttrs(nil)...)
	fmt.Println(sandbox.Network{All: true}, sandbox.Network{})
	// Output:
	// sandboxed true sandbox_rules map[limits:{0 0 0 0} network:tcp connect 443 read:[] write:[/srv/ws]]
	// sandboxed false
	// all none
}
