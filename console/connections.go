package console

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentbackplane/backplane/gateway"
)

// ConnectionsBackend is implemented by Backends that show the upstream
// OAuth credentials the gateway keeps (the Connections page): who is
// connected to which server, how, with which scopes, until when, never a
// token; and that revoke one as an operator's action.
type ConnectionsBackend interface {
	Connections(ctx context.Context) ([]gateway.Connection, error)
	RevokeConnection(ctx context.Context, server, caller, operator string) (*gateway.Revoked, error)
}

// ConnectBackend is implemented by Backends that can connect the gateway
// itself to a server that needs an operator's consent (mode service,
// grant authorization_code): ConsentServers names those servers;
// StartConnection begins the authorization code flow for the operator
// and returns the authorization server's URL to send their browser to.
// The flow completes at the gateway's callback, not in the console,
// which then redirects the browser back to the Connections page.
type ConnectBackend interface {
	ConsentServers(ctx context.Context) []string
	StartConnection(ctx context.Context, server, operator string) (authURL string, err error)
}

func (b *gatewayBackend) ConsentServers(context.Context) []string { return b.g.ConsentServers() }

func (b *gatewayBackend) StartConnection(ctx context.Context, server, operator string) (string, error) {
	u, err := b.g.StartConnection(ctx, server, operator)
	return u, backendErr(err)
}

func (b *gatewayBackend) Connections(ctx context.Context) ([]gateway.Connection, error) {
	cs, err := b.g.ListConnections(ctx, "")
	return cs, backendErr(err)
}

func (b *gatewayBackend) RevokeConnection(ctx context.Context, server, caller, operator string) (*gateway.Revoked, error) {
	r, err := b.g.RevokeConnection(ctx, server, caller, operator)
	return r, backendErr(err)
}

func (c *Console) connections(ctx context.Context) ([]gateway.Connection, bool, error) {
	cb, ok := c.b.(ConnectionsBackend)
	if !ok {
		return nil, false, nil
	}
	cs, err := cb.Connections(ctx)
	return cs, true, err
}

// consentRow is a server the gateway connects to with an operator's
// consent, and its connection when there is one.
type consentRow struct {
	Server string
	Conn   *gateway.Connection
}

func (c *Console) connectionsPage(w http.ResponseWriter, r *http.Request) {
	cs, kept, err := c.connections(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	var consent []consentRow
	if cb, ok := c.b.(ConnectBackend); ok {
		for _, s := range cb.ConsentServers(r.Context()) {
			row := consentRow{Server: s}
			for i := range cs {
				if cs[i].Server == s && cs[i].Caller == "" {
					row.Conn = &cs[i]
				}
			}
			consent = append(consent, row)
		}
	}
	q := r.URL.Query()
	c.render(w, r, http.StatusOK, "connections", "Connections", "connections", map[string]any{
		"Connections": cs, "Kept": kept, "Now": c.now(), "Revoked": q.Get("revoked"), "Note": q.Get("note"),
		"Consent": consent, "Connected": q.Get("connected"), "Failed": q.Get("failed")})
}

// connectBody is the JSON form of a Connect.
type connectBody struct {
	Server string `json:"server"`
}

// connect is an operator's Connect: a POST (so the cross-origin check
// applies, as to every action) that starts the login and answers with a
// page that sends the browser on to the authorization server, or, as
// JSON, its URL. Not a redirect: the console's form-action 'self' would
// stop a form's redirect to another origin.
func (c *Console) connect(w http.ResponseWriter, r *http.Request) {
	var body connectBody
	isJSON, ok := c.readAction(w, r, &body, func(f url.Values) { body.Server = f.Get("server") })
	if !ok {
		return
	}
	if body.Server == "" {
		c.fail(w, r, http.StatusBadRequest, "server is required")
		return
	}
	cb, ok := c.b.(ConnectBackend)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "no server here is connected by an operator's login")
		return
	}
	operator := operatorOf(r.Context())
	authURL, err := cb.StartConnection(r.Context(), body.Server, operator)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.log.Info("console: connection started", "server", body.Server, "operator", operator)
	if isJSON || wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]string{"server": body.Server, "authorization_url": authURL})
		return
	}
	c.render(w, r, http.StatusOK, "connect", "Connect "+body.Server, "connections", map[string]any{"Server": body.Server, "URL": authURL})
}

func (c *Console) apiConnections(w http.ResponseWriter, r *http.Request) {
	cs, _, err := c.connections(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"connections": nonNil(cs)})
}

// revokeBody is the JSON form of a revocation.
type revokeBody struct {
	Server string `json:"server"`
	Caller string `json:"caller"`
}

func (c *Console) revokeConnection(w http.ResponseWriter, r *http.Request) {
	var body revokeBody
	isJSON, ok := c.readAction(w, r, &body, func(f url.Values) { body.Server, body.Caller = f.Get("server"), f.Get("caller") })
	if !ok {
		return
	}
	if body.Server == "" {
		c.fail(w, r, http.StatusBadRequest, "server is required")
		return
	}
	cb, ok := c.b.(ConnectionsBackend)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "no upstream credentials are kept here")
		return
	}
	operator := operatorOf(r.Context())
	res, err := cb.RevokeConnection(r.Context(), body.Server, body.Caller, operator)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.log.Info("console: connection revoked", "server", body.Server, "caller", body.Caller, "operator", operator, "at_server", res.AtServer)
	if isJSON || wantsJSON(r) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	http.Redirect(w, r, Prefix+"/connections?revoked="+url.QueryEscape(body.Server)+"&note="+url.QueryEscape(res.Note), http.StatusSeeOther)
}
