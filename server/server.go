// Package server serves a gateway to MCP clients, over stdio and over
// streamable HTTP, with the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// What it promises:
//
//   - Every tools/call goes through [gateway.Gateway.Call], the whole
//     pipeline, as the caller of its connection: over stdio the configured
//     [Options.StdioCaller]; over HTTP the caller its bearer token maps to
//     ([Options.Tokens]). An HTTP request without a known token is answered
//     401 before any MCP processing, and so are all of them when no token is
//     configured. An HTTP session is bound to the caller that opened it.
//   - tools/list lists only the tools the caller's policy allows
//     ([gateway.Gateway.ToolsFor]), read from the gateway at each request,
//     each with its name, description and input schema unchanged: the
//     schema's JSON bytes are sent as registered, never decoded and
//     re-encoded through Go values. A tool whose schema is not a JSON object
//     with "type": "object" at its root (which the subset allows: D4) cannot
//     be described in MCP without changing its schema (MCP requires that
//     root, and clients refuse a list holding another), so it is left out of
//     tools/list, with a warning in the log, rather than altered; it stays
//     callable by name through the pipeline. A tool with a descriptor of
//     its source's (an upstream's tools/list object, tool.Tool.Descriptor)
//     is sent as that object, every member as the source sent it, only its
//     name rewritten (tool.Served); likewise each resource, resource
//     template and prompt a ContentSource has the bytes of.
//   - A call the gateway refuses before invocation (validation, unsupported
//     schema, forbidden, approval required, budget) or that fails is a tool
//     result with isError true, carrying the [*gateway.Error] (class,
//     message, step, pointers, every violation) in structuredContent and the
//     same in words in content (SEP-1303), so a model can correct itself.
//     For a tool that declares an output schema, an error result the
//     server writes (a refusal, a failure, a built-in's own error) has the
//     object in _meta[MetaError] instead: clients validate
//     structuredContent against the output schema, some even when isError
//     is set.
//     Protocol errors are kept for malformed requests, and for a tool name
//     the gateway does not know (invalid params, as the MCP specification
//     says, with the gateway's error object as data).
//   - A result the backend produced is sent as it is: an upstream MCP
//     server's result object ({content, structuredContent, isError}) passes
//     through; any other JSON value is sent as text, and as
//     structuredContent when it is an object. The gateway's call id is in
//     _meta ([MetaCallID]).
//   - Approvals: a call needing approval returns approval_required at once
//     by default, with the request id and the ways to decide it
//     ([gateway.Gateway.ApprovalHints]); with [Options.ApprovalWait] > 0 it
//     waits that long (at most gateway.MaxApprovalWait, below the SDK clients' 60s
//     timeout) for a decision taken elsewhere, sending notifications/progress
//     when the request carried a progress token. Where a policy rule sets
//     self_approve and the client declared elicitation, the request is put
//     to the person at that client through elicitation/create, whatever
//     the wait (0 included), bounded by the gateway's self-approval
//     timeout (gateway.ApprovalOptions.SelfApproveTimeout); the decision is
//     recorded as the caller's, through the elicitation channel. A call
//     ends when its client's HTTP request does (a disconnect) or on
//     notifications/cancelled, and then never consumes an approval. While
//     a call's request has dropped and no request of its session has
//     resumed a stream (Last-Event-ID: other requests, such as a
//     standalone GET stream opened before, do not count), its client is
//     away: an approval decided then is not consumed by the call, which
//     goes on only once the client is back and withdraws when the resume
//     grace ends first.
//   - ask_user_question (the built-in tool): when the client declared the
//     elicitation capability, the question of a call is put to the person
//     at that client through elicitation/create (the call carries it: [gateway.CallRequest.Asker]);
//     otherwise the tool answers that there is no interaction channel.
//   - What an upstream MCP server sends during a call reaches the client
//     that made it ([gateway.CallRequest.Client], package backend/upstream):
//     progress under the token of the client's request (none when it gave
//     none), log messages to the session at its logging/setLevel (the
//     logging capability is declared; nothing is sent before the client
//     sets a level), and sampling, elicitation and roots requests, when the
//     client declared the capability.
//   - Resources and prompts of the upstreams ([Options.Content]) are
//     listed, read and got as [Options.ContentPolicy] grants them to the
//     caller (policy keys resources and prompts; default deny): one not
//     granted is answered as unknown. Each read and get is audited
//     (through the gateway, gateway.Gateway.Record). Resource templates are listed as the same
//     globs grant their URI template; a URI no upstream lists as a
//     resource is read from the upstream whose templates match it (none
//     when templates of two upstreams do). completion/complete for a
//     prompt or resource template, and resources/subscribe, are granted
//     like a get or a read, audited, and passed to that upstream; its
//     notifications/resources/updated go to the sessions subscribed to
//     that URI only. The completions capability and resources.subscribe
//     are declared only when an upstream declared them.
//   - HTTP streams are resumable: every event has an id and is kept in a
//     bounded in-memory store ([Options.ResumeBytes]), so a client whose
//     connection drops during a long call or an approval wait reconnects
//     with Last-Event-ID and gets the answer.
//   - The HTTP handler also serves /metrics (Prometheus, its own registry;
//     an operator's token is required ([Options.Operators]), as the metrics
//     name callers and tools: a caller's token gets 403), /healthz and
//     /readyz (no token; the checks of [gateway.Gateway.CheckHealth]).
//     /healthz is liveness: 200 when the store answers and the gateway's
//     last write to it did not fail, 503 otherwise; /readyz is also 503
//     while an upstream marked required is down. Both answer
//     {"ok", "state", "upstreams": {NAME: "up"|"down"}}, the state being
//     ok, degraded (an upstream down), not_ready or failing; never why an
//     upstream is down (they are open to anyone).
//   - Limits of the HTTP face (limits.go, sessions.go): a caller holds at
//     most [Options.MaxSessionsPerCaller] sessions (one more initialize
//     closes the caller's least recently used session with nothing in
//     flight, or is answered 429 when every one is in use), a
//     session idle for [Options.SessionIdleTimeout] is closed, a browser
//     request whose Origin is neither a loopback origin of the listener
//     nor in [Options.AllowedOrigins] is answered 403 on /mcp, and
//     headers, bodies, idle connections and non-stream writes have
//     timeouts ([HTTPTimeouts]); /mcp's event streams are never cut by
//     them.
//   - Limits of every face (ratelimit.go): each caller's requests draw on
//     a token bucket ([Options.RateLimit], [Options.RateBurst]) before any
//     work: over HTTP every /mcp request (past it: 429 with Retry-After),
//     over stdio every message (past it: a JSON-RPC error,
//     [CodeLimitExceeded], with the seconds to wait). A session holds at
//     most [Options.MaxSubscriptionsPerSession] resource subscriptions and
//     a caller [Options.MaxSubscriptionsPerCaller] (one more:
//     CodeLimitExceeded, never sent upstream); a repeated subscribe of a
//     URI held costs nothing. Every refusal is counted in /metrics
//     (backplane_mcp_requests_limited_total) and sampled in the audit log
//     (the first per caller and limit each second, with the count since
//     the last); the server's log lines of them are throttled as every
//     refusal's (logthrottle.go).
//   - Trace context: a tools/call's _meta traceparent and tracestate (W3C
//     Trace Context), else the HTTP request's headers of those names, make
//     the gateway's span of the call (when it traces) a child of the
//     caller's; an invalid one is ignored. [Options.Collectors] add to
//     /metrics (the trace exporter's dropped-span counters).
//   - Over stdio, a line that is not a JSON-RPC message is answered with a
//     JSON-RPC error (-32700, -32600) and skipped. A request read before
//     the end of input is answered before the session ends, within
//     [Options.StdioDrain] (10s by default): a call still running then
//     is cancelled. A session's tools/call whose params the server reads
//     exactly as the SDK would is served without the SDK's decoding of
//     them, by the same code and with the same answer (stdiocalls.go).
//
// The server speaks MCP 2026-07-28 and the session-based versions
// ([StatelessProtocolVersions], [ProtocolVersions]) on one endpoint and
// over stdio, told apart per request (modern.go): a request carrying
// 2026-07-28's per-request _meta is served without a session (over HTTP
// by a stateless handler, nothing of an earlier request held in the
// process: see docs/protocol.md), with server/discover, its headers
// checked (-32020), resultType on every result and cacheScope private on
// lists and reads (a tools/call that sends nothing before its result is
// answered as one application/json body by a handler of the server's
// own, which decodes the request once: fastpath.go; every other request
// of that revision by the SDK's stateless handler); an initialize opens a 2025-11-25 (or older) session,
// served as above. At 2026-07-28 nothing is sent to the client in the
// middle of a request: a self-approval is answered input_required, with
// an elicitation request and a signed requestState bound to the exact
// call (mrtr.go, requeststate.go), whose retry decides the same approval
// record; an upstream's input requests (tools/call, resources/read,
// prompts/get) are answered input_required too, with a signed state whose
// retry continues the call (relayinput.go: the attempt is journaled failed
// as input_required, its continuation once under its own key);
// ask_user_question has no channel, and a 2025-11-25 upstream's requests
// in the middle of a call are refused. A call that waits for an operator,
// from a 2026-07-28 client that declared the tasks extension, is answered
// with a task (tasks.go) that any replica's tasks/get follows to the
// call's answer; the task is the approval request. subscriptions/listen
// hears the changes of what its caller may see and its resources'
// updates; the Mcp-Param-* headers of the gateway's tools are checked
// against the body (paramheaders.go). Each call's client (clientInfo) and
// protocol version are recorded in its audit event.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/internal/opauth"
	"github.com/agentbackplane/backplane/oauth"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults.
