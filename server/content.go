package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/resuri"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/tool"
)

// ContentSource is where the resources, resource templates, prompts and
// completions served come from: the upstream MCP servers' (package
// backend/upstream's Content).
type ContentSource interface {
	ListResources(ctx context.Context) ([]*mcp.Resource, error)
	ListResourceTemplates(ctx context.Context) ([]*mcp.ResourceTemplate, error)
	// ReadResource and GetPrompt take the request's channels in via (its
	// Client, Session, CallID and Input): an upstream that asks for input
	// while it answers is answered through them, or returns
	// *tool.InputRequiredError for a client that answers by calling
	// again (relayinput.go).
	ReadResource(ctx context.Context, uri string, via *tool.Call) (*mcp.ReadResourceResult, error)
	ListPrompts(ctx context.Context) ([]*mcp.Prompt, error)
	GetPrompt(ctx context.Context, name string, args map[string]string, via *tool.Call) (*mcp.GetPromptResult, error)
	// Complete answers completion/complete for a prompt or a resource
	// template.
	Complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error)
	// Subscribe and Unsubscribe are counted: each Subscribe of a URI is
	// matched by one Unsubscribe.
	Subscribe(ctx context.Context, uri string) error
	Unsubscribe(ctx context.Context, uri string) error
	// OnResourceUpdated sets what is called with each updated URI that
	// is subscribed.
	OnResourceUpdated(fn func(uri string))
	// Offers says whether completions and subscriptions are offered (an
	// upstream declared them).
	Offers() (completions, subscribe bool)
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
		res.CacheScope = privateScope
		var keys []string // for servedContent
		for _, r := range all {
			// Listed as a read of it would be decided: by its normal form;
			// one without a normal form cannot be read, so is not listed.
			if n, err := resuri.Normalize(r.URI); err == nil && allowed(policy.KindResource, n) {
				res.Resources = append(res.Resources, r)
				keys = append(keys, r.URI)
			}
		}
		return servedContent(res, src, method, "resources", keys), nil
	case "resources/templates/list":
		// Granted by the same globs, matched against the URI template
		// itself; a URI read through a template is decided on its own.
		all, err := src.ListResourceTemplates(ctx)
		if err != nil {
			return nil, err
		}
		res := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}
		res.CacheScope = privateScope
		var keys []string // for servedContent
		for _, t := range all {
			if allowed(policy.KindResource, t.URITemplate) {
				res.ResourceTemplates = append(res.ResourceTemplates, t)
				keys = append(keys, t.URITemplate)
			}
		}
		return servedContent(res, src, method, "resourceTemplates", keys), nil
	case "resources/read":
		p, _ := req.GetParams().(*mcp.ReadResourceParams)
		if p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resources/read: missing params"}
		}
		uri, err := normalURI("resources/read", p.URI)
		if err != nil {
			s.auditContent(caller, policy.KindResource, p.URI, "invalid", err.Error())
			return nil, err
		}
		d := pol.DecideContent(caller, policy.KindResource, uri)
		if !d.Allow {
			s.auditContent(caller, policy.KindResource, uri, "deny", d.Reason)
			return nil, &jsonrpc.Error{Code: codeResourceNotFound, Message: "resource not found: " + p.URI}
		}
		via, mc, err := s.contentVia(req, caller, "resources/read", uri, p.RequestState, p.InputResponses)
		if err != nil {
			return nil, err
		}
		res, err := src.ReadResource(ctx, uri, via)
		if res != nil {
			res.CacheScope = privateScope // granted per caller
		}
		if ir, ok := asInputRequired(err); ok {
			s.auditContent(caller, policy.KindResource, uri, "input_required", d.Reason)
			return s.relayContentInput(mc, "resources/read", caller, uri, via, ir)
		}
		s.auditContent(caller, policy.KindResource, uri, outcomeOf(err), d.Reason)
		return res, contentError(err, codeResourceNotFound, "resource not found: "+p.URI)
	case "prompts/list":
		all, err := src.ListPrompts(ctx)
		if err != nil {
			return nil, err
		}
		res := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
		res.CacheScope = privateScope
		var keys []string // for servedContent
		for _, p := range all {
			if allowed(policy.KindPrompt, p.Name) {
				res.Prompts = append(res.Prompts, p)
				keys = append(keys, p.Name)
			}
		}
		return servedContent(res, src, method, "prompts", keys), nil
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
		via, mc, err := s.contentVia(req, caller, "prompts/get", p.Name, p.RequestState, p.InputResponses)
		if err != nil {
			return nil, err
		}
		res, err := src.GetPrompt(ctx, p.Name, p.Arguments, via)
		if ir, ok := asInputRequired(err); ok {
			s.auditContent(caller, policy.KindPrompt, p.Name, "input_required", d.Reason)
			return s.relayContentInput(mc, "prompts/get", caller, p.Name, via, ir)
		}
		s.auditContent(caller, policy.KindPrompt, p.Name, outcomeOf(err), d.Reason)
		return res, contentError(err, jsonrpc.CodeInvalidParams, "unknown prompt: "+p.Name)
	}
}

