package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ServeConfig configures `backplane serve`, the gateway served to MCP
// clients:
//
//	serve:
//	  http: 127.0.0.1:8787           # streamable HTTP at /mcp, /metrics, /healthz
//	  allow_remote: false            # true to listen on a non-loopback address
//	  tokens: {"local-dev-token": alice}   # bearer token -> caller
//	  stdio_caller: alice            # the caller for `backplane serve --stdio`
//	  approval_wait: 0s              # how long a served call waits for an approval (default: approvals.wait; at most 50s)
//	  session_idle_timeout: 30m      # an HTTP session idle this long is closed
//	  max_sessions_per_caller: 16    # open HTTP sessions per caller; more: the LRU idle one closes (429 if none)
//	  allowed_origins: ["https://app.example"]  # browser origins besides the listener's loopback ones
//	  public_url: https://backplane.example     # where clients and browsers reach serve (a TLS proxy in front)
//	  resume: {max_bytes: 8388608, grace: 10s}  # resumable HTTP streams (the defaults)
//	  rate_limit: {per_second: 100, burst: 200} # requests per caller (the defaults; per_second 0: none)
//	  max_subscriptions_per_session: 256        # resources/subscribe held per session (the default)
//	  max_subscriptions_per_caller: 1024        # ... per caller, all its sessions together (the default)
//	  tls: {cert_file: server.crt, key_file: server.key}  # serve https itself (see TLSConfig)
//	  caller_tokens: [{caller: agent, token_file: agent.token}]  # or token_env: NAME; join tokens
//	  request_state_key_env: BACKPLANE_STATE_KEY  # signs 2026-07-28 request states: the same on every replica
//
// rate_limit is a token bucket per caller (over HTTP and stdio alike)
// that every MCP request and notification draws on: burst at once, then
// per_second. A request past it is refused before any work: over HTTP
// with 429 and Retry-After, over stdio with JSON-RPC error -32029.
// Refusals are counted in /metrics and sampled in the audit log.
// resume bounds what the server keeps so that a client whose HTTP stream
// dropped can reconnect with Last-Event-ID and get what it missed:
// max_bytes of events in memory (0: streams are not resumable), and how
// long a call whose request dropped waits for its client to come back
// before it is cancelled (grace; 0s: at once).
// public_url is the origin (scheme://host[:port], no path) a proxy in front
// serves the listener at: https marks the console's login cookie Secure
// (the proxy terminates TLS, so serve only sees plain HTTP), its host is a
// host the console answers and its origin one it accepts forms from, and
// serve prints its URLs under it.
// The HTTP address must be on the loopback interface unless allow_remote is
// true: the tokens travel in clear over plain HTTP (serve.tls, or a proxy
// that terminates TLS, encrypts them). With no tokens every
// HTTP request is refused (401). `serve --stdio` needs a stdio_caller.
type ServeConfig struct {
	// HTTP is the host:port the streamable HTTP server listens on. Default
	// 127.0.0.1:8787.
	HTTP string
	// AllowRemote allows an HTTP address that is not loopback.
	AllowRemote bool
	// Tokens maps bearer tokens to caller names.
	Tokens map[string]string
	// StdioCaller is the caller of every call made over stdio; "" refuses
	// `serve --stdio`.
	StdioCaller string
	// ApprovalWait is how long a served call waits for an approval decision
	// before it returns approval_required. Left out of the file, it is
	// approvals.wait (the wait of every call; default 0s: at once, with the
	// request id and how to decide it): serve.approval_wait only overrides
	// it for served calls. At most 50s (MaxServeApprovalWait): MCP SDK
	// clients give up on a request after 60s, and a call must return to its
	// client before that.
	ApprovalWait time.Duration
	// SessionIdleTimeout closes an HTTP session idle this long. Default
	// 30m ([server.DefaultSessionIdleTimeout]).
	SessionIdleTimeout time.Duration
	// MaxSessionsPerCaller bounds the open HTTP sessions of one caller.
	// Default 16.
	MaxSessionsPerCaller int
	// AllowedOrigins are browser origins /mcp serves besides the loopback
	// origins of its listener; another Origin is refused (403).
	AllowedOrigins []string
	// PublicURL is the origin clients reach serve at through a proxy
	// ("https://backplane.example", no trailing slash), "" when none.
	PublicURL string
	// TLS, when set, makes serve listen with TLS (see [TLSConfig]).
	TLS *TLSConfig
	// OAuth, when set, accepts JWT access tokens besides Tokens, and
	// serves the protected resource metadata (see [OAuthConfig]).
	OAuth *OAuthConfig
	// AnonymousCaller is the caller of an HTTP request that carries no
	// Authorization header; "" (the default) refuses such requests. Only
	// for a loopback listener: refused at load otherwise.
	AnonymousCaller string
	// ResumeBytes bounds the events kept for resuming HTTP streams: 0
	// means the default (8 MiB), negative no resumption (resume.max_bytes
	// 0 in the file).
	ResumeBytes int
	// ResumeGrace is how long a call whose HTTP request dropped waits for
	// its client to resume: 0 means the default (10s), negative at once
	// (resume.grace 0s in the file).
	ResumeGrace time.Duration
	// RatePerSecond and RateBurst are the per-caller token bucket of
	// every request (rate_limit). Left out: 100 a second, burst 200 (or
	// per_second when larger); RatePerSecond -1: no limit (per_second 0
	// in the file).
	RatePerSecond int
	RateBurst     int
	// MaxSubscriptionsPerSession and MaxSubscriptionsPerCaller bound the
	// resource subscriptions held: 0 means the defaults (256, 1024).
	MaxSubscriptionsPerSession int
	MaxSubscriptionsPerCaller  int
	// RequestStateKeyEnv names the environment variable holding the key
	// (at least 32 bytes) that signs the requestState of 2026-07-28
	// input_required answers; replicas behind one balancer need the same
	// one. "": a random key per process.
	RequestStateKeyEnv string
	// Line is where the serve section starts (0 when absent).
	Line int

	approvalWaitSet bool
}