const (
	DefaultPageSize = 1000
)

// ProtocolVersions are the MCP protocol versions served, newest first.
var ProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// ErrServerClosed is returned by ServeHTTP and ServeStdio when the server
// is already shut down.
var ErrServerClosed = errors.New("server: shut down")

// ErrNoStdioCaller is returned by [Server.ServeStdio] and [Server.Connect]
// when no stdio caller is configured: every call needs a caller.
var ErrNoStdioCaller = errors.New("server: no stdio caller is configured (serve.stdio_caller)")

// Options configure a Server. A nil *Options, and every zero field, means
// the default.
type Options struct {
	// Tokens maps bearer tokens to caller names, for HTTP. None: every HTTP
	// request is refused (401).
	Tokens map[string]string
	// OAuth, when set, also accepts the JWT access tokens it verifies (the
	// caller is the one its claim names), names its metadata document in
	// the WWW-Authenticate challenge of a 401, and serves that document
	// (auth.go).
	OAuth *oauth.Verifier
	// AnonymousCaller, when set, is the caller of an HTTP request without
	// an Authorization header, on a loopback listener only (ServeHTTP
	// refuses another). A request with a token that is not valid is still
	// refused.
	AnonymousCaller string
	// TLS, when set, makes ServeHTTP serve TLS on its listener with this
	// configuration (internal/tlsreload's, in serve).
	TLS *tls.Config
	// CertCaller, with TLS verifying client certificates, names the
	// caller of a request without an Authorization header from its
	// verified client certificate: "cn", "san_uri" or "san_dns"
	// (tlscaller.go). "" names none that way.
	CertCaller string
	// Operators maps operators' bearer tokens to their names: only they
	// read /metrics (and use the console). A caller's token is refused there
	// with 403.
	Operators map[string]string
	// TokenAuth, when set, tells operators' tokens from callers' in place
	// of a table made of Operators and Tokens, and keeps the count of
	// wrong bearer tokens (/mcp, /metrics): serve hands the console the
	// same one, so that tries spread over both are counted together.
	// (internal/opauth: set within this module only.)
	TokenAuth *opauth.Tokens
	// StdioCaller is the caller of every call made over stdio (and over a
	// transport given to Connect).
	StdioCaller string
	// ApprovalWait bounds how long a call waits for an approval decision
	// taken elsewhere. 0 (the default), or a negative value, returns
	// approval_required at once; at most gateway.MaxApprovalWait, below the MCP
	// SDK clients' 60s request timeout. (A question put to the person at
	// the caller's own client has its own bound: the gateway's.)
	ApprovalWait time.Duration
	// TaskSweep is how often the server looks for tasks to act on
	// (tasks.go): approved ones to run without waiting for their client's
	// next tasks/get, and ones whose runner died. A decision taken through
	// this server's gateway (its console) is acted on at once, without
	// waiting for the next look. Default
	// DefaultTaskSweep; negative: never (the tasks then move only when
	// polled).
	TaskSweep time.Duration
	// Logger receives the server's own events (not the gateway's audit).
	// Default: discard.
	Logger *slog.Logger
	// Version is reported to clients as the server's version.
	Version string
	// PageSize is the largest number of tools in one tools/list page.
	// Default 1000.
	PageSize int
	// Content, when set, serves the upstreams' resources and prompts,
	// as ContentPolicy grants them to each caller (nil: none granted).
	Content       ContentSource
	ContentPolicy policy.ContentPolicy
	// ResumeBytes bounds the memory kept for resuming HTTP streams
	// (Last-Event-ID). Default DefaultResumeBytes; negative: no resumption.
	ResumeBytes int
	// ResumeGrace is how long a call whose HTTP request dropped waits for
	// its session to come back (a request of the same session, such as
	// the GET that resumes the stream) before it is cancelled. Default
	// DefaultResumeGrace; negative, or without resumption: at once.
	ResumeGrace time.Duration
	// SessionIdleTimeout closes an HTTP session that received no request
	// for this long. Default 30m; negative: never.
	SessionIdleTimeout time.Duration
	// MaxSessionsPerCaller bounds the HTTP sessions one caller holds open;
	// an initialize beyond it closes the caller's least recently used
	// session with no request, stream or call in flight, and is answered
	// 429 only when there is none. Default 16; negative: no bound.
	MaxSessionsPerCaller int
	// AllowedOrigins are the browser origins ("https://app.example") whose
	// requests /mcp serves, besides the loopback origins on the
	// listener's port; a request with another Origin header is answered
	// 403. A request without one (not from a browser) is served.
	AllowedOrigins []string
	// Timeouts are the HTTP server's (see HTTPTimeouts); zero fields mean
	// the defaults.
	Timeouts HTTPTimeouts
	// Console, when set, is served over HTTP at PathConsole and below: the
	// operators' web console (package console), which authenticates its
	// own requests. When it has a Close method, a shutdown calls it first,
	// so that its live streams do not hold the server.
	Console http.Handler
	// UpstreamCallback, when set, is served at PathUpstreamCallback (GET,
	// no token): the redirect that completes a caller's authorization at
	// an upstream server's authorization server (backend/upstream's Logins).
	UpstreamCallback http.Handler
	// Collectors are more Prometheus metrics served at /metrics (the
	// tracing exporter's counters).
	Collectors []prometheus.Collector
	// RateLimit is each caller's rate of requests, a token bucket of
	// RateBurst (at least 1) refilled RateLimit times a second, that
	// every MCP request and notification draws on, over HTTP and stdio:
	// past it a request is refused before any work (HTTP 429 with
	// Retry-After; over stdio a JSON-RPC error, CodeLimitExceeded).
	// 0 or negative: no limit (serve's configuration sets one by
	// default: serve.rate_limit).
	RateLimit, RateBurst int
	// MaxSubscriptionsPerSession and MaxSubscriptionsPerCaller bound the
	// resources/subscribe a session, and a caller over all its sessions,
	// hold at once; one more is refused (CodeLimitExceeded); a repeated
	// subscribe of a URI held is no new one. Defaults 256 and 1024;
	// negative: no bound.
	MaxSubscriptionsPerSession, MaxSubscriptionsPerCaller int
	// StdioDrain bounds how long ServeStdio, once its input ended, waits
	// for the answers to the requests read before the end. Default
	// DefaultStdioDrain; negative: the session ends at once.
	StdioDrain time.Duration
	// Hooks, when set, serves the coding agents' hook endpoints at
	// PathHooks (hooks.go). Nil: none.
	Hooks *HookOptions
	// RequestStateKey signs the requestState of 2026-07-28 input_required
	// answers (requeststate.go); every replica behind one balancer needs
	// the same key (serve.request_state_key). Empty: a random key of this
	// process, whose states no other process accepts.
	RequestStateKey []byte
}

