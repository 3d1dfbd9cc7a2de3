package assemble

import (
	"slices"

	"github.com/agentbackplane/backplane/config"
)

// noteSandbox records a tool's decision and, once per distinct reason for
// running unsandboxed, warns in the operational log (a start-up warning;
// each call's audit event says how its process ran).
func (rt *Runtime) noteSandbox(tool string, d config.SandboxDecision) {
	if rt.Sandbox == nil {
		rt.Sandbox = map[string]config.SandboxDecision{}
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
