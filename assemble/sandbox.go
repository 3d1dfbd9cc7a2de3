package assemble

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/sandbox"
)

// The sandbox decision of each tool process: the configuration's sandbox
// sections (package config parses them) applied to what this kernel can
// do (package internal/sandbox probes it). Made here, at Open, so that
// config stays a parser.

// processKind is what a sandboxed process is for: the defaults differ.
type processKind int

// The kinds of tool processes.
const (
	kindBash processKind = iota
	kindCommand
	kindServer
)

// SandboxDecision is what the sandbox does for one tool (or server).
type SandboxDecision struct {
	// Policy is nil when the process runs unsandboxed.
	Policy *sandbox.Policy
	// Note says why it is unsandboxed ("" when sandboxed).
	Note string
	// Quiet: the default (a server without a sandbox section), nothing to
	// warn about.
	Quiet bool
}

// String is how tools list shows it.
func (d SandboxDecision) String() string {
	if d.Policy == nil {
		return "unsandboxed (" + d.Note + ")"
	}
	r := d.Policy.Rules()
	return fmt.Sprintf("sandboxed (write %s; network %s)", strings.Join(d.Policy.Write, ","), r["network"])
}

// sandboxFor decides the sandbox of one process of c on this kernel (the
// probe is made once per process: sandbox.Probe): the top-level section,
// overridden by o (nil: none). An error is a start refusal.
func sandboxFor(c *config.Config, kind processKind, o *config.SandboxConfig) (SandboxDecision, error) {
	return decideSandbox(c, kind, o, sandbox.Probe())
}

// decideSandbox is sandboxFor on a kernel whose state is st.
func decideSandbox(c *config.Config, kind processKind, o *config.SandboxConfig, st sandbox.Status) (SandboxDecision, error) {
	if o != nil && o.AllowUnixSockets {
		return SandboxDecision{}, fmt.Errorf("line %d: sandbox allow_unix_sockets is a top-level setting, not a tool's", o.Line)
	}
	mode := c.Sandbox.Enable
	if mode == "" {
		mode = config.SandboxAuto
	}
	if kind == kindServer && o == nil {
		// Servers opt in with a sandbox section: not worth a warning.
		return SandboxDecision{Note: "stdio servers opt in with a sandbox section", Quiet: true}, nil
	}
	if o != nil && o.Enable != "" {
		mode = o.Enable
	}
	if mode == config.SandboxOff {
		return SandboxDecision{Note: "sandbox off in the configuration"}, nil
	}
	if !st.Available {
		if mode == config.SandboxRequired {
			return SandboxDecision{}, fmt.Errorf("sandbox required but unavailable: %s", st.Reason)
		}
		return SandboxDecision{Note: "the kernel cannot sandbox: " + st.Reason}, nil
	}
	p := &sandbox.Policy{Limits: sandbox.DefaultLimits}
	if kind != kindServer {
		p.Write = append(p.Write, c.Workspace)
	} else {
		p.Network.All = true      // servers keep the network unless told
		p.Limits.AddressSpace = 0 // runtimes such as node reserve much address space
	}
	for _, s := range []*config.SandboxConfig{&c.Sandbox, o} {
		if s == nil {
			continue
		}
		p.Read = append(p.Read, s.Read...)
		p.Write = append(p.Write, s.Write...)
		if s.Network != nil {
			p.Network = sandbox.Network{All: s.Network.All, Ports: slices.Clone(s.Network.Ports)}
		}
		if s.Limits.CPUSeconds != 0 {
			p.Limits.CPUSeconds = s.Limits.CPUSeconds
		}
		if s.Limits.AddressSpace != 0 {
			p.Limits.AddressSpace = s.Limits.AddressSpace
		}
		if s.Limits.Processes != 0 {
			p.Limits.Processes = s.Limits.Processes
		}
		if s.Limits.FileSize != 0 {
			p.Limits.FileSize = s.Limits.FileSize
		}
	}
	// Without the seccomp filter a sandboxed tool can connect to any Unix
	// socket by path (Landlock before ABI 9 does not cover it): with the
	// store behind one (PostgreSQL's, local trust authentication), it
	// could decide its own approvals (issue 22, item 4).
	if mode == config.SandboxRequired && !st.UnixSockets && !c.Sandbox.AllowUnixSockets {
		if sock := c.StoreUnixSocket(); sock != "" {
			return SandboxDecision{}, fmt.Errorf("sandbox required, but this system cannot keep sandboxed tools from Unix sockets (%s), and the store is reachable over one (%s); set sandbox allow_unix_sockets: true to accept that", st.UnixReason, sock)
		}
	}
	if err := sandbox.CheckState(p, c.PrivatePaths()); err != nil {
		if mode == config.SandboxAuto {
			return SandboxDecision{Note: err.Error()}, nil
		}
		return SandboxDecision{}, err
	}
	return SandboxDecision{Policy: p}, nil
}

// noteSandbox records a tool's decision and, once per distinct reason for
// running unsandboxed, warns in the operational log (a start-up warning;
// each call's audit event says how its process ran).
func (rt *Runtime) noteSandbox(tool string, d SandboxDecision) {
	if rt.Sandbox == nil {
		rt.Sandbox = map[string]SandboxDecision{}
	}
	rt.Sandbox[tool] = d
	if d.Policy != nil || d.Quiet || slices.Contains(rt.SandboxNotes, d.Note) {
		return
	}
	rt.SandboxNotes = append(rt.SandboxNotes, d.Note)
	if rt.Log != nil {
		rt.Log.Warn("tools run unsandboxed", "reason", d.Note)
	}
}