// Serve defaults and bounds.
const (
	// MaxResumeBytes bounds serve.resume.max_bytes (1 GiB).
	MaxResumeBytes = 1 << 30
	// MaxResumeGrace bounds serve.resume.grace.
	MaxResumeGrace = 10 * time.Minute
	// MaxRate bounds serve.rate_limit's per_second and burst.
	MaxRate = 1 << 20
	// MaxSubscriptions bounds the serve.max_subscriptions_* keys.
	MaxSubscriptions = 1 << 20

	DefaultServeHTTP = "127.0.0.1:8787"
	// DefaultServeRatePerSecond and DefaultServeRateBurst are
	// serve.rate_limit's defaults: far above what a client driven by a
	// model or a person asks (a burst of parallel calls, the lists at
	// start), far below a flood (issue 22's reached thousands a second).
	DefaultServeRatePerSecond = 100
	DefaultServeRateBurst     = 200
	DefaultServeApprovalWait  = 0
	// MaxServeApprovalWait is gateway.MaxApprovalWait: below the MCP SDK clients'
	// 60s request timeout.
	MaxServeApprovalWait = 50 * time.Second
)

// bearerToken is RFC 6750's b64token: what can travel in an Authorization
// header unquoted.
var bearerToken = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`)

// originRe is a web origin as browsers send it.
var originRe = regexp.MustCompile(`^https?://[A-Za-z0-9.:\[\]-]+/?$`)

