package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxShownArguments caps the arguments shown in an elicitation message; the
// digest always identifies the exact arguments.
const maxShownArguments = 8 << 10

// approveSchema is what the elicitation asks for: one boolean.
var approveSchema = json.RawMessage(`{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve this call","description":"true lets the call run; false denies it"}},"required":["approve"]}`)

// elicitApprover puts an approval request to the person at the client's end
// of one session, through elicitation/create (the gateway.Approver of one
// call). The gateway asks it only where a policy rule sets self_approve,
// and records its answer as the caller's own, through the elicitation
// channel; the gateway's wait bounds it (ctx).
type elicitApprover struct {
	ss   *mcp.ServerSession
	args json.RawMessage
	// preview, when set, says what the call would do (a diff, a command).
	preview func(ctx context.Context, id string) string
}

// Ask implements gateway.Approver. Accept with approve=true approves;
// decline, cancel and approve=false deny. A failed elicitation (the client
// went away, timed out, refused the request) is an error: the request stays
// pending and the call waits for an operator's decision as usual.
func (a *elicitApprover) Ask(ctx context.Context, req *store.Approval) (gateway.ApprovalAnswer, error) {
	res, err := a.ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:            "form",
		Message:         approvalMessage(req, a.args, a.previewOf(ctx, req.ID)),
		RequestedSchema: approveSchema,
	})
	if err != nil {
		return gateway.ApprovalAnswer{}, fmt.Errorf("elicitation: %w", err)
	}
	approve := false
	if res.Action == "accept" {
		approve, _ = res.Content["approve"].(bool)
	}
	return gateway.ApprovalAnswer{Approve: approve, Channel: "elicitation", Reason: "answered through the client (" + string(res.Action) + ")"}, nil
}

func (a *elicitApprover) previewOf(ctx context.Context, id string) string {
	if a.preview == nil {
		return ""
	}
	return a.preview(ctx, id)
}

// approvalMessage describes the exact call a person is asked to approve.
func approvalMessage(req *store.Approval, args json.RawMessage, preview string) string {
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
	b.WriteString(preview)
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
