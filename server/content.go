package server

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/policy"
)

// ContentSource is where the resources and prompts served come from: the
// upstream MCP servers' (package backend/mcp's Content).
type ContentSource interface {
	ListResources(ctx context.Context) ([]*mcp.Resource, error)
	ReadResource(ctx context.Context, uri string) (*mcp.ReadResourceResult, error)
	ListPrompts(ctx context.Context) ([]*mcp.Prompt, error)
	GetPrompt(ctx context.Context, name string, args map[string]string) (*mcp.GetPromptResult, error)
}

// codeResourceNotFound is MCP's error for a resource that cannot be read.
const codeResourceNotFound = -32002

// contentMethods are the methods served from Options.Content.
var contentMethods = map[string]bool{
	"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"prompts/list": true, "prompts/get": true,
}

// serveContent answers a resources or prompts request: only what the
// policy grants caller is listed, read or got (default deny); a denied
// resource or prompt is answered as an unknown one, and every read and get
// is audited.
func (s *Server) serveContent(ctx context.Context, method string, req mcp.Request, caller string) (mcp.Result, error) {
	src, pol := s.opts.Content, s.opts.ContentPolicy
	if pol == nil {
		pol = policy.DenyAll{}
	}
	allowed := func(kind, name string) bool { return pol.DecideContent(caller, kind, name).Allow }
	switch method {
	case "resources/list":
		all, err := src.ListResources(ctx)
		if err != nil {
			return nil, err
		}
		res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
		for _, r := range all {
			if allowed(policy.KindResource, r.URI) {
				res.Resources = append(res.Resources, r)
			}
		}
		return res, nil
	case "resources/templates/list":
		// Templates name no URI a policy could grant: none are offered.
		return &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}, nil
	case "resources/read":
		p, _ := req.GetParams().(*mcp.ReadResourceParams)
		if p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resources/read: missing params"}
		}
		d := pol.DecideContent(caller, policy.KindResource, p.URI)
		if !d.Allow {
			s.auditContent(caller, policy.KindResource, p.URI, "deny", d.Reason)
			return nil, &jsonrpc.Error{Code: codeResourceNotFound, Message: "resource not found: " + p.URI}
		}
		res, err := src.ReadResource(ctx, p.URI)
		s.auditContent(caller, policy.KindResource, p.URI, outcomeOf(err), d.Reason)
		return res, contentError(err, codeResourceNotFound, "resource not found: "+p.URI)
	case "prompts/list":
		all, err := src.ListPrompts(ctx)
		if err != nil {
			return nil, err
		}
		res := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
		for _, p := range all {
			if allowed(policy.KindPrompt, p.Name) {
				res.Prompts = append(res.Prompts, p)
			}
		}
		return res, nil
	default: // prompts/get
		p, _ := req.GetParams().(*mcp.GetPromptParams)
		if p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "prompts/get: missing params"}
		}
		d := pol.DecideContent(caller, policy.KindPrompt, p.Name)
		if !d.Allow {
			s.auditContent(caller, policy.KindPrompt, p.Name, "deny", d.Reason)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown prompt: " + p.Name}
		}
		res, err := src.GetPrompt(ctx, p.Name, p.Arguments)
		s.auditContent(caller, policy.KindPrompt, p.Name, outcomeOf(err), d.Reason)
		return res, contentError(err, jsonrpc.CodeInvalidParams, "unknown prompt: "+p.Name)
	}
}

func outcomeOf(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// contentError passes an upstream's JSON-RPC error on; any other (no
// server lists it, the server is down) is answered with code.
func contentError(err error, code int64, msg string) error {
	if err == nil {
		return nil
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je
	}
	return &jsonrpc.Error{Code: code, Message: msg + ": " + err.Error()}
}

// auditContent writes one audit event of a resource read or prompt get.
func (s *Server) auditContent(caller, kind, name, outcome, reason string) {
	log := s.opts.Audit
	if log == nil {
		return
	}
	log.Info(kind, "step", "read", "outcome", outcome, "caller", caller, kind, name, "reason", reason)
}
