package config

import (
	"fmt"
	"maps"
	"net/url"
	"slices"

	"go.yaml.in/yaml/v3"
)

// UpstreamCallerOAuth is what the modes per_caller and exchange add to a
// server's auth.oauth (the other keys, client_id, the secret, scopes and
// token_url, are the service mode's):
//
//	servers:
//	  - name: tracker
//	    url: https://tracker.example.com/mcp
//	    auth:
//	      oauth:
//	        mode: per_caller              # each caller connects its own account
//	        client_id: backplane          # optional: else registered (RFC 7591) as a public client
//	        client_secret_env: TRACKER_SECRET   # optional: a confidential client; also lists the catalog
//	        scopes: [issues.read]
//	        auth_url: https://auth.example.com/authorize   # optional: discovered when absent
//	  - name: docs
//	    url: https://docs.example.com/mcp
//	    auth:
//	      oauth:
//	        mode: exchange                # the caller's serve.oauth JWT exchanged (RFC 8693)
//	        client_id: backplane
//	        client_secret_file: docs.secret
//	        audience: docs                # optional: default the server's url
//	        subject_token_type: access_token   # or jwt, id_token
type UpstreamCallerOAuth struct {
	AuthURL          string // per_caller
	Audience         string // exchange
	SubjectTokenType string // exchange: the URN

	// keys are the keys above as read, with the mode each applies to,
	// until checkCallerOAuth has checked them (then nil).
	keys map[*yaml.Node]string
}

// callerOAuthKeys are the keys of UpstreamCallerOAuth.
var callerOAuthKeys = []string{"auth_url", "audience", "subject_token_type"}

// subjectTokenTypes are the types of the caller's token an exchange may
// name (RFC 8693 section 3).
var subjectTokenTypes = map[string]string{
	"access_token": "urn:ietf:params:oauth:token-type:access_token",
	"jwt":          "urn:ietf:params:oauth:token-type:jwt",
	"id_token":     "urn:ietf:params:oauth:token-type:id_token",
}

func (p *parser) callerOAuthKey(o *UpstreamOAuth, key string, k, v *yaml.Node) error {
	var err error
	if o.PerCaller.keys == nil {
		o.PerCaller.keys = map[*yaml.Node]string{}
	}
	switch key {
	case "auth_url":
		if o.PerCaller.AuthURL, err = p.str(v, "auth oauth auth_url"); err == nil {
			u, perr := url.Parse(o.PerCaller.AuthURL)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				err = p.errAt(v, "auth oauth auth_url must be an http:// or https:// URL with a host")
			}
		}
		o.PerCaller.keys[k] = UpstreamOAuthPerCaller
	case "audience":
		if o.PerCaller.Audience, err = p.str(v, "auth oauth audience"); err == nil && o.PerCaller.Audience == "" {
			err = p.errAt(v, "auth oauth audience may not be empty (leave it out for the server's url)")
		}
		o.PerCaller.keys[k] = UpstreamOAuthExchange
	case "subject_token_type":
		var s string
		if s, err = p.str(v, "auth oauth subject_token_type"); err == nil {
			urn, ok := subjectTokenTypes[s]
			if !ok {
				err = p.errAt(v, "auth oauth subject_token_type %q: access_token, jwt or id_token", s)
			}
			o.PerCaller.SubjectTokenType = urn
		}
		o.PerCaller.keys[k] = UpstreamOAuthExchange
	}
	return err
}

// checkCallerOAuth refuses a per-caller key in a mode it has no meaning in.
func (p *parser) checkCallerOAuth(o *UpstreamOAuth) error {
	keys := o.PerCaller.keys
	o.PerCaller.keys = nil
	for _, k := range slices.SortedFunc(maps.Keys(keys), func(a, b *yaml.Node) int { return a.Line - b.Line }) {
		if mode := keys[k]; o.Mode != mode {
			return p.errAt(k, "auth oauth %s applies to mode %s, not %s", k.Value, mode, o.Mode)
		}
	}
	return nil
}

// finishCallerOAuth checks what the per-caller modes need of the other
// sections: an exchange needs the callers' own JWTs (serve.oauth).
func (p *parser) finishCallerOAuth(c *Config) error {
	for _, s := range c.Servers {
		if s.OAuth != nil && s.OAuth.Mode == UpstreamOAuthExchange && c.Serve.OAuth == nil {
			return &Error{File: c.Path, Line: s.OAuth.Line, Msg: fmt.Sprintf(
				"server %s: auth oauth mode exchange exchanges each caller's JWT access token, and serve.oauth is not set: callers with static tokens have none to exchange", s.Name)}
		}
	}
	return nil
}
