package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/store"
)

// ApproverPrefix starts the DecidedBy of every decision taken through MCP
// elicitation; the session id follows.
//
// Why not the caller's name: the answer comes from the person at the
// client's end of this one session, which the gateway cannot tell apart from
// the caller's own identity, and the store refuses a decision whose By is
// the caller (no self-approval). Recording the channel instead keeps the
// journal honest about what is known (the decision came in over that
// session's elicitation), and a caller named like this prefix cannot exist
// by accident. Operators who need a named approver for a tool keep the
// elicitation out of it: clients without the elicitation capability wait
// for `backplane approvals approve ID --as NAME`.
const ApproverPrefix = "mcp-elicitation:"

// maxShownArguments caps the arguments shown in an elicitation message; the
// digest always identifies the exact arguments.
const maxShownArguments = 8 << 10

// approveSchema is what the elicitation asks for: one boolean.
var approveSchema = json.RawMessage(`{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve this call","description":"true lets the call run; false denies it"}},"required":["approve"]}`)

// elicitApprover puts an approval request to the person at the client's end
// of one session, through elicitation/create (the approval.Approver of one
// call).
type elicitApprover struct {
	ss      *mcp.ServerSession
	session string
	args    json.RawMessage
	// wait bounds the elicitation: a client that never answers leaves the
	// request pending, not the call hanging.
	wait time.Duration
}

// Ask implements approval.Approver. Accept with approve=true approves;
// decline, cancel and approve=false deny. A failed elicitation (the client
// went away, timed out, refused the request) is an error: the request stays
// pending and the call waits for an operator's decision as usual.
func (a *elicitApprover) Ask(ctx context.Context, req *store.Approval) (store.Decision, error) {
	if a.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.wait)
		defer cancel()
	}
	res, err := a.ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:            "form",
		Message:         approvalMessage(req, a.args),
		RequestedSchema: approveSchema,
	})
	if err != nil {
		return store.Decision{}, fmt.Errorf("elicitation: %w", err)
	}
	approve := false
	if res.Action == "accept" {
		approve, _ = res.Content["approve"].(bool)
	}
	return store.Decision{Approve: approve, By: ApproverPrefix + a.session, At: time.Now()}, nil
}

// approvalMessage describes the exact call a person is asked to approve.
func approvalMessage(req *store.Approval, args json.RawMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Backplane approval request %s\n\n", req.ID)
	fmt.Fprintf(&b, "caller: %s\n", req.Caller)
	fmt.Fprintf(&b, "tool: %s\n", req.Tool)
	fmt.Fprintf(&b, "arguments digest: %s\n", req.ArgsDigest)
	fmt.Fprintf(&b, "expires: %s\n", req.ExpiresAt.UTC().Format(time.RFC3339))
	b.WriteString("arguments:\n")
	var pretty bytes.Buffer
	if json.Indent(&pretty, args, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(args)
	}
	if pretty.Len() > maxShownArguments {
		fmt.Fprintf(&b, "%s\n... (%d bytes in all; the digest above identifies them)", pretty.Bytes()[:maxShownArguments], pretty.Len())
	} else {
		b.Write(pretty.Bytes())
	}
	b.WriteString("\n\nApprove this call?")
	return b.String()
}

// supportsElicitation reports whether the client of ss declared the
// elicitation capability (form mode: the only one used here) when it
// initialized.
func supportsElicitation(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return false
	}
	e := p.Capabilities.Elicitation
	// Neither mode named means form, for clients older than 2025-11-25.
	return e.Form != nil || e.URL == nil
}