// DefaultStdioDrain is how long the requests a stdio client sent before
// closing its input have to be answered: as long as serve's shutdown
// grace.
const DefaultStdioDrain = 10 * time.Second

// Server serves one gateway over MCP. Create it with New.
type Server struct {
	g      *gateway.Gateway
	opts   Options
	wait   time.Duration
	log    *slog.Logger
	sdkLog *slog.Logger
	// refusals throttles the log lines of refused requests (logthrottle.go).
	refusals *logThrottle
	tokens   []tokenEntry
	// opAuth tells operators' tokens from callers' (operators.go) and
	// counts failed bearer tokens by what they start with, blocking a start
	// that failed too often (internal/opauth, internal/auththrottle).
	opAuth  *opauth.Tokens
	metrics *metrics

	stdio  *mcp.Server // its caller is opts.StdioCaller
	http   *mcp.Server // its caller comes with each request's token
	modern *mcp.Server // the same, for 2026-07-28 requests (no sessions)

	httpHandler   *mcp.StreamableHTTPHandler
	modernHandler *mcp.StreamableHTTPHandler // stateless: 2026-07-28 (modern.go)

	// Shutdown: stopCalls cancels the calls still running once the grace
	// period is over.
	stop      context.Context
	stopCalls context.CancelFunc
	active    atomic.Int64 // calls in flight
	drops     atomic.Int64 // calls whose HTTP request ended before them (tests)

	mu          sync.Mutex
	shutdown    bool           // Shutdown was called
	httpServers []*http.Server // those ServeHTTP runs, stopped by Shutdown

	changes listChanges   // list_changed to the sessions whose catalog changed
	subs    subscriptions // resource subscriptions of the sessions (content.go)
	// paramHeaders are the tools' x-mcp-header bindings (paramheaders.go).
	paramHeaders paramHeaderCache
	rates        *rateLimits    // each caller's bucket (ratelimit.go)
	refused      refusalSampler // sampling of the limits' refusals for the audit log

	sessionIDs   sync.Map // *mcp.ServerSession -> string, for sessions without a transport id
	httpRequests sync.Map // requestHeader value -> the HTTP request's context
	unlistable   sync.Map // tool name -> struct{}: warned once

	live         sync.Map    // Mcp-Session-Id -> *sessionLive: its HTTP requests in progress (resume.go)
	openSessions sync.Map    // Mcp-Session-Id -> struct{}: initialized HTTP sessions not ended yet
	sess         sessions    // whose each HTTP session is, for MaxSessionsPerCaller
	states       stateSigner // signs 2026-07-28 request states
	origins      []string    // AllowedOrigins, normalised
	timeouts     HTTPTimeouts

	runnerOnce sync.Once // runnerID: who claims the tasks this server runs (tasks.go)
	runnerID   string
}