func (p *parser) serve(c *Config, v *yaml.Node) error {
	c.Serve.Line = v.Line
	var httpNode, anonNode, callerTokensNode *yaml.Node
	var fromFiles map[string]string
	err := p.mapping(v, "serve", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "http":
			httpNode = v
			c.Serve.HTTP, err = p.str(v, "http")
			if err == nil && c.Serve.HTTP == "" {
				err = p.errAt(v, "serve http must be host:port, such as %s", DefaultServeHTTP)
			}
		case "allow_remote":
			c.Serve.AllowRemote, err = p.boolean(v, key)
		case "tokens":
			c.Serve.Tokens = map[string]string{}
			err = p.mapping(v, "tokens", func(token string, k, v *yaml.Node) error {
				if !bearerToken.MatchString(token) {
					return p.errAt(k, "serve tokens: a token must be letters, digits and -._~+/ (a bearer token), not %q", token)
				}
				caller, err := p.str(v, "the caller of a token")
				if err == nil && caller == "" {
					err = p.errAt(v, "serve tokens: a token needs a caller name")
				}
				c.Serve.Tokens[token] = caller
				return err
			})
		case "stdio_caller":
			c.Serve.StdioCaller, err = p.str(v, key)
		case "approval_wait":
			c.Serve.ApprovalWait, err = p.duration(v, key)
			c.Serve.approvalWaitSet = true
			if err == nil && (c.Serve.ApprovalWait < 0 || c.Serve.ApprovalWait > MaxServeApprovalWait) {
				err = p.errAt(v, "serve approval_wait %s: must be from 0s (return approval_required at once) to %s: MCP clients give up on a request after 60s, and a call that outlives its client must not wait on",
					c.Serve.ApprovalWait, MaxServeApprovalWait)
			}
		case "session_idle_timeout":
			c.Serve.SessionIdleTimeout, err = p.duration(v, key)
			if err == nil && c.Serve.SessionIdleTimeout < time.Second {
				err = p.errAt(v, "serve session_idle_timeout must be at least 1s")
			}
		case "max_sessions_per_caller":
			var n int64
			n, err = p.integer(v, key)
			if err == nil && (n < 1 || n > 1<<20) {
				err = p.errAt(v, "serve max_sessions_per_caller must be from 1 to 1048576")
			}
			c.Serve.MaxSessionsPerCaller = int(n)
		case "resume":
			err = p.mapping(v, "serve resume", func(key string, _, v *yaml.Node) error {
				switch key {
				case "max_bytes":
					n, err := p.integer(v, "serve resume max_bytes")
					if err == nil && (n < 0 || n > MaxResumeBytes) {
						err = p.errAt(v, "serve resume max_bytes must be from 0 (no resumable streams) to %d", MaxResumeBytes)
					}
					c.Serve.ResumeBytes = int(n)
					if n == 0 {
						c.Serve.ResumeBytes = -1
					}
					return err
				default: // grace
					d, err := p.duration(v, "serve resume grace")
					if err == nil && (d < 0 || d > MaxResumeGrace) {
						err = p.errAt(v, "serve resume grace must be from 0s (cancel at once) to %s", MaxResumeGrace)
					}
					c.Serve.ResumeGrace = d
					if d == 0 {
						c.Serve.ResumeGrace = -1
					}
					return err
				}
			}, "max_bytes", "grace")
		case "rate_limit":
			err = p.mapping(v, "serve rate_limit", func(key string, _, v *yaml.Node) error {
				n, err := p.integer(v, "serve rate_limit "+key)
				if key == "per_second" {
					if err == nil && (n < 0 || n > MaxRate) {
						err = p.errAt(v, "serve rate_limit per_second must be from 0 (no limit) to %d requests a second", MaxRate)
					}
					c.Serve.RatePerSecond = int(n)
					if n == 0 {
						c.Serve.RatePerSecond = -1
					}
					return err
				}
				if err == nil && (n < 1 || n > MaxRate) {
					err = p.errAt(v, "serve rate_limit burst must be from 1 to %d requests", MaxRate)
				}
				c.Serve.RateBurst = int(n)
				return err
			}, "per_second", "burst")
		case "max_subscriptions_per_session", "max_subscriptions_per_caller":
			var n int64
			n, err = p.integer(v, key)
			if err == nil && (n < 1 || n > MaxSubscriptions) {
				err = p.errAt(v, "serve %s must be from 1 to %d", key, MaxSubscriptions)
			}
			if key == "max_subscriptions_per_session" {
				c.Serve.MaxSubscriptionsPerSession = int(n)
			} else {
				c.Serve.MaxSubscriptionsPerCaller = int(n)
			}
		case "oauth":
			err = p.oauth(c, v)
		case "tls":
			err = p.tls(c, v)
		case "caller_tokens":
			callerTokensNode = v
			fromFiles, err = p.callerTokens(c, v)
		case "anonymous_caller":
			anonNode = v
			c.Serve.AnonymousCaller, err = p.str(v, key)
			if err == nil && c.Serve.AnonymousCaller == "" {
				err = p.errAt(v, "serve anonymous_caller must name a caller (leave it out to refuse requests without a token)")
			}
		case "public_url":
			c.Serve.PublicURL, err = p.str(v, key)
			if err == nil {
				c.Serve.PublicURL, err = CheckPublicURL(c.Serve.PublicURL)
				if err != nil {
					err = p.errAt(v, "serve public_url: %v", err)
				}
			}
		case "request_state_key_env":
			c.Serve.RequestStateKeyEnv, err = p.str(v, key)
		case "allowed_origins":
			c.Serve.AllowedOrigins, err = p.strList(v, key)
			for _, o := range c.Serve.AllowedOrigins {
				if err == nil && !originRe.MatchString(o) {
					err = p.errAt(v, "serve allowed_origins: %q is not an origin (scheme://host[:port], no path)", o)
				}
			}
		}
		return err
	}, "http", "allow_remote", "tokens", "stdio_caller", "approval_wait", "session_idle_timeout", "max_sessions_per_caller", "allowed_origins", "public_url", "oauth", "anonymous_caller", "resume",
		"rate_limit", "max_subscriptions_per_session", "max_subscriptions_per_caller", "tls", "caller_tokens", "request_state_key_env")
	if err != nil {
		return err
	}
	// After the loop: tokens: (in any order) sets the map afresh.
	for token, caller := range fromFiles {
		if _, dup := c.Serve.Tokens[token]; dup {
			return p.errAt(callerTokensNode, "serve caller_tokens: caller %s: its token is also in serve.tokens", caller)
		}
		if c.Serve.Tokens == nil {
			c.Serve.Tokens = map[string]string{}
		}
		c.Serve.Tokens[token] = caller
	}
	if httpNode != nil {
		if err := CheckServeAddr(c.Serve.HTTP, c.Serve.AllowRemote); err != nil {
			return p.errAt(httpNode, "serve http: %v", err)
		}
	}
	if anonNode != nil {
		addr := c.Serve.HTTP
		if addr == "" {
			addr = DefaultServeHTTP
		}
		if err := CheckAnonymousAddr(addr); err != nil {
			return p.errAt(anonNode, "serve anonymous_caller: %v", err)
		}
	}
	return nil
}

