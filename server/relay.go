//lint:file-ignore SA1019 sampling, roots and logging are deprecated only from protocol 2026-07-28; the versions relayed here (2025-11-25 and older) have them, and the issue asks for them.

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// capabilities adds to caps what relaying needs: logging, since upstream
// servers' log messages are relayed to the calling session, at the level
// it sets; resources and prompts when they are served.
func (s *Server) capabilities(caps *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	caps.Logging = &mcp.LoggingCapabilities{}
	if s.opts.Content != nil {
		completions, subscribe := s.opts.Content.Offers()
		caps.Resources = &mcp.ResourceCapabilities{Subscribe: subscribe}
		caps.Prompts = &mcp.PromptCapabilities{}
		if completions {
			caps.Completions = &mcp.CompletionCapabilities{}
		}
	}
	caps.Tools.ListChanged = true // to the sessions concerned (listchanged.go)
	return caps
}

// sessionClient is the client behind one tools/call, as its backend sees
// it (tool.Client): an upstream's progress goes out under the token of
// this call's request, log messages to this session (filtered by its
// logging/setLevel, which the SDK keeps), and an upstream's requests go to
// this session when its client declared the capability. Without a
// session (ss nil: a 2026-07-28 tools/call of the fast path, which asked
// for no progress and set no log level) there is nothing to send on, and
// nothing is sent.
type sessionClient struct {
	ss    *mcp.ServerSession
	token any // the request's progress token; nil: it asked for none
}

func newSessionClient(ss *mcp.ServerSession, token any) tool.Client {
	if ss == nil {
		return nil
	}
	return &sessionClient{ss: ss, token: token}
}

func (c *sessionClient) Progress(ctx context.Context, p tool.Progress) error {
	if c.token == nil || c.ss == nil {
		return nil
	}
	return c.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: c.token, Progress: p.Progress, Total: p.Total, Message: p.Message,
	})
}

func (c *sessionClient) Log(ctx context.Context, m tool.LogMessage) error {
	if c.ss == nil {
		return nil // a 2026-07-28 request on the fast path: it set no log level
	}
	var data any = json.RawMessage(m.Data)
	if len(m.Data) == 0 {
		data = nil
	}
	return c.ss.Log(ctx, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(m.Level), Logger: m.Logger, Data: data})
}

func (c *sessionClient) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if c.ss == nil {
		return nil, fmt.Errorf("%w: the request has no stream to send %s on", tool.ErrNoChannel, method)
	}
	var caps *mcp.ClientCapabilities
	if p := c.ss.InitializeParams(); p != nil {
		caps = p.Capabilities
	}
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	var res any
	var err error
	switch method {
	case tool.RequestSampling:
		if caps.Sampling == nil {
			return nil, fmt.Errorf("%w: the client did not declare sampling", tool.ErrNoChannel)
		}
		var p mcp.CreateMessageWithToolsParams
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		res, err = c.ss.CreateMessageWithTools(ctx, &p)
	case tool.RequestElicitation:
		if caps.Elicitation == nil {
			return nil, fmt.Errorf("%w: the client did not declare elicitation", tool.ErrNoChannel)
		}
		var p mcp.ElicitParams
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		res, err = c.ss.Elicit(ctx, &p)
	case tool.RequestRoots:
		// The SDK cannot tell "roots": {} from no roots at all, so the
		// client is asked; one without roots answers method not found,
		// which is passed on.
		var p mcp.ListRootsParams
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		res, err = c.ss.ListRoots(ctx, &p)
	default:
		return nil, fmt.Errorf("%w: %s is not a request a server may make of a client", tool.ErrNoChannel, method)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func decodeParams(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("the request's params cannot be read: %w", err)
	}
	return nil
}

// Listens implements tool.ListeningClient: progress when the request
// carried a token; log messages whenever there is a session (a session's
// client may set its level while the call runs; a 2026-07-28 request's
// own level is read when a message is sent). The fast path's requests
// (no session) take neither.
func (c *sessionClient) Listens() (progress, logs bool) {
	return c.ss != nil && c.token != nil, c.ss != nil
}

// Capabilities implements tool.CapableClient: what the session's client
// declared (for a 2026-07-28 request, the request's own _meta). A
// 2025-11-25 client's roots cannot be told from none (see Request): they
// are taken as declared, and the client asked.
func (c *sessionClient) Capabilities() tool.Capabilities {
	if c.ss == nil {
		return tool.Capabilities{} // the fast path's: modernClient says
	}
	p := c.ss.InitializeParams()
	if p == nil || p.Capabilities == nil {
		return tool.Capabilities{}
	}
	return capabilitiesOf(p.Capabilities, p.ProtocolVersion)
}

// capabilitiesOf is what a client that declared caps at protocol version
// version may be asked.
func capabilitiesOf(caps *mcp.ClientCapabilities, version string) tool.Capabilities {
	if caps == nil {
		return tool.Capabilities{}
	}
	out := tool.Capabilities{
		//lint:ignore SA1019 sampling and roots are deprecated at 2026-07-28 and still in force: an upstream may ask for them
		Sampling: caps.Sampling != nil,
		//lint:ignore SA1019 sampling and roots are deprecated at 2026-07-28 and still in force: an upstream may ask for them
		Roots: caps.RootsV2 != nil || version < ModernProtocolVersion,
	}
	if e := caps.Elicitation; e != nil {
		out.Elicitation = e.Form != nil || e.URL == nil
		out.ElicitationURL = e.URL != nil
	}
	return out
}