type tokenEntry struct {
	token  []byte
	caller string
}

// New returns a server for g.
func New(g *gateway.Gateway, opts *Options) *Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Server{g: g, opts: o, wait: min(max(o.ApprovalWait, 0), gateway.MaxApprovalWait), log: o.Logger, refusals: newLogThrottle()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// The SDK logs every session's connection at info level: only its
	// warnings and errors are worth the server's log.
	s.sdkLog = slog.New(minLevel{s.log.Handler(), slog.LevelWarn})
	if s.opts.PageSize <= 0 {
		s.opts.PageSize = DefaultPageSize
	}
	if s.opts.MaxSessionsPerCaller == 0 {
		s.opts.MaxSessionsPerCaller = DefaultMaxSessionsPerCaller
	}
	if s.opts.MaxSubscriptionsPerSession == 0 {
		s.opts.MaxSubscriptionsPerSession = DefaultMaxSubscriptionsPerSession
	}
	if s.opts.MaxSubscriptionsPerCaller == 0 {
		s.opts.MaxSubscriptionsPerCaller = DefaultMaxSubscriptionsPerCaller
	}
	s.rates = newRateLimits(s.opts.RateLimit, s.opts.RateBurst)
	idle := s.opts.SessionIdleTimeout
	switch {
	case idle == 0:
		idle = DefaultSessionIdleTimeout
	case idle < 0:
		idle = 0 // the SDK's "never"
	}
	s.sess = sessions{byID: map[string]*sessionEntry{}, pending: map[string]int{}, converted: map[string]int{}}
	s.origins = normOrigins(o.AllowedOrigins)
	s.states = newStateSigner(o.RequestStateKey)
	s.timeouts = o.Timeouts.withDefaults()
	for tok, caller := range o.Tokens {
		s.tokens = append(s.tokens, tokenEntry{[]byte(tok), caller})
	}
	s.opAuth = o.TokenAuth
	if s.opAuth == nil {
		s.opAuth = opauth.New(o.Operators, o.Tokens, nil)
	}
	s.metrics = newMetrics(g, o.Collectors...)
	s.metrics.reg.MustRegister(sessionCollector{s}, upstreamCollector{g})
	s.stop, s.stopCalls = context.WithCancel(context.Background())
	s.startTaskSweeper()
	stdioCaller := func(mcp.Request) (string, error) {
		if s.opts.StdioCaller == "" {
			return "", ErrNoStdioCaller
		}
		return s.opts.StdioCaller, nil
	}
	s.stdio = s.newMCPServer(stdioCaller)
	// Added last, so run first: a request over the rate does no work.
	s.stdio.AddReceivingMiddleware(s.rateLimitStdio(stdioCaller))
	s.http = s.newMCPServer(callerFromToken)
	g.OnChange(s.catalogChanged)
	if o.Content != nil {
		o.Content.OnResourceUpdated(s.resourceUpdated)
	}
	s.httpHandler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.http },
		&mcp.StreamableHTTPOptions{Logger: s.sdkLog, SessionTimeout: idle, EventStore: s.eventStore()})
	// 2026-07-28 requests: one ephemeral session per request, which ends
	// with it; a call ends when its HTTP request does (no resumption in
	// that revision).
	s.modern = s.newMCPServer(callerFromToken)
	s.modernHandler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.modern },
		&mcp.StreamableHTTPOptions{Logger: s.sdkLog, Stateless: true, PropagateRequestCancellation: true})
	return s
}

