// Package upstream connects the gateway to upstream MCP servers, as their client,
// with the official Go SDK, and registers their tools in the gateway.
//
// What it promises, for each configured server (a [Server]):
//
//   - Transport. A command is started in its own process group, in
//     Server.Dir, with exactly PATH, HOME and the variables Server.Env names
//     (taken from the gateway's environment at each start), and spoken to
//     over stdio. A URL is spoken to over streamable HTTP, every request
//     carrying Server.Headers (except those the protocol itself sets, such
//     as Content-Type or Mcp-Session-Id). Headers are secrets: they are
//     never logged, never put in an error message. Close kills the
//     program's whole process group; on Linux the kernel also kills the
//     program when the gateway dies, even by SIGKILL.
//   - OAuth (Server.OAuth). Mode service: the gateway's own token on
//     every request (oauth.go). Modes per_caller and exchange: each
//     tools/call carries its own caller's token, from Options.Tokens
//     (per_caller: the caller's authorization code grant, completed at
//     Options.Logins' callback; exchange: the caller's JWT exchanged,
//     RFC 8693), never another caller's; a call whose caller has no token
//     is answered, before anything is sent, with the authorization URL
//     (percaller.go, login.go). These modes need MCP 2026-07-28.
//   - Revisions. The connection speaks MCP 2026-07-28 where the server
//     offers it (the SDK's client sends server/discover first), else
//     2025-11-25 ([Upstream.Protocol] says which). At 2026-07-28 the SDK
//     sends every request's _meta and the Mcp-Method, Mcp-Name and
//     Mcp-Param-* headers (headers.go); a tool whose x-mcp-header
//     annotations are invalid is not offered, and the refused-tools report
//     ([Upstream.Visibility]) says why. A server's input_required answer
//     is relayed to the client of that call and the call retried with its
//     answers, or handed back to a client that answers by calling again
//     (tool.InputDeferrer); so is one to resources/read and prompts/get
//     (mrtr.go). Each request declares the capabilities its caller
//     declared that the bridge relays (tool.CapableClient). A call asks
//     for progress and log messages only when its client can take them
//     (tool.ListeningClient). Over stdio, a first-round tools/call is
//     written by the gateway itself with only what the revision asks of
//     each request (direct.go). At 2025-11-25 over HTTP, a call's SSE stream the
//     server closes mid-call is resumed with Last-Event-ID as often as it
//     is closed (transport.go's polls).
//   - Catalog. tools/list is followed page by page (nextCursor). Each tool
//     is registered in the gateway as NAME.TOOL (or PREFIX TOOL with
//     Server.Prefix, "" for the bare name) with its description and
//     its inputSchema exactly as the server sent them: the raw bytes of the
//     JSON-RPC response, not the SDK's decoded copy, so no keyword, number
//     or string is lost or rewritten (D20). The whole descriptor, as sent,
//     is registered too (tool.Tool.Descriptor): title, icons,
//     outputSchema, every annotation, execution, _meta and members no
//     version of the protocol has yet reach clients unchanged, only the
//     name rewritten, and all of it is part of the definition hash. Tools
//     are Pinned: the gateway records each definition's hash at first
//     sight and holds back a changed one (a changed output schema or hint
//     included) until an operator accepts it.
//   - Resources, resource templates and prompts ([Content]) are listed
//     from the raw answers too: each item is kept as the server sent it
//     ([Content.Descriptor]), since the SDK's types drop members they do
//     not know and zero values ("required": false, "priority": 0).
//   - Safety from the tool's annotations, which are the server's claims:
//     readOnlyHint true makes the tool ReadOnly, idempotentHint true makes it
//     Idempotent, and every tool whose readOnlyHint is not true, or whose
//     destructiveHint is true (even beside readOnlyHint true: the claim
//     that costs the approval is believed), requires an approval (missing
//     annotations included: the conservative default).
//     Within one process a re-listed tool's safety only tightens.
//   - Validator. "subset" (the default): the gateway's own validator; a
//     schema outside the subset is registered unchanged and every call of
//     that tool fails with unsupported_capability before the server is
//     reached. "draft2020-12": package validator/draft2020, an explicit
//     choice (D21); a schema it cannot compile is still registered and every
//     call fails with unsupported_capability (fail closed), never falls back
//     to another validator.
//   - Output schemas. A tool's outputSchema is compiled with the same
//     validator as its input schema; one the validator cannot compile
//     makes every call of the tool fail with unsupported_capability before
//     the server is reached. A result that is not a tool error and whose
//     structuredContent is missing or breaks the output schema comes back
//     as a *tool.InvalidResultError carrying the result and every
//     violation (paths from $structuredContent, pointers into it): the
//     gateway settles it succeeded (invalid_result), never a success.
//   - Collisions. A tool name already registered (another server's, a
//     built-in or a configured tool) makes [Connect] fail with a
//     [*CollisionError]; found later, on a re-list, the newcomer is left
//     out and logged.
//   - Changes. On notifications/tools/list_changed the catalog is listed
//     again: vanished tools are unregistered, new and changed ones
//     registered (a changed one is then held by its pin).
//   - Outages. A stdio server that dies is started again, an HTTP one
//     reconnected, with exponential backoff (Options.MinBackoff doubling up
//     to Options.MaxBackoff, 100ms and 30s by default; the delay starts over
//     after a connection that lived 10s). Calls made once the loss is seen
//     fail at once with an error wrapping [tool.ErrNotStarted]: nothing
//     was sent. The tools stay registered meanwhile; a reconnection lists
//     them again (a server restarted with changed tools gets them held).
//   - Calls. tools/call with the validated argument bytes. The result is
//     the JSON object {content, structuredContent, isError} with the members
//     the server sent, as it sent them, and IsError from isError. The
//     outcome, in the terms of package backend: a request that was never
//     written, or that the server answered with a JSON-RPC error which
//     proves it never dispatched the call (-32602 invalid params, which
//     covers unknown tools, -32601, -32600, -32700), wraps
//     [tool.ErrNotStarted]; a request written and then left unanswered
//     (the connection broke, the deadline passed) or answered with another
//     error is a plain error: the gateway settles it uncertain. An answer
//     that cannot be read (over stdio: too deep, too large, not a valid
//     message, yet carrying the request's id) wraps
//     [tool.ErrMalformedResult] and fails that call alone: the
//     connection and the other calls on it go on; a line of the server's
//     that carries no usable id is logged (at most once a second, with a
//     count) and dropped. Only a torn line (an object that does not end
//     with its line) ends the connection.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/sandbox"
	"github.com/agentbackplane/backplane/tool"
	"github.com/agentbackplane/backplane/validator/draft2020"
)