// normalURI is the form of a requested resource URI that the policy
// decides and the upstream is sent (package resuri: dot segments removed,
// percent-encodings normalised), so that a glob such as rt://files/* is
// matched against what the upstream will read, not against text that
// climbs out of it (rt://files/.., %2e%2e%2f). A URI that cannot be made
// safe is invalid params.
func normalURI(method, uri string) (string, error) {
	n, err := resuri.Normalize(uri)
	if err != nil {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": " + err.Error()}
	}
	return n, nil
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
	s.auditContentStep("read", caller, kind, name, outcome, reason)
}

// auditContentStep writes one audit event of a read, get, completion or
// subscription (step).
func (s *Server) auditContentStep(step, caller, kind, name, outcome, reason string) {
	s.g.Record(context.Background(), tool.Event{Msg: kind, Attrs: []any{"step", step, "outcome", outcome, "caller", caller, kind, name, "reason", reason}})
}

// complete answers completion/complete: the prompt or resource template
// it names must be granted to caller, as for a get or a read (one not
// granted is answered as unknown); each is audited (step "complete").
func (s *Server) complete(ctx context.Context, req *mcp.CompleteRequest, caller string) (*mcp.CompleteResult, error) {
	p := req.Params
	if p == nil || p.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete: missing ref"}
	}
	pol := s.contentPolicy()
	var kind, name string
	var code int64
	switch p.Ref.Type {
	case "ref/prompt":
		kind, name, code = policy.KindPrompt, p.Ref.Name, jsonrpc.CodeInvalidParams
	case "ref/resource":
		kind, name, code = policy.KindResource, p.Ref.URI, codeResourceNotFound
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete: unknown ref type " + p.Ref.Type}
	}
	unknown := "unknown prompt: " + name
	if kind == policy.KindResource {
		unknown = "resource not found: " + name
	}
	d := pol.DecideContent(caller, kind, name)
	if !d.Allow {
		s.auditContentStep("complete", caller, kind, name, "deny", d.Reason)
		return nil, &jsonrpc.Error{Code: code, Message: unknown}
	}
	res, err := s.opts.Content.Complete(ctx, p)
	s.auditContentStep("complete", caller, kind, name, outcomeOf(err), d.Reason)
	return res, contentError(err, code, unknown)
}

func (s *Server) contentPolicy() policy.ContentPolicy {
	if s.opts.ContentPolicy == nil {
		return policy.DenyAll{}
	}
	return s.opts.ContentPolicy
}

// subscriptions are the resource URIs each session subscribed to through
// the server; the upstream is subscribed while any session is (the
// source counts). The SDK keeps its own record of who to notify, fed by
// the same handlers, and forgets a session when it ends. Each session's
// and each caller's count, subscriptions being made included, is bounded
// (Options.MaxSubscriptionsPerSession, MaxSubscriptionsPerCaller): 20,000
// subscribes on one session held 230 MB and reached the upstream 20,000
// times (issue 22, item 7).
type subscriptions struct {
	mu        sync.Mutex
	bySession map[*mcp.ServerSession]*sessionSubs
	byCaller  map[string]int // held and being made, over the caller's sessions
}

// sessionSubs are one session's subscriptions.
type sessionSubs struct {
	caller  string
	uris    map[string]bool
	pending int  // being made: counted against the caps already
	ended   bool // the session ended: what is still being made is undone
}

