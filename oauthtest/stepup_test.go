package oauthtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/ory/fosite"
)

func (r *perCallerRig) callTool(t *testing.T, caller, name string, client tool.Client) (*gateway.CallResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.g.Call(ctx, gateway.CallRequest{Caller: caller, Tool: name, Arguments: json.RawMessage(`{}`), Client: client})
}

// adminRuns are the admin_note calls the upstream ran.
func (p *accountPeer) adminRuns() []seenCall {
	var out []seenCall
	for _, s := range p.runs() {
		if s.tool == "admin_note" {
			out = append(out, s)
		}
	}
	return out
}

// TestFositePerCallerStepUp: alice's token holds the scope tools; the
// upstream's admin_note demands admin too (403 insufficient_scope). Her
// call is refused, not run, with a new authorization URL asking for both
// scopes, the scope demanded in its details; she signs in again at fosite,
// and the retry runs with a token granted both, while whoami goes on as
// before; no token is in the log or the audit.
func TestFositePerCallerStepUp(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	signIn(t, "acct-alice", r.as.issuer(), r.loginURL(t, "alice"))
	r.mustRun(t, "alice", "acct-alice")
	first, err := r.tokens.Token(context.Background(), upstream.TokenKey{Server: "remote", Caller: "alice"})
	if err != nil || !slices.Equal(first.Scopes, []string{"tools"}) {
		t.Fatalf("alice's first token: scopes %v, %v; want [tools]", first.Scopes, err)
	}

	_, err = r.callTool(t, "alice", "remote.admin_note", nil)
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("admin_note with a tools-only token: %v, want a gateway error", err)
	}
	u, _ := ge.Details["authorization_url"].(string)
	if ge.Details["status"] != "failed" || u == "" || ge.Details["insufficient_scope"] != "tools admin" || ge.Details["scopes"] != "tools admin" {
		t.Fatalf("the step-up refusal: details %v, want failed (not run) with the URL, the scope demanded and the scopes asked", ge.Details)
	}
	if !strings.Contains(ge.Message, "insufficient_scope") || strings.Contains(ge.Message, u) {
		t.Errorf("the message %q should name insufficient_scope and not repeat the URL", ge.Message)
	}
	q, _ := url.Parse(u)
	if got := strings.Fields(q.Query().Get("scope")); !slices.Equal(got, []string{"tools", "admin"}) {
		t.Errorf("the step-up asks for scope %v, want [tools admin] (held and demanded)", got)
	}
	if n := len(r.peer.adminRuns()); n != 0 {
		t.Fatalf("admin_note ran %d times before the step-up", n)
	}
	// The same URL on a retry before the sign-in.
	if _, err := r.callTool(t, "alice", "remote.admin_note", nil); !errors.As(err, &ge) || ge.Details["authorization_url"] != u {
		t.Errorf("the retry before the sign-in got another answer: %v", err)
	}
	signIn(t, "acct-alice", r.as.issuer(), u)
	res, err := r.callTool(t, "alice", "remote.admin_note", nil)
	if err != nil || !strings.Contains(string(res.Result), "noted by acct-alice with tools admin") {
		t.Fatalf("admin_note after the step-up: %v %v", res, err)
	}
	runs := r.peer.adminRuns()
	if len(runs) != 1 || runs[0].token == first.Token.AccessToken {
		t.Fatalf("admin_note ran %d times, want once, with the new token", len(runs))
	}
	st, _ := r.tokens.Token(context.Background(), upstream.TokenKey{Server: "remote", Caller: "alice"})
	if !slices.Contains(st.Scopes, "admin") || !slices.Contains(st.Scopes, "tools") {
		t.Errorf("the stepped-up token's scopes %v", st.Scopes)
	}
	r.mustRun(t, "alice", "acct-alice")
	out := r.logs.String()
	if !strings.Contains(out, `"purpose":"upstream_step_up"`) && !strings.Contains(out, "upstream step-up") {
		t.Errorf("the step-up is not in the log")
	}
	issued, _, _ := r.as.snapshot()
	for _, tok := range append(issued, clientSecret, q.Query().Get("state")) {
		if strings.Contains(out, tok) {
			t.Errorf("a token, the client secret or the state is in the log or the audit")
		}
	}
}

