package opsview

import (
	"github.com/agentbackplane/backplane/policy"
)

// ApprovalWhy says why a request asks for a decision, and what deciding
// it lets run.
type ApprovalWhy struct {
	// Effect, Rule and Reason are the policy's decision on the call now:
	// Rule is the deciding rule's place (file:line), "" for the default.
	Effect string `json:"effect"`
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ToolAsks is set when the tool itself requires approval (it is not
	// marked read-only), whatever the policy says.
	ToolAsks bool `json:"tool_asks,omitempty"`
	// Parts are a shell command's simple commands, each with its decision.
	Parts []policy.Part `json:"parts,omitempty"`
	// Sandbox describes where the call runs, when its backend says (nil:
	// it runs in no process of Backplane's, e.g. an upstream's tool).
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// Source is where the tool comes from (an upstream server's name for
	// a pinned tool, else "").
	Source string `json:"source,omitempty"`
	// Deciders are who may decide: the rule's approvers, or every
	// configured operator when the rule names none; SelfApprove lets the
	// caller's own person decide (elicitation).
	Deciders    []string `json:"deciders,omitempty"`
	AnyOperator bool     `json:"any_operator,omitempty"`
	SelfApprove bool     `json:"self_approve,omitempty"`
}

// Sandbox is the sandbox a tool's process runs in.
type Sandbox struct {
	Sandboxed bool     `json:"sandboxed"`
	Network   string   `json:"network,omitempty"`
	Write     []string `json:"write,omitempty"`
	Read      []string `json:"read,omitempty"`
}