// listenCaller is the context key of the caller of a subscriptions/listen
// request, for the resource subscriptions the SDK makes on its behalf.
type listenCaller struct{}

// callerFromToken is the caller of an HTTP request: the authentication
// middleware put it there. A request without it is refused (fail closed).
func callerFromToken(req mcp.Request) (string, error) {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != "" {
		return ex.TokenInfo.UserID, nil
	}
	return "", errors.New("server: the request carries no authenticated caller")
}

func (s *Server) newMCPServer(callerOf func(mcp.Request) (string, error)) *mcp.Server {
	opts := &mcp.ServerOptions{
		Logger: s.sdkLog,
		// The tools are the gateway's, served by the middleware below; the
		// capability is declared rather than inferred from registrations.
		// Catalog changes are announced to the sessions they concern
		// (listchanged.go).
		Capabilities:              withTasks(s.capabilities(&mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}})),
		SupportedProtocolVersions: servedVersions(),
		PageSize:                  s.opts.PageSize,
	}
	// Completions and subscriptions go through the SDK's handlers (which
	// check their params, and record who subscribed to what), only when
	// an upstream offers them.
	if s.opts.Content != nil {
		completions, subscribe := s.opts.Content.Offers()
		if completions {
			opts.CompletionHandler = func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				return s.complete(ctx, req, caller)
			}
		}
		if subscribe {
			opts.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
				caller, err := callerOf(req)
				if c, ok := ctx.Value(listenCaller{}).(string); err != nil && ok && c != "" {
					// A subscriptions/listen stream's subscription: the SDK
					// makes the request itself, without the listen
					// request's authentication, which the middleware
					// read.
					caller, err = c, nil
				}
				if err != nil {
					return err
				}
				return s.subscribe(ctx, req, caller)
			}
			opts.UnsubscribeHandler = s.unsubscribe
		}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "backplane", Version: s.opts.Version}, opts)
	registerTasks(srv)
	srv.AddReceivingMiddleware(s.middleware(callerOf))
	srv.AddSendingMiddleware(s.listChangedFilter)
	return srv
}

// middleware answers tools/list and tools/call from the gateway. The tools
// are not registered on the SDK's server: Server.AddTool refuses (panics
// on) a schema without "type": "object" at its root, a copy of the catalog
// would go stale when the gateway's changes, and each caller sees a
// different list anyway.
func (s *Server) middleware(callerOf func(mcp.Request) (string, error)) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if isTaskMethod(method) { // tasks.go
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				return s.tasksMethod(ctx, method, req, caller)
			}
			switch method {
			case "initialize":
				res, err := next(ctx, method, req)
				if err == nil {
					if caller, cerr := callerOf(req); cerr == nil {
						ss, _ := req.GetSession().(*mcp.ServerSession)
						s.recordSession(ss, caller)
					}
				}
				return res, err
			case "tools/list":
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				var cursor string
				if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil {
					cursor = p.Cursor
				}
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok && cursor == "" {
					s.sawList(ss, caller)
				}
				return s.listTools(caller, cursor)
			case "tools/call":
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				r, ok := req.(*mcp.CallToolRequest)
				if !ok || r.Params == nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: missing params"}
				}
				return s.toolsCall(ctx, r, caller, nil)
			case "subscriptions/listen":
				// 2026-07-28: the SDK holds the stream, acknowledges what
				// is offered and delivers what is sent to the session;
				// the session is told of the changes of what its caller
				// may see (listchanged.go), and its resource
				// subscriptions are decided as resources/subscribe's are.
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				if p, ok := req.GetParams().(*mcp.SubscriptionsListenParams); ok && p != nil && p.Notifications != nil && p.Notifications.ToolsListChanged {
					if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
						s.sawListen(ss, caller)
					}
				}
				if r, ok := req.(*mcp.SubscriptionsListenRequest); ok {
					s.keepPermittedSubscriptions(r, caller)
				}
				return next(context.WithValue(ctx, listenCaller{}, caller), method, req)
			}
			if contentMethods[method] && s.opts.Content != nil {
				caller, err := callerOf(req)
				if err != nil {
					return nil, err
				}
				res, err := s.serveContent(ctx, method, req, caller)
				if isModernRequest(req) {
					if err != nil {
						return nil, modernContentError(req, err)
					}
					res = completeTyped(res)
				}
				return res, err
			}
			return next(ctx, method, req)
		}
	}
}

