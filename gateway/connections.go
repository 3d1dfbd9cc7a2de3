package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Connection is one upstream OAuth credential as front ends see it: who
// is connected to which server, how, with which scopes and until when;
// never the token.
type Connection struct {
	Server string `json:"server"`
	// Caller is the caller whose account it is; "" is the server's own
	// (service mode).
	Caller  string    `json:"caller,omitempty"`
	Mode    string    `json:"mode"`
	Scopes  []string  `json:"scopes,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Expiry  time.Time `json:"expiry,omitzero"`
	Updated time.Time `json:"updated"`
}

// Connections is where the upstream credentials are kept and how one is
// revoked (assemble's: the store's rows, revoked at the authorization
// server too where it has a revocation endpoint).
type Connections interface {
	ListConnections(ctx context.Context, server string) ([]Connection, error)
	// RevokeConnection revokes the credential at its authorization server
	// when it can (revoked reports whether it did; remoteErr why not, when
	// it tried and failed) and forgets it in any case. ErrNoConnection
	// when there is none.
	RevokeConnection(ctx context.Context, server, caller string) (revoked bool, remoteErr error, err error)
}

// ErrNoConnection: no credential for that server and caller.
var ErrNoConnection = errors.New("no such connection")

type connectionsBox struct{ c Connections }

// SetConnections gives the gateway the upstream credentials to show and
// revoke (nil: none are kept).
func (g *Gateway) SetConnections(c Connections) {
	g.conns.Store(&connectionsBox{c})
}

func (g *Gateway) connections() Connections {
	if b := g.conns.Load(); b != nil {
		return b.c
	}
	return nil
}

// ListConnections lists the upstream credentials of server ("" for every
// server), by server then caller: what the console's Connections page and
// `backplane connections list` show.
func (g *Gateway) ListConnections(ctx context.Context, server string) ([]Connection, error) {
	c := g.connections()
	if c == nil {
		return nil, nil
	}
	return c.ListConnections(ctx, server)
}

// Revoked is what RevokeConnection did.
type Revoked struct {
	Server string `json:"server"`
	Caller string `json:"caller,omitempty"`
	// AtServer: the authorization server revoked the token too; else the
	// credential was only forgotten (Note says why).
	AtServer bool   `json:"at_server"`
	Note     string `json:"note,omitempty"`
	By       string `json:"revoked_by"`
}

// RevokeConnection is an operator's revocation of an upstream credential:
// revoked at its authorization server where it has a revocation endpoint,
// and forgotten, so the next call to that server needs a new login (or,
// for a caller's account, a new connection). Audited.
func (g *Gateway) RevokeConnection(ctx context.Context, server, caller, operator string) (*Revoked, error) {
	refuse := func(e *OperatorError) (*Revoked, error) {
		g.log.Warn("connection", "step", "revoke", "outcome", "refused", "server", server, "caller", caller, "by", operator, "reason", e.Class, "error", e.Message)
		return nil, e
	}
	switch {
	case operator == "":
		return refuse(opError("bad_revoke", "a revocation must name the operator who makes it", ErrActionInvalid))
	case !g.isOperator(operator):
		return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator))
	}
	c := g.connections()
	if c == nil {
		return refuse(opError("not_found", "no upstream credentials are kept here", ErrNoConnection))
	}
	atServer, remoteErr, err := c.RevokeConnection(ctx, server, caller)
	if errors.Is(err, ErrNoConnection) {
		return refuse(opError("not_found", fmt.Sprintf("no connection to %s for %s", server, callerText(caller)), err))
	}
	if err != nil {
		g.log.Error("connection", "step", "revoke", "outcome", "error", "server", server, "caller", caller, "by", operator, "error", err.Error())
		return nil, fmt.Errorf("revoking the connection to %s: %w", server, err)
	}
	r := &Revoked{Server: server, Caller: caller, AtServer: atServer, By: operator}
	if remoteErr != nil {
		r.Note = "forgotten here, but the authorization server did not revoke it: " + remoteErr.Error()
	} else if !atServer {
		r.Note = "forgotten here; the authorization server has no revocation endpoint"
	}
	g.log.Info("connection", "step", "revoke", "outcome", "revoked", "server", server, "caller", caller, "by", operator,
		"at_server", atServer, "note", r.Note)
	return r, nil
}

func callerText(c string) string {
	if c == "" {
		return "the gateway itself (service mode)"
	}
	return "caller " + c
}

// connector is implemented by Connections that can start an operator's
// consent for a server from a front end (the console's Connect): the
// service mode's authorization code flow, completed at serve's callback.
// Unexported: assemble's Connections implements it by its methods alone.
type connector interface {
	// ConsentServers names the servers whose own credential is an
	// operator's consent (mode service, grant authorization_code), in the
	// configuration's order.
	ConsentServers() []string
	// StartLogin begins server's login for operator and returns the
	// authorization URL to send the operator's browser to. ErrNoConnection
	// when server is not one of ConsentServers.
	StartLogin(ctx context.Context, server, operator string) (string, error)
}

// ConsentServers names the servers an operator connects the gateway to
// with their consent (none when the Connections cannot start a login).
func (g *Gateway) ConsentServers() []string {
	if c, ok := g.connections().(connector); ok {
		return c.ConsentServers()
	}
	return nil
}

// StartConnection is an operator's Connect: it begins the authorization
// code flow of server's own credential and returns the authorization URL
// for the operator's browser; the flow completes at serve's callback,
// which saves the token. Audited (the start here; the outcome where the
// token is saved).
func (g *Gateway) StartConnection(ctx context.Context, server, operator string) (string, error) {
	refuse := func(e *OperatorError) (string, error) {
		g.log.Warn("connection", "step", "login_start", "outcome", "refused", "server", server, "by", operator, "reason", e.Class, "error", e.Message)
		return "", e
	}
	switch {
	case operator == "":
		return refuse(opError("bad_login", "a login must name the operator who starts it", ErrActionInvalid))
	case !g.isOperator(operator):
		return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator))
	}
	c, ok := g.connections().(connector)
	if !ok {
		return refuse(opError("not_found", "no server here is connected by an operator's login", ErrNoConnection))
	}
	u, err := c.StartLogin(ctx, server, operator)
	if errors.Is(err, ErrNoConnection) {
		return refuse(opError("not_found", fmt.Sprintf("%s is not a server the gateway connects to with an operator's login (mode service, grant authorization_code)", server), err))
	}
	if err != nil {
		return refuse(opError("login_failed", err.Error(), err))
	}
	g.log.Info("connection", "step", "login_start", "outcome", "started", "server", server, "by", operator)
	return u, nil
}