// TestFositePerCallerStepUpElicitation: a client that takes a URL-mode
// elicitation during the call is asked to grant the scope, signs in, and
// the very call then runs, once.
func TestFositePerCallerStepUpElicitation(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	signIn(t, "acct-bob", r.as.issuer(), r.loginURL(t, "bob"))
	c := &elicitingClient{t: t, account: "acct-bob", issuer: r.as.issuer()}
	res, err := r.callTool(t, "bob", "remote.admin_note", c)
	if err != nil || !strings.Contains(string(res.Result), "noted by acct-bob with tools admin") {
		t.Fatalf("admin_note: %v %v", res, err)
	}
	if len(c.asked) != 1 || !strings.Contains(string(c.asked[0]), "scope admin") && !strings.Contains(string(c.asked[0]), "scope tools admin") {
		t.Fatalf("bob was asked %d times (%s), want once, naming the scope", len(c.asked), c.asked)
	}
	if n := len(r.peer.adminRuns()); n != 1 {
		t.Errorf("admin_note ran %d times, want 1", n)
	}
	seen := 0
	for _, s := range r.peer.calls() {
		if s.tool == "admin_note" && s.refused {
			seen++
		}
	}
	if seen != 1 {
		t.Errorf("the upstream refused %d admin_note requests, want the 1 before the step-up", seen)
	}
}

// TestFositePerCallerStepUpDeferred: a 2026-07-28 client that answers by
// calling again gets input_required with the step-up's URL; the retry
// after the sign-in runs.
func TestFositePerCallerStepUpDeferred(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	signIn(t, "acct-alice", r.as.issuer(), r.loginURL(t, "alice"))
	r.invokeDeferred(t, "remote.admin_note", "noted by acct-alice with tools admin", func(u string) {
		if !strings.Contains(u, "scope=tools+admin") {
			t.Fatalf("the step-up's URL asks for no admin: %s", u)
		}
	})
}