// Validators a server may choose.
const (
	ValidatorSubset    = "subset"
	ValidatorDraft2020 = "draft2020-12"
)

// Defaults.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	// stableAfter is how long a connection must live for the reconnection
	// delay to start over from Options.MinBackoff.
	stableAfter = 10 * time.Second
	// protocolVersion is the MCP version proposed to servers. The SDK's
	// client probes with server/discover first and falls back to the
	// initialize handshake at 2025-11-25 when the server does not offer
	// 2026-07-28 (see Upstream.Protocol for what was agreed).
	protocolVersion = Protocol20260728
	// The revisions an upstream may speak.
	Protocol20260728 = "2026-07-28"
	Protocol20251125 = "2025-11-25"
)

// Server is one upstream server: exactly one of Command and URL.
type Server struct {
	// Name names the server: letters, digits, '_' and '-'. Its tools are
	// NAME.TOOL unless Prefix is set.
	Name string
	// Prefix, when not nil, is put before each tool's name instead of
	// "NAME." ("" for none: the tools keep the server's names).
	Prefix *string
	// MainArg names the argument of every tool of the server that the
	// policy's TOOL(PATTERN) entries match (recorded as each tool's
	// tool.Tool.MainArg); "" for none.
	MainArg string
	// Command is the program and its arguments, run without a shell.
	Command []string
	// Env names the variables passed to the program besides PATH and HOME.
	Env []string
	// Dir is where the program runs; "" means the gateway's folder.
	Dir string
	// Sandbox, when not nil, confines the program (package sandbox's
	// options, applied by internal/sandbox).
	Sandbox *sandbox.Policy
	// URL is a streamable HTTP endpoint.
	URL string
	// Headers are sent with every HTTP request (secrets: never logged).
	Headers map[string]string
	// OAuth, when set, authenticates every HTTP request with a token
	// from the client credentials grant (oauth.go); the Authorization
	// header is then its to set, not Headers'.
	OAuth *OAuth
	// Validator is ValidatorSubset ("" means it) or ValidatorDraft2020.
	Validator string
	// Bridge says which of the server's requests are relayed to the
	// calling client (nil: DefaultBridge).
	Bridge *Bridge
	// AcceptAddedTools accepts at first sight, as at the first start, a
	// tool the server adds while connected (after a list change or a
	// reconnect). By default such a tool is held, as a changed one is,
	// until an operator accepts it: the catalog reviewed when the server
	// was configured did not have it, and its own readOnlyHint would
	// spare its calls the approval.
	AcceptAddedTools bool
}

