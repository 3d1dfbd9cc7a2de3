package opsview

import (
	"encoding/json"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Accepted is the outcome of AcceptDefinition.
type Accepted struct {
	Tool            string `json:"tool"`
	DefinitionHash  string `json:"definition_hash"`
	AcceptedBy      string `json:"accepted_by"`
	AlreadyAccepted bool   `json:"already_accepted,omitempty"`
}

// Approval is an approval request with what a person needs to decide
// it.
type Approval struct {
	store.Approval
	// Status is as seen now (a pending request past its expiry is expired).
	Description string `json:"description,omitempty"`
	// Arguments are the call's arguments, indented.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Preview is what the call would do (a diff, a command), when its
	// backend can tell.
	Preview *tool.Preview `json:"preview,omitempty"`
	// PreviewError says why there is no preview, when asking failed.
	PreviewError string `json:"preview_error,omitempty"`
	// Approvers may decide (empty: any operator); SelfApprove lets the
	// caller's own person decide through elicitation.
	Approvers   []string `json:"approvers,omitempty"`
	SelfApprove bool     `json:"self_approve,omitempty"`
	// Waiting reports whether a call of this process is waiting for the
	// decision now; a pending request with none is taken by the caller's
	// next identical call.
	Waiting bool `json:"waiting"`
	// HowToDecide lists the ways to decide it.
	HowToDecide []string `json:"how_to_decide,omitempty"`
}

// ToolReportedError reports whether in ran and its tool reported an error:
// a succeeded intent whose recorded result has is_error set.
func ToolReportedError(in *store.Intent) bool {
	if in.Status != store.StatusSucceeded || len(in.Result) == 0 {
		return false
	}
	var r struct {
		IsError bool `json:"is_error"`
	}
	return json.Unmarshal(in.Result, &r) == nil && r.IsError
}

// Pin is a pinned tool's record with the definition registered now.
type Pin struct {
	store.Pin
	// CurrentHash is the definition registered now ("" when the tool is not
	// registered in this process).
	CurrentHash string `json:"current_hash,omitempty"`
}

// ApprovalEvent tells subscribers what happened to a request in this
// process: "pending" (a call created it), "decided", "withdrawn" (its
// waiting call went away; the request stays for the retry), "consumed".
type ApprovalEvent struct {
	Kind     string         `json:"kind"`
	Approval store.Approval `json:"approval"`
	// HowToDecide is set on "pending".
	HowToDecide []string `json:"how_to_decide,omitempty"`
}