// subscribe is the SDK's SubscribeHandler: granted like a read (one not
// granted is answered as unknown), within the caps, audited (step
// "subscribe"; a refusal by a cap sampled, see Server.limited), passed to
// the upstream that answers for the URI. A URI the session holds already
// keepPermittedSubscriptions leaves, of a subscriptions/listen request's
// resource subscriptions, those its caller may read, when it may read one
// of them at least: the SDK subscribes to each in turn and fails the whole
// stream on the first refusal, so a client that listens for several
// resources would lose them all for one it may not read. What is left out
// is not acknowledged (the acknowledgement lists what the stream carries)
// and is audited as resources/subscribe's refusal is. When none may be
// read, the request is left whole: the first refusal is its answer, as for
// resources/subscribe.
func (s *Server) keepPermittedSubscriptions(r *mcp.SubscriptionsListenRequest, caller string) {
	if r.Params == nil || r.Params.Notifications == nil || len(r.Params.Notifications.ResourceSubscriptions) < 2 || s.opts.Content == nil {
		return
	}
	uris := r.Params.Notifications.ResourceSubscriptions
	kept := make([]string, 0, len(uris))
	type refusal struct{ uri, reason string }
	var refused []refusal
	for _, raw := range uris {
		uri, err := normalURI("subscriptions/listen", raw)
		if err != nil {
			kept = append(kept, raw) // the SDK's subscribe says why, as for one
			continue
		}
		if d := s.contentPolicy().DecideContent(caller, policy.KindResource, uri); d.Allow {
			kept = append(kept, raw)
		} else {
			refused = append(refused, refusal{uri, d.Reason})
		}
	}
	if len(refused) == 0 || len(kept) == 0 {
		return
	}
	for _, x := range refused {
		s.auditContentStep("subscribe", caller, policy.KindResource, x.uri, "deny", x.reason)
	}
	p := *r.Params
	n := *p.Notifications
	n.ResourceSubscriptions = kept
	p.Notifications = &n
	r.Params = &p
}

// is answered at once, and costs nothing.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest, caller string) error {
	if req.Params == nil || req.Session == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resources/subscribe: missing params"}
	}
	uri, err := normalURI("resources/subscribe", req.Params.URI)
	if err != nil {
		s.auditContentStep("subscribe", caller, policy.KindResource, req.Params.URI, "invalid", err.Error())
		return err
	}
	ss := req.Session
	d := s.contentPolicy().DecideContent(caller, policy.KindResource, uri)
	if !d.Allow {
		s.auditContentStep("subscribe", caller, policy.KindResource, uri, "deny", d.Reason)
		return &jsonrpc.Error{Code: codeResourceNotFound, Message: "resource not found: " + req.Params.URI}
	}
	subs, held, limit, max := s.reserveSubscription(ss, caller, uri)
	if held {
		return nil // already: the upstream's count stays
	}
	if limit != "" {
		s.limited(caller, limit, "resources/subscribe", fmt.Sprintf("at most %d (serve.max_%s)", max, limit))
		data, _ := json.Marshal(map[string]any{"limit": limit, "max": max})
		who := "the session"
		if limit == limitSubscriptionCaller {
			who = "caller " + caller
		}
		return &jsonrpc.Error{Code: CodeLimitExceeded, Data: data, Message: fmt.Sprintf(
			"resources/subscribe refused: %s holds the most subscriptions allowed (%d, serve.max_%s): unsubscribe from one first", who, max, limit)}
	}
	uerr := s.opts.Content.Subscribe(ctx, uri)
	s.subs.mu.Lock()
	subs.pending--
	keep := uerr == nil && !subs.ended && !subs.uris[uri] // not a concurrent subscribe's of the same URI
	if keep {
		subs.uris[uri] = true
	} else {
		s.releaseLocked(caller, 1)
	}
	s.subs.mu.Unlock()
	if uerr != nil {
		s.auditContentStep("subscribe", caller, policy.KindResource, uri, "error", d.Reason)
		return contentError(uerr, codeResourceNotFound, "resource not found: "+req.Params.URI)
	}
	if !keep {
		s.opts.Content.Unsubscribe(context.WithoutCancel(ctx), uri)
	}
	s.auditContentStep("subscribe", caller, policy.KindResource, uri, "ok", d.Reason)
	return nil
}