var (
	serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	toolPrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]{0,64}$`)
)

// ToolPrefix is what the server's tool names are prefixed with.
func (s *Server) ToolPrefix() string {
	if s.Prefix != nil {
		return *s.Prefix
	}
	return s.Name + "."
}

// Check reports what is wrong with s, if anything. Header values are never
// quoted.
func (s *Server) Check() error {
	if !serverName.MatchString(s.Name) {
		return fmt.Errorf("server name %q: use 1 to 64 letters, digits, '_' or '-'", s.Name)
	}
	if !toolPrefix.MatchString(s.ToolPrefix()) {
		return fmt.Errorf("server %s: prefix %q: use at most 64 letters, digits, '_', '-' or '.'", s.Name, s.ToolPrefix())
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("server %s: give a command or a url, not both", s.Name)
	case len(s.Command) > 0:
		if s.Command[0] == "" {
			return fmt.Errorf("server %s: the command must name a program", s.Name)
		}
		if s.OAuth != nil {
			return fmt.Errorf("server %s: oauth applies to a url, not to a command", s.Name)
		}
		if len(s.Headers) > 0 {
			return fmt.Errorf("server %s: headers apply to a url, not to a command", s.Name)
		}
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("server %s: the url must be an http:// or https:// URL with a host", s.Name)
		}
		if len(s.Env) > 0 {
			return fmt.Errorf("server %s: env applies to a command, not to a url", s.Name)
		}
		if s.OAuth != nil {
			if err := checkCallerOAuth(s); err != nil { // percaller.go: the mode, and the service mode's grant
				return err
			}
			for k := range s.Headers {
				if http.CanonicalHeaderKey(k) == "Authorization" {
					return fmt.Errorf("server %s: oauth sets the Authorization header: leave it out of headers", s.Name)
				}
			}
		}
		for k, v := range s.Headers {
			if !httpToken.MatchString(k) {
				return fmt.Errorf("server %s: %q is not an HTTP header name", s.Name, k)
			}
			if !headerValue.MatchString(v) {
				return fmt.Errorf("server %s: the value of header %s holds a control character", s.Name, k)
			}
		}
	default:
		return fmt.Errorf("server %s needs a command or a url", s.Name)
	}
	switch s.Validator {
	case "", ValidatorSubset, ValidatorDraft2020:
	default:
		return fmt.Errorf("server %s: validator %q: %s or %s", s.Name, s.Validator, ValidatorSubset, ValidatorDraft2020)
	}
	return nil
}

var (
	httpToken   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	headerValue = regexp.MustCompile(`^[^\x00-\x08\x0a-\x1f\x7f]*$`)
)

// Options configure Connect. Registry is required; every zero field means
// the default.
type Options struct {
	// Registry receives the tools: the gateway (*gateway.Gateway is a
	// tool.Registry). When it is a tool.Recorder too (the gateway is), the
	// requests the server makes of a call's client (sampling, elicitation,
	// roots), relayed or refused, are recorded through it, one audit event
	// each; else they are not recorded.
	Registry tool.Registry
	// Logger receives the upstream's operational events (starts, outages,
	// catalog changes, schemas the validator refuses). Default: discard.
	Logger *slog.Logger
	// ConnectTimeout bounds the first start: the program or the HTTP
	// connection, initialize and the whole tools/list. Default 30s.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between reconnection
	// attempts. Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Draft2020 bounds the draft2020-12 validator (nil: its defaults).
	Draft2020 *draft2020.Options
	// HTTPTransport carries the HTTP requests of a URL server. Default: a
	// clone of http.DefaultTransport.
	HTTPTransport http.RoundTripper
	// StartProgress, when set, is called every ProgressEvery (default
	// DefaultProgressEvery) while Connect waits for the first start, with
	// the time waited so far: a first "npx -y" download can take tens of
	// seconds, and silence looks like a hang.
	StartProgress func(waited time.Duration)
	ProgressEvery time.Duration
	// Tokens keeps the callers' tokens of a per_caller or exchange server
	// (percaller.go). Default: a MemoryTokens of the Upstream's own.
	Tokens TokenStore
	// Logins are the authorization code flows of per_caller servers and
	// their callback (login.go); nil: a caller's login cannot complete.
	Logins *Logins
}

// Upstream is a connected server whose tools are registered in the
// gateway. It keeps the connection up until Close.
type Upstream struct {
	srv Server
	reg tool.Registry
	log *slog.Logger
	// audit is where the requests the server makes of a call's client
	// are recorded: the registry, when it is a tool.Recorder (the
	// gateway), else nowhere.
	audit  tool.Recorder
	client *sdk.Client
	minB   time.Duration
	maxB   time.Duration
	connTO time.Duration
	httpRT http.RoundTripper
	oauth  *oauthTransport // nil without Server.OAuth; its token outlives a connection
	// perCaller is set for the modes per_caller and exchange (and oauth
	// is then nil): percaller.go.
	perCaller *callerAuth
	logins    *Logins
	d2020     *draft2020.Options
	bridge    Bridge
	calls     calls // in flight, for what the server sends during them

	relist chan struct{} // a list_changed notification arrived (coalesced)
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu       sync.Mutex
	link     *link              // the live connection; nil while down
	downErr  error              // why the server is down
	tools    map[string]*upTool // by the server's tool name
	closed   bool
	restarts int             // successful reconnections, for tests and status
	subs     map[string]bool // resource URIs subscribed (subscribe.go)
	// descriptors are the last listings' items as the server sent them,
	// by method and key (content.go's listRaw).
	// dropped are the tools of the last listing that are not offered, by
	// their registered names, with why (headers.go).
	dropped map[string]string
	// sdkLog keeps why the SDK's client left tools out (headers.go).
	sdkLog      *headerLog
	descriptors map[string]map[string]json.RawMessage
	onUpdated   func(uri string) // where their updates go

	// Lines of the server's stdout that were dropped (not messages, no
	// usable id): logged at most once a second, with the count since.
	droppedLines atomic.Int64
	dropLog      rate.Sometimes
}

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("mcp: the upstream is closed")

// clientImpl is how the gateway names itself to upstream servers.
var clientImpl = &sdk.Implementation{Name: "backplane", Version: "1"}

// Connect starts (or connects to) srv, lists its tools and registers them in
// opts.Registry, then keeps the connection up until Close. It fails, leaving
// nothing registered and nothing running, when the server cannot be
// reached, initialized or listed within opts.ConnectTimeout, or when one of
// its tools collides with a registered tool.
func Connect(ctx context.Context, srv Server, opts *Options) (*Upstream, error) {
	if err := srv.Check(); err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Registry == nil {
		return nil, errors.New("mcp: Options.Registry is required")
	}
	if srv.Validator == "" {
		srv.Validator = ValidatorSubset
	}
	u := &Upstream{
		srv: srv, reg: o.Registry, log: o.Logger,
		minB: o.MinBackoff, maxB: o.MaxBackoff, connTO: o.ConnectTimeout, httpRT: o.HTTPTransport, d2020: o.Draft2020,
		relist: make(chan struct{}, 1), done: make(chan struct{}),
		tools: map[string]*upTool{},
	}
	u.bridge = DefaultBridge()
	if srv.Bridge != nil {
		u.bridge = *srv.Bridge
	}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	u.log = u.log.With("server", srv.Name)
	u.audit, _ = o.Registry.(tool.Recorder)
	if u.minB <= 0 {
		u.minB = DefaultMinBackoff
	}
	if u.maxB <= 0 {
		u.maxB = DefaultMaxBackoff
	}
	if u.maxB < u.minB {
		u.maxB = u.minB
	}
	if u.connTO <= 0 {
		u.connTO = DefaultConnectTimeout
	}
	if u.httpRT == nil && srv.URL != "" {
		u.httpRT = http.DefaultTransport.(*http.Transport).Clone()
	}
	switch {
	case srv.OAuth != nil && srv.OAuth.perCaller():
		tokens := srv.OAuth.Tokens // the sealed store where secrets: is set
		if tokens == nil {
			tokens = o.Tokens
		}
		if tokens == nil {
			tokens = &MemoryTokens{}
		}
		u.perCaller, u.logins = newCallerAuth(u.httpRT, srv, tokens, o.Logins, u.log), o.Logins
	case srv.OAuth != nil:
		u.oauth = newOAuthTransport(u.httpRT, srv.Name, srv.URL, *srv.OAuth)
		u.oauth.log = u.log
	}
	u.sdkLog = &headerLog{}
	u.client = sdk.NewClient(clientImpl, u.clientOptions())
	u.client.AddReceivingMiddleware(u.bridgeMiddleware)

	cctx, cancel := context.WithTimeout(ctx, u.connTO)
	defer cancel()
	defer startProgress(o.StartProgress, o.ProgressEvery)()
	l, err := u.dial(cctx)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", srv.Name, u.startTimedOut(ctx, cctx, err))
	}
	err = u.checkPerCallerProtocol(l) // percaller.go
	var tools []rawTool
	if err == nil {
		tools, err = u.listTools(cctx, l)
	}
	if err == nil {
		err = u.sync(cctx, tools, true)
	}
	if err != nil {
		u.unregisterAll()
		l.close()
		return nil, fmt.Errorf("server %s: %w", srv.Name, u.startTimedOut(ctx, cctx, err))
	}
	u.link = l
	if u.perCaller != nil && u.perCaller.cfg.Mode == OAuthModePerCaller {
		u.logins.serve(u.perCaller) // its logins complete at this process's callback, whoever began them
	}
	u.log.Info("upstream connected", "transport", u.transport(), "protocol", l.protocol, "tools", len(tools))
	u.logVisibility()
	u.wg.Add(1)
	go u.supervise(l)
	return u, nil
}

// Name is the server's name.
func (u *Upstream) Name() string { return u.srv.Name }

// Connected reports whether the server is up.
func (u *Upstream) Connected() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.link != nil
}

// Tools lists the names (PREFIX TOOL) of the tools registered for the server.
func (u *Upstream) Tools() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.tools))
	for _, t := range u.tools {
		out = append(out, t.full)
	}
	return out
}

// Close stops the connection (the program's whole process group is
// killed) and unregisters the server's tools.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	l := u.link
	u.link = nil
	u.downErr = ErrClosed
	u.mu.Unlock()
	close(u.done)
	if l != nil {
		l.close()
	}
	u.wg.Wait()
	u.unregisterAll()
	if u.perCaller != nil {
		u.logins.forget(u.perCaller)
	}
	if t, ok := u.httpRT.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

func (u *Upstream) transport() string {
	if u.srv.URL != "" {
		return "http"
	}
	return "stdio"
}

// current returns the live connection, or why there is none.
func (u *Upstream) current() (*link, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.link != nil {
		return u.link, nil
	}
	if u.downErr != nil {
		return nil, u.downErr
	}
	return nil, errors.New("not connected")
}

// supervise keeps the server up: it re-lists on list_changed, and when the
// connection ends it reconnects with backoff, then re-lists.
func (u *Upstream) supervise(l *link) {
	defer u.wg.Done()
	delay := u.minB
	for {
		ended := make(chan error, 1)
		go func(l *link) { ended <- l.sess.Wait() }(l)
	live:
		for {
			select {
			case <-u.done:
				return
			case <-u.relist:
				u.relistOn(l)
			case err := <-ended:
				why := l.exitReason(err)
				u.mu.Lock()
				if u.closed {
					u.mu.Unlock()
					return
				}
				u.link = nil
				u.downErr = fmt.Errorf("the server stopped (%s); reconnecting", why)
				u.mu.Unlock()
				l.close() // reap the program and whatever it left in its group
				if time.Since(l.started) >= stableAfter {
					delay = u.minB
				}
				u.log.Warn("upstream down", "transport", u.transport(), "reason", why, "retry_in", delay.String())
				break live
			}
		}
		// Reconnect with backoff.
		for {
			select {
			case <-u.done:
				return
			case <-time.After(delay):
			}
			next, err := u.reconnect()
			delay = min(delay*2, u.maxB)
			if err == nil {
				l = next
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			u.mu.Lock()
			u.downErr = fmt.Errorf("the server is down; the last attempt to reconnect failed: %v", err)
			u.mu.Unlock()
			u.log.Warn("upstream reconnect failed", "error", err.Error(), "retry_in", delay.String())
		}
	}
}

// reconnect connects again and brings the catalog up to date; the link is
// published only once the tools are registered.
func (u *Upstream) reconnect() (*link, error) {
	ctx, cancel := u.opContext()
	defer cancel()
	l, err := u.dial(ctx)
	if err != nil {
		return nil, err
	}
	tools, err := u.listTools(ctx, l)
	if err != nil {
		l.close()
		return nil, err
	}
	u.sync(ctx, tools, false) // refuses, when closed meanwhile
	u.mu.Lock()
	if u.closed {
		// Close ran meanwhile and saw no link: this one is ours to stop.
		u.mu.Unlock()
		l.close()
		return nil, ErrClosed
	}
	u.link = l
	u.downErr = nil
	u.restarts++
	u.mu.Unlock()
	u.resubscribe(ctx, l)
	u.log.Info("upstream reconnected", "transport", u.transport(), "protocol", l.protocol, "tools", len(tools))
	return l, nil
}

// relistOn lists the tools again after a list_changed notification.
func (u *Upstream) relistOn(l *link) {
	ctx, cancel := u.opContext()
	defer cancel()
	tools, err := u.listTools(ctx, l)
	if err != nil {
		u.log.Warn("upstream re-list failed", "error", err.Error())
		return
	}
	u.sync(ctx, tools, false)
}

// opContext bounds one background operation by the connect timeout and by
// Close.
func (u *Upstream) opContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), u.connTO)
	go func() {
		select {
		case <-u.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
