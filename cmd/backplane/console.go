package main

import (
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/console"
	"github.com/agentbackplane/backplane/server"
)

// newConsole is the operators' web console of a served configuration,
// served at /ui over HTTP (none over stdio): operators (operators:) get
// in, callers (serve.tokens) are refused with 403.
// sessions lists the server's MCP sessions for the sessions page.
func newConsole(cfg *config.Config, rt *assemble.Runtime, log *slog.Logger, stdio bool, httpAddr string, sessions func() []console.Session) http.Handler {
	if stdio {
		return nil
	}
	addr := cfg.Serve.HTTP
	if httpAddr != "" {
		addr = httpAddr
	}
	operators := cfg.OperatorTokens()
	if len(operators) == 0 {
		log.Warn("no operators are configured (operators:): the web console at /ui lets no one in")
	}
	b := console.GatewayBackend(rt.Gateway, &console.GatewayOptions{
		Budgets: cfg.Budgets,
		Source:  toolSource(cfg),
		Facts: []console.Fact{
			{Name: "Version", Value: readVersion().Version},
			{Name: "Configuration", Value: cfg.Path},
		},
		Refused: func() []console.RefusedServer { return consoleRefused(rt) },
	})
	var hosts []string
	if cfg.Serve.AllowRemote && !loopbackAddr(addr) {
		// Served beyond loopback on purpose: the names it is reached by
		// are not known here.
		hosts = []string{"*"}
	}
	// Browsers behind a proxy name its origin and host (public_url).
	origins := publicOrigins(cfg)
	return console.New(b, console.NewTokenAuth(operators, cfg.Serve.Tokens), &console.Options{
		Logger:         log,
		AllowedHosts:   hosts,
		TrustedOrigins: origins,
		// Behind a TLS proxy serve sees plain HTTP: the cookie must be
		// Secure all the same, or a browser would send it over http.
		// serve.tls: every request comes over TLS; said here too so that
		// nothing depends on each request's r.TLS alone.
		SecureCookies: strings.HasPrefix(cfg.Serve.PublicURL, "https://") || cfg.Serve.TLS != nil,
		Sessions:      sessions,
	})
}

// consoleSessions is the console's view of srv's MCP sessions, once srv
// exists (the console is made first: the server serves it).
func consoleSessions(srv *atomic.Pointer[server.Server]) func() []console.Session {
	return func() []console.Session {
		s := srv.Load()
		if s == nil {
			return nil
		}
		var out []console.Session
		for _, si := range s.Sessions() {
			out = append(out, console.Session{Caller: si.Caller, ID: server.SessionIDPrefix(si.ID),
				Opened: si.Opened, LastActive: si.LastActive, InFlight: si.InFlight})
		}
		return out
	}
}

// loopbackAddr reports whether host:port names a loopback address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// toolSource names where a configured tool comes from.
func toolSource(cfg *config.Config) func(string) string {
	command := map[string]bool{}
	for _, t := range cfg.Tools {
		command[t.Name] = true
	}
	return func(tool string) string {
		if command[tool] {
			return "command"
		}
		if slices.Contains(cfg.Builtin.Enable, tool) {
			return "builtin"
		}
		// The longest prefix wins: "a." over "" (a server without one).
		source, best := "", -1
		for _, s := range cfg.Servers {
			if p := s.ToolPrefix(); len(p) > best && strings.HasPrefix(tool, p) {
				source, best = "upstream "+s.Name, len(p)
			}
		}
		if source != "" {
			return source
		}
		return "builtin"
	}
}

// consoleRefused is serve's refused-tools report (refusedServers) as the
// console shows it on its tools and upstreams pages.
func consoleRefused(rt *assemble.Runtime) []console.RefusedServer {
	var out []console.RefusedServer
	for _, r := range refusedServers(rt) {
		cr := console.RefusedServer{Server: r.Server, Line: r.Line, Validator: r.Validator, Tools: r.Tools,
			Fix: r.Fix, FixAccepts: r.FixAccepts}
		for _, t := range r.Refused {
			cr.Refused = append(cr.Refused, console.RefusedTool{Name: t.Name, Keywords: t.Keywords, OtherAccepts: t.OtherAccepts})
		}
		out = append(out, cr)
	}
	return out
}
