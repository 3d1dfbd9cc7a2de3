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

func (c *Console) connectionsPage(w http.ResponseWriter, r *http.Request) {
	cs, kept, err := c.connections(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "connections", "Connections", "connections", map[string]any{
		"Connections": cs, "Kept": kept, "Now": c.now(), "Revoked": r.URL.Query().Get("revoked"), "Note": r.URL.Query().Get("note")})
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