// TestFositeServiceStepUpNamesScope: the service mode (client
// credentials) does not widen the gateway's own credential when a server
// demands more: a call of the tool that demands admin fails, not run,
// naming the scope and the setting that grants it, and fosite is asked
// for no second token.
func TestFositeServiceStepUpNamesScope(t *testing.T) {
	l := listen(t)
	resource := "http://" + l.Addr().String() + "/mcp"
	a := startAS(t, time.Hour, resource)
	a.store.Clients[clientID].(*fosite.DefaultClient).Scopes = []string{"tools", "admin"} // fosite would grant it
	var ran atomic.Int32
	s := sdk.NewServer(&sdk.Implementation{Name: "scoped-upstream", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "admin_note", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ran.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "noted"}}}, nil
		})
	prm := "http://" + l.Addr().String() + "/meta/prm"
	mux := http.NewServeMux()
	mux.Handle("GET /meta/prm", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: resource, AuthorizationServers: []string{a.issuer()}, ScopesSupported: []string{"tools", "admin"},
	}))
	protected := auth.RequireBearerToken(a.verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm, Scopes: []string{"tools"}})(
		sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true}))
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 2026-07-28 (stateless): each request names its tool in Mcp-Name.
		if r.Header.Get("Mcp-Name") == "admin_note" {
			ti, err := a.verify(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r)
			if err == nil && !slices.Contains(ti.Scopes, "admin") {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope="tools admin", resource_metadata=%q`, prm))
				http.Error(w, "insufficient scope", http.StatusForbidden)
				return
			}
		}
		protected.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	logs := &syncBuffer{}
	g, log := newGateway(t, logs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: resource, OAuth: &upstream.OAuth{
		ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer up.Close()
	_, err = g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "remote.admin_note", Arguments: json.RawMessage(`{}`)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" || !strings.Contains(ge.Message, "scope tools admin (insufficient_scope)") ||
		!strings.Contains(ge.Message, "auth.oauth.scopes") {
		t.Fatalf("%v, want failed (not run) naming the scope and auth.oauth.scopes", err)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
	if issued, _, _ := a.snapshot(); len(issued) != 1 {
		t.Errorf("fosite issued %d tokens, want the 1 of the configured scopes (no step-up by itself)", len(issued))
	}
}

// sharedCallback serves, at /cb on a listener of its own, logins whose
// flows are in store: one replica's callback of several.
func sharedCallback(t *testing.T, store upstream.LoginStore) (*upstream.Logins, string) {
	t.Helper()
	l := listen(t)
	redirect := "http://" + l.Addr().String() + "/cb"
	logins := upstream.NewLogins(&upstream.LoginsOptions{RedirectURL: redirect, Store: store})
	srv := &http.Server{Handler: logins}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return logins, redirect
}

// crossClient is a 2025-11-25 client that takes a URL-mode elicitation:
// it signs in, and its browser's redirect reaches the callback at
// another replica (callback), as a load balancer may send it.
type crossClient struct {
	elicitingClient
	callback string
}

func (c *crossClient) Request(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.asked = append(c.asked, params)
	var p struct{ Mode, URL string }
	if method != tool.RequestElicitation || json.Unmarshal(params, &p) != nil || p.Mode != "url" {
		return nil, fmt.Errorf("%w: unexpected %s", tool.ErrNoChannel, method)
	}
	b := browser(c.t, c.account, c.issuer)
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := b.Get(p.URL)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		return nil, err
	}
	to, _ := url.Parse(c.callback)
	loc.Host = to.Host
	// Accepted at once; the sign-in completes at the other replica a
	// moment later, while the call waits.
	go func() {
		if resp, err := http.Get(loc.String()); err == nil {
			resp.Body.Close()
		}
	}()
	return json.RawMessage(`{"action":"accept"}`), nil
}

// TestFositePerCallerLoginWaitAcrossReplicas: two gateways (replicas)
// share the logins in progress and the tokens; a call at A whose client
// accepts the URL-mode elicitation waits while the sign-in completes at
// B's callback, sees the token B saved, and runs, once.
func TestFositePerCallerLoginWaitAcrossReplicas(t *testing.T) {
	shared, tokens := &upstream.MemoryLogins{}, &upstream.MemoryTokens{}
	loginsA, redirectA := sharedCallback(t, shared)
	loginsB, redirectB := sharedCallback(t, shared)
	l := listen(t)
	a := startCallerAS(t, time.Hour, "http://"+l.Addr().String()+"/mcp", redirectA)
	a.store.Clients[clientID].(*fosite.DefaultClient).RedirectURIs = []string{redirectA, redirectB}
	p := startAccountPeer(t, l, a.issuer(), a.verifyAccount)
	connectAt := func(logins *upstream.Logins) *gateway.Gateway {
		g, log := newGatewayFor(t, &syncBuffer{}, "alice")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
			Mode: upstream.OAuthModePerCaller, ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"tools"},
		}}, &upstream.Options{Registry: g, Logger: log, Tokens: tokens, Logins: logins})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		t.Cleanup(func() { up.Close() })
		return g
	}
	gA := connectAt(loginsA)
	connectAt(loginsB)
	c := &crossClient{elicitingClient: elicitingClient{t: t, account: "acct-alice", issuer: a.issuer()}, callback: redirectB}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := gA.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "remote.whoami", Arguments: json.RawMessage(`{}`), Client: c})
	if err != nil || !strings.Contains(string(res.Result), "you are acct-alice") {
		t.Fatalf("the call at A: %v %v", res, err)
	}
	if len(c.asked) != 1 || len(p.runs()) != 1 {
		t.Errorf("asked %d times, ran %d times: want 1 and 1", len(c.asked), len(p.runs()))
	}
}