// listTools returns one page of the caller's tools, in name order; the
// cursor is the last name of the previous page.
func (s *Server) listTools(caller, cursor string) (mcp.Result, error) {
	after := ""
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/list: invalid cursor"}
		}
		after = string(b)
	}
	res := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	// Each caller sees its own list: never to be cached for another.
	res.CacheScope = privateScope
	// res.Tools' tools, for servedTools.
	var listed []tool.Tool
	for _, t := range s.g.ToolsFor(caller) { // sorted by name
		if cursor != "" && t.Name <= after {
			continue
		}
		if !objectRoot(t.InputSchema) {
			if _, warned := s.unlistable.LoadOrStore(t.Name, struct{}{}); !warned {
				s.log.Warn("tool left out of tools/list: its input schema has no \"type\": \"object\" root, which MCP requires, and is never altered",
					"tool", t.Name)
			}
			continue
		}
		if len(res.Tools) == s.opts.PageSize {
			res.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(res.Tools[len(res.Tools)-1].Name))
			break
		}
		res.Tools = append(res.Tools, toolOf(t))
		listed = append(listed, t)
	}
	return servedTools(res, listed), nil
}

// toolOf describes a gateway tool in MCP: its name, description and schema
// bytes as registered (its output schema too, when it has one), and its
// safety flags as hints.
func toolOf(t tool.Tool) *mcp.Tool {
	mt := &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.InputSchema)}
	if len(t.OutputSchema) > 0 {
		mt.OutputSchema = json.RawMessage(t.OutputSchema)
	}
	if t.Safety.ReadOnly || t.Safety.Idempotent {
		mt.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: t.Safety.ReadOnly, IdempotentHint: t.Safety.Idempotent}
	}
	return mt
}

// objectRoot reports whether schema is a JSON object whose "type" member is
// the string "object", the root MCP requires of an input schema.
func objectRoot(schema json.RawMessage) bool {
	var root map[string]json.RawMessage
	if json.Unmarshal(schema, &root) != nil {
		return false
	}
	var typ string
	return json.Unmarshal(root["type"], &typ) == nil && typ == "object"
}

// toolsCall answers a tools/call of caller: the middleware's, and a stdio
// session's served without the SDK (stdiocalls.go), whose raw takes the
// result as bytes where it can (see callTool).
func (s *Server) toolsCall(ctx context.Context, req *mcp.CallToolRequest, caller string, raw *rawAnswer) (mcp.Result, error) {
	res, err := s.callTool(ctx, req, caller, raw)
	if task, ok := asTaskAnswer(err); ok { // answered with a task (tasks.go)
		return task, nil
	}
	return res, err
}

// callTool runs one tools/call through the gateway. raw, when set, is a
// stdio session's call served by callConn: its successful result is
// written into raw as bytes where appendSessionResult can (the call then
// returns no typed result).
func (s *Server) callTool(ctx context.Context, req *mcp.CallToolRequest, caller string, raw *rawAnswer) (*mcp.CallToolResult, error) {
	mc, modern := modernOf(req)
	if !modern {
		mc.raw = raw
	}
	return s.runTool(ctx, req, caller, mc, modern)
}

// runTool is callTool once the request's era is known: mc describes a
// 2026-07-28 request's client (modern), read by modernOf or by the fast
// path (fastpath.go).
func (s *Server) runTool(ctx context.Context, req *mcp.CallToolRequest, caller string, mc modernCall, modern bool) (*mcp.CallToolResult, error) {
	s.active.Add(1)
	defer s.active.Add(-1)
	// The call ends with the request, or when shutdown gives up waiting.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := context.AfterFunc(s.stop, cancel)
	defer stopWatch()
	// Over HTTP the call also ends when its client's request does (a
	// disconnect): the SDK keeps the call running for a resumable stream,
	// but a call whose client is gone must not consume an approval.
	// While the client is away (its request dropped, no resumption yet)
	// an approval decided meanwhile is held, never consumed (resume.go).
	var away atomic.Bool
	if req.Extra != nil && !modern {
		if hctx, ok := s.httpRequestContext(req.Extra.Header); ok {
			// With resumable streams, a client that comes back within
			// ResumeGrace (resume.go) keeps its call.
			// (callCtx: ctx is reassigned below, as this may already run.)
			callCtx := ctx
			stopHTTP := context.AfterFunc(hctx, func() { s.cancelUnlessResumed(callCtx, req.Session, cancel, &away) })
			defer stopHTTP()
		}
	}

	p := req.Params
	var hdr http.Header
	if req.Extra != nil {
		hdr = req.Extra.Header
	}
	ctx = withTraceContext(ctx, p.Meta, hdr)
	args := p.Arguments
	if len(args) == 0 {
		// MCP lets a client omit the arguments of a call without any; that
		// is the empty object, not a different value.
		args = json.RawMessage(`{}`)
	}
	session := ""
	if !modern { // a 2026-07-28 request belongs to no session
		session = s.sessionID(req.Session)
	}
	if !modern && req.Session != nil && req.Session.ID() != "" {
		// A running call keeps its session in use, even while its
		// request has dropped and the client may resume (sessions.go).
		s.sessionActive(session, 1)
		defer s.sessionActive(session, -1)
	}
	cr := gateway.CallRequest{
		Caller:       caller,
		Session:      session,
		Tool:         p.Name,
		Arguments:    args,
		ApprovalWait: &s.wait,
		Away:         away.Load,
		CallerToken:  callerJWT(req),
	}
	if key, ok := p.Meta[MetaIdempotencyKey].(string); ok {
		cr.IdempotencyKey = key
	}
	if modern {
		cr.ClientInfo, cr.ProtocolVersion = clientInfoOf(mc.client), mc.version
	} else {
		if ss := req.Session; ss != nil {
			if ip := ss.InitializeParams(); ip != nil {
				cr.ClientInfo, cr.ProtocolVersion = clientInfoOf(ip.ClientInfo), ip.ProtocolVersion
			}
		}
		if supportsElicitation(req.Session) {
			cr.Approver = &elicitApprover{ss: req.Session, args: args, preview: s.previewText}
		}
	}
	if tok := p.GetProgressToken(); tok != nil {
		cr.Progress = func(approvalID string, waited time.Duration) {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: tok,
				Progress:      waited.Seconds(),
				Message: fmt.Sprintf("waiting for approval %s (%s so far): %s",
					approvalID, waited.Round(time.Second), strings.Join(s.g.ApprovalHints(approvalID), "; or ")),
			})
			if err != nil {
				s.log.Debug("progress notification not sent", "session", session, "error", err)
			}
		}
	}

	if modern {
		// 2026-07-28 forbids requests to the client in the middle of a
		// request: a self-approval and an upstream's input requests are
		// put to it as input_required (mrtr.go, relayinput.go);
		// ask_user_question has no channel.
		return s.callModern(ctx, req, cr, mc)
	}
	// ask_user_question puts its question to this session's client.
	cr.Asker = newElicitAsker(req.Session)
	// An upstream's progress, log messages and requests reach this client.
	cr.Client = newSessionClient(req.Session, p.GetProgressToken())
	return s.finishCall(ctx, cr, mc.raw)
}