// reserveSubscription counts a subscription of uri being made by ss
// against the caps; or says that ss holds it already (held), or which cap
// refuses it (limit, and its max).
func (s *Server) reserveSubscription(ss *mcp.ServerSession, caller, uri string) (subs *sessionSubs, held bool, limit string, max int) {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	subs = s.subs.bySession[ss]
	if subs != nil && subs.uris[uri] {
		return nil, true, "", 0
	}
	n := 0
	if subs != nil {
		n = len(subs.uris) + subs.pending
	}
	perSession, perCaller := s.opts.MaxSubscriptionsPerSession, s.opts.MaxSubscriptionsPerCaller
	switch {
	case perSession >= 0 && n >= perSession:
		return nil, false, limitSubscriptionSession, perSession
	case perCaller >= 0 && s.subs.byCaller[caller] >= perCaller:
		return nil, false, limitSubscriptionCaller, perCaller
	}
	if subs == nil {
		if s.subs.bySession == nil {
			s.subs.bySession = map[*mcp.ServerSession]*sessionSubs{}
			s.subs.byCaller = map[string]int{}
		}
		subs = &sessionSubs{caller: caller, uris: map[string]bool{}}
		s.subs.bySession[ss] = subs
		go s.endSubscriptions(ss, subs)
	}
	subs.pending++
	s.subs.byCaller[caller]++
	return subs, false, "", 0
}

// endSubscriptions undoes a session's subscriptions when it ends.
func (s *Server) endSubscriptions(ss *mcp.ServerSession, subs *sessionSubs) {
	ss.Wait()
	s.subs.mu.Lock()
	subs.ended = true
	if s.subs.bySession[ss] == subs {
		delete(s.subs.bySession, ss)
	}
	uris := subs.uris
	subs.uris = map[string]bool{}
	s.releaseLocked(subs.caller, len(uris))
	s.subs.mu.Unlock()
	for uri := range uris {
		s.unsubscribeUpstream(uri)
	}
}

// releaseLocked takes n subscriptions off caller's count; s.subs.mu held.
func (s *Server) releaseLocked(caller string, n int) {
	if s.subs.byCaller[caller] -= n; s.subs.byCaller[caller] <= 0 {
		delete(s.subs.byCaller, caller)
	}
}

// unsubscribe is the SDK's UnsubscribeHandler; unsubscribing from what the
// session is not subscribed to is no error.
func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	if req.Params == nil || req.Session == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resources/unsubscribe: missing params"}
	}
	// Subscriptions are held by their normal form (subscribe); a URI with
	// no normal form was never subscribed to.
	uri, err := resuri.Normalize(req.Params.URI)
	if err != nil {
		return nil
	}
	s.subs.mu.Lock()
	subs := s.subs.bySession[req.Session]
	had := subs != nil && subs.uris[uri]
	if had {
		delete(subs.uris, uri)
		s.releaseLocked(subs.caller, 1)
	}
	s.subs.mu.Unlock()
	if had {
		s.unsubscribeUpstream(uri)
	}
	return nil
}

// SubscriptionCount returns how many resource subscriptions caller holds
// (or is making) over all its sessions.
func (s *Server) SubscriptionCount(caller string) int {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	return s.subs.byCaller[caller]
}

func (s *Server) unsubscribeUpstream(uri string) {
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	if err := s.opts.Content.Unsubscribe(ctx, uri); err != nil {
		s.log.Warn("upstream resource not unsubscribed", "uri", uri, "error", err.Error())
	}
}

// unsubscribeTimeout bounds an upstream's answer to resources/unsubscribe
// sent when a session ends or unsubscribes.
const unsubscribeTimeout = 10 * time.Second

// resourceUpdated sends notifications/resources/updated to the sessions
// subscribed to uri (the SDK's record), and to no other.
func (s *Server) resourceUpdated(uri string) {
	p := &mcp.ResourceUpdatedNotificationParams{URI: uri}
	for _, srv := range []*mcp.Server{s.stdio, s.http, s.modern} {
		srv.ResourceUpdated(context.Background(), p)
	}
}