// finishServe fills in the defaults of what the file left out.
func (p *parser) finishServe(c *Config) {
	if c.Serve.HTTP == "" {
		c.Serve.HTTP = DefaultServeHTTP
	}
	if !c.Serve.approvalWaitSet {
		// One key, one meaning: approvals.wait is the wait of every call,
		// served ones included, unless serve.approval_wait says otherwise.
		c.Serve.ApprovalWait = c.Approvals.Wait
	}
	if c.Serve.RatePerSecond == 0 {
		c.Serve.RatePerSecond = DefaultServeRatePerSecond
	}
	if c.Serve.RateBurst == 0 {
		c.Serve.RateBurst = max(DefaultServeRateBurst, c.Serve.RatePerSecond)
	}
}

// CheckServeAddr checks an HTTP listen address: host:port with a numeric
// port, and a loopback host (an IP address or "localhost") unless
// allowRemote. An empty host means every interface: not loopback.
func CheckServeAddr(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: bearer tokens would travel in clear over plain HTTP to other hosts; listen on 127.0.0.1, or set serve.allow_remote: true with serve.tls (or a TLS proxy in front)", addr)
}

// CheckAnonymousAddr refuses an anonymous caller on a listener that is
// not loopback: anyone who could reach it would be that caller.
func CheckAnonymousAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if !isLoopbackHost(host) {
		return fmt.Errorf("the listener %q is not loopback: every host that reaches it would call as the anonymous caller; listen on 127.0.0.1 or remove anonymous_caller", addr)
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckPublicURL checks serve.public_url and returns it without a
// trailing slash: an http or https origin, with a host, and nothing else
// (no user, path, query or fragment: serve's paths /mcp and /ui are fixed,
// so a proxy must serve them at the root).
func CheckPublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q: the scheme must be https (or http), not %q", s, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%q names no host", s)
	case u.User != nil:
		return "", fmt.Errorf("%q holds a user name or password", s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "#"):
		return "", fmt.Errorf("%q: give the origin only (scheme://host[:port]); serve's paths (/mcp, /ui) are fixed", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