// finishCall runs a session's cr through the gateway and makes its MCP
// result; with raw, a successful one written as bytes where it can be
// (callTool).
func (s *Server) finishCall(ctx context.Context, cr gateway.CallRequest, raw *rawAnswer) (*mcp.CallToolResult, error) {
	res, err := s.runCall(ctx, cr)
	if raw != nil && err == nil && res != nil {
		// Room for the result twice (Backplane's own: as text and as
		// structuredContent) and its _meta: one allocation.
		if b, ok := appendSessionResult(make([]byte, 0, 2*len(res.Result)+192), res); ok {
			raw.out = b
			return nil, nil
		}
	}
	return toolResult(res, err, s.declaresOutput(cr.Tool, res, err))
}

// declaresOutput reports whether the named tool declares an output schema,
// asked only of an error (a success is written the same either way):
// the lookup reads an upstream tool's descriptor.
func (s *Server) declaresOutput(name string, res *gateway.CallResult, err error) bool {
	if err == nil && (res == nil || !res.IsError) {
		return false
	}
	t, _, ok := s.g.Tool(name)
	return ok && len(tool.OutputSchemaOf(t)) > 0
}

// runCall runs cr through the gateway, counted in the metrics.
func (s *Server) runCall(ctx context.Context, cr gateway.CallRequest) (*gateway.CallResult, error) {
	start := time.Now()
	res, err := s.g.Call(ctx, cr)
	var ge *gateway.Error
	label := cr.Tool
	if errors.As(err, &ge) && ge.Class == tool.ClassNotFound {
		label = unknownTool // an unknown tool, or one hidden from this caller: one label
	}
	s.metrics.observe(label, res, err, time.Since(start))
	return res, err
}

// toolResult is the MCP answer of a call's outcome: a tool result, or
// invalid params for a tool the caller cannot see. hasOutput: the tool
// declares an output schema (successResult, errorResult).
func toolResult(res *gateway.CallResult, err error, hasOutput bool) (*mcp.CallToolResult, error) {
	if err != nil {
		var ge *gateway.Error
		if errors.As(err, &ge) && ge.Class == tool.ClassNotFound {
			data, _ := json.Marshal(ge)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: ge.Message, Data: data}
		}
		return errorResult(err, hasOutput), nil
	}
	return successResult(res, hasOutput), nil
}

// previewText is what a call under approval would do, for an elicitation
// message: the diff or the command, capped like the arguments.
func (s *Server) previewText(ctx context.Context, id string) string {
	v, err := s.g.GetApproval(ctx, id)
	if err != nil || v.Preview == nil {
		return ""
	}
	var b strings.Builder
	if v.Preview.Command != "" {
		b.WriteString("\n\ncommand:\n" + v.Preview.Command)
	}
	if v.Preview.Diff != "" {
		b.WriteString("\n\nchange:\n" + v.Preview.Diff)
	}
	out := b.String()
	if len(out) > maxShownArguments {
		out = out[:maxShownArguments] + "\n... (cut)"
	}
	return out
}

// sessionID is the MCP session id of ss: the transport's (Mcp-Session-Id
// over HTTP), else one minted for the session (stdio has none), so that
// session budgets and the journal can tell sessions apart.
func (s *Server) sessionID(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	if id := ss.ID(); id != "" {
		return id
	}
	if id, ok := s.sessionIDs.Load(ss); ok {
		return id.(string)
	}
	id, loaded := s.sessionIDs.LoadOrStore(ss, "mcp_"+rand.Text()[:20])
	if !loaded {
		go func() { // forget it when the session ends
			ss.Wait()
			s.sessionIDs.Delete(ss)
		}()
	}
	return id.(string)
}

// Connect serves one MCP session over t with the stdio caller: stdio itself
// (see ServeStdio), or an in-memory transport in tests and benchmarks.
func (s *Server) Connect(ctx context.Context, t mcp.Transport) (*mcp.ServerSession, error) {
	if s.opts.StdioCaller == "" {
		return nil, ErrNoStdioCaller
	}
	t, ct := s.stdioTransport(t) // stdiocalls.go
	ss, err := s.stdio.Connect(ctx, t, nil)
	if err == nil && ct != nil && ct.conn != nil {
		ct.conn.session.Store(ss)
	}
	return ss, err
}

// ServeStdio serves one session over r and w (newline-delimited JSON-RPC,
// the stdio transport) until the client closes it (nil) or Shutdown ends
// it (nil; Shutdown reports the calls it had to cancel). A line that is
// not a JSON-RPC message is answered with a JSON-RPC error and skipped,
// never ends the session. The requests read before the end of r are
// answered first, within Options.StdioDrain. It returns ErrServerClosed at once when the
// server is already shut down.
func (s *Server) ServeStdio(r io.ReadCloser, w io.WriteCloser) error {
	s.mu.Lock()
	closed := s.shutdown
	s.mu.Unlock()
	if closed {
		return ErrServerClosed
	}
	// The stdio transport is backplane's own (package mcpstream: one decode
	// per message, none through the SDK's 32 KiB-per-message decoder). A
	// malformed line is answered (-32700, -32600) and skipped, never ends
	// the session: one stray print of a wrapper script must not end serve
	// --stdio.
	// A client may write its requests and close its input at once (a
	// shell pipe): the end of input waits for their answers (Drain).
	drain := s.opts.StdioDrain
	if drain == 0 {
		drain = DefaultStdioDrain
	}
	t := mcpstream.New(r, w, &mcpstream.Options{OnMalformed: func(code int64, why string) {
		s.refusals.warn(s.log, "stdio", "stdio: a line that is not a JSON-RPC message was answered with an error and skipped", "code", code, "error", why)
	}, Drain: max(drain, 0)})
	ss, err := s.Connect(context.Background(), t)
	if err != nil {
		return err
	}
	err = ss.Wait()
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	s.mu.Lock()
	closed = s.shutdown
	s.mu.Unlock()
	if closed {
		return nil // the session ended because Shutdown closed it
	}
	return err
}

// addHTTPServer records hs for Shutdown; false when already shut down.
func (s *Server) addHTTPServer(hs *http.Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	s.httpServers = append(s.httpServers, hs)
	return true
}

// Shutdown is the one way a server ends, whatever it serves: it stops the
// HTTP listeners of ServeHTTP (no new connections), waits for the calls in
// flight until ctx is done, then cancels those still running (a call
// waiting for an approval returns cancelled; one whose tool is running
// settles as the gateway settles a cancelled call), and closes every
// session, which ends ServeStdio and the HTTP streams. The server is done
// then: a call it still receives is cancelled at once, and ServeHTTP and
// ServeStdio return ErrServerClosed. The error reports the calls that had
// to be cancelled.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	servers := slices.Clone(s.httpServers)
	s.mu.Unlock()

	// Stop accepting while the calls drain; the HTTP shutdown completes
	// once the sessions are closed below, which ends their streams.
	httpDone := make(chan error, len(servers))
	drained := make(chan struct{}) // the calls' fate is decided
	for _, hs := range servers {
		go func() {
			err := hs.Shutdown(ctx)
			if err != nil {
				// Closing the connections ends the calls' requests (a
				// call whose client is gone withdraws): only once the
				// drain below has counted what was still running.
				<-drained
				hs.Close()
			}
			httpDone <- err
		}()
	}

	var err error
	drainedInTime := s.drain(ctx)
	close(drained)
	if !drainedInTime {
		err = fmt.Errorf("server: calls still running at shutdown were cancelled: %w", ctx.Err())
		s.stopCalls()
		// Cancelled calls return promptly; a backend that ignores its
		// context is not waited for forever.
		cctx, cancel := context.WithTimeout(context.Background(), cancelledCallsWait)
		defer cancel()
		s.drain(cctx)
	}
	s.stopCalls()
	for _, srv := range []*mcp.Server{s.stdio, s.http, s.modern} {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}
	for range servers {
		if herr := <-httpDone; herr != nil && !errors.Is(herr, context.DeadlineExceeded) && !errors.Is(herr, context.Canceled) {
			err = errors.Join(err, herr)
		}
	}
	return err
}

// cancelledCallsWait bounds the wait for cancelled calls at shutdown.
const cancelledCallsWait = 5 * time.Second

// drain waits until no call is in flight (true) or ctx is done (false).
// It polls: a call may start while it waits (sync.WaitGroup forbids that).
func (s *Server) drain(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return s.active.Load() == 0
		case <-t.C:
		}
	}
	return true
}

// callerOfToken returns the caller token maps to. Every configured token is
// compared, in constant time, whatever matches.
func (s *Server) callerOfToken(token string) (string, bool) {
	caller, found := "", 0
	for _, e := range s.tokens {
		if subtle.ConstantTimeCompare(e.token, []byte(token)) == 1 {
			caller, found = e.caller, 1
		}
	}
	return caller, found == 1 && token != ""
}

// describeTokens is for the start-up log: how many tokens, for whom.
func (s *Server) describeTokens() string {
	var callers []string
	for _, e := range s.tokens {
		if !slices.Contains(callers, e.caller) {
			callers = append(callers, e.caller)
		}
	}
	slices.Sort(callers)
	return strings.Join(callers, ", ")
}

// minLevel is a slog.Handler that drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}
func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
