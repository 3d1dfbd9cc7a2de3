package config

import (
	"net/url"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UpstreamOAuth is a server's auth.oauth: how the gateway authenticates
// to an HTTP upstream that needs OAuth. Mode service: one credential for
// the gateway itself, from the client credentials grant; modes per_caller
// and exchange: each caller's own (UpstreamCallerOAuth):
//
//	servers:
//	  - name: tracker
//	    url: https://tracker.example.com/mcp
//	    auth:
//	      oauth:
//	        mode: service
//	        client_id: backplane
//	        client_secret_file: /run/secrets/tracker-client-secret  # relative to this file
//	        # client_secret_env: TRACKER_CLIENT_SECRET               # or from the environment
//	        scopes: [tools.read]                                    # optional
//	        token_url: https://auth.example.com/oauth2/token       # optional: discovered when absent
//
// The secret is never written in the file: it is read from the file or
// the variable when the configuration is parsed, trimmed of surrounding
// white space, and never quoted by an error.
type UpstreamOAuth struct {
	Mode         string
	ClientID     string
	ClientSecret string
	Scopes       []string
	TokenURL     string
	// PerCaller holds what the modes per_caller and exchange add
	// (upstream_percaller.go).
	PerCaller UpstreamCallerOAuth
	Line      int
}

// The modes of auth.oauth.
const (
	UpstreamOAuthService   = "service"
	UpstreamOAuthPerCaller = "per_caller" // upstream_percaller.go
	UpstreamOAuthExchange  = "exchange"
)

func (p *parser) upstreamAuth(c *Config, v *yaml.Node) (*UpstreamOAuth, error) {
	var out *UpstreamOAuth
	err := p.mapping(v, "auth", func(key string, k, v *yaml.Node) error {
		var err error
		out, err = p.upstreamOAuth(c, v)
		return err
	}, "oauth")
	if err == nil && out == nil {
		err = p.errAt(v, "auth: give oauth: {mode: service, ...}")
	}
	return out, err
}

func (p *parser) upstreamOAuth(c *Config, v *yaml.Node) (*UpstreamOAuth, error) {
	o := &UpstreamOAuth{Line: v.Line}
	var secretFile, secretEnv string
	var modeNode, fileNode, envNode *yaml.Node
	err := p.mapping(v, "auth oauth", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "mode":
			modeNode = v
			o.Mode, err = p.str(v, "auth oauth mode")
		case "client_id":
			o.ClientID, err = p.str(v, "auth oauth client_id")
		case "client_secret_file":
			fileNode = v
			secretFile, err = p.str(v, "auth oauth client_secret_file")
		case "client_secret_env":
			envNode = v
			if secretEnv, err = p.str(v, "auth oauth client_secret_env"); err == nil && !envName.MatchString(secretEnv) {
				err = p.errAt(v, "auth oauth client_secret_env: %q is not an environment variable name", secretEnv)
			}
		case "scopes":
			if o.Scopes, err = p.strList(v, "auth oauth scopes"); err == nil {
				for _, s := range o.Scopes {
					if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") {
						return p.errAt(v, "auth oauth scopes: %q is not a scope (no spaces or quotes)", s)
					}
				}
			}
		case "token_url":
			if o.TokenURL, err = p.str(v, "auth oauth token_url"); err == nil {
				u, perr := url.Parse(o.TokenURL)
				if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					err = p.errAt(v, "auth oauth token_url must be an http:// or https:// URL with a host")
				}
			}
		case "client_secret":
			// Listed as known so the message can say why it is refused.
			err = p.errAt(k, "auth oauth: the client secret is never written in the file: use client_secret_file or client_secret_env")
		default:
			err = p.callerOAuthKey(o, key, k, v) // upstream_percaller.go
		}
		return err
	}, append([]string{"mode", "client_id", "client_secret_file", "client_secret_env", "client_secret", "scopes", "token_url"}, callerOAuthKeys...)...)
	if err != nil {
		return nil, err
	}
	switch o.Mode {
	case UpstreamOAuthService, UpstreamOAuthPerCaller, UpstreamOAuthExchange:
	case "":
		return nil, p.errAt(v, "auth oauth needs a mode: service, per_caller or exchange")
	default:
		return nil, p.errAt(modeNode, "auth oauth mode %q: service, per_caller or exchange", o.Mode)
	}
	if err := p.checkCallerOAuth(o); err != nil {
		return nil, err
	}
	if o.ClientID == "" && o.Mode != UpstreamOAuthPerCaller { // per_caller: registered dynamically
		return nil, p.errAt(v, "auth oauth needs a client_id")
	}
	if o.ClientID == "" && (fileNode != nil || envNode != nil) {
		return nil, p.errAt(v, "auth oauth: a client secret needs its client_id")
	}
	switch {
	case fileNode != nil && envNode != nil:
		return nil, p.errAt(envNode, "auth oauth: give one of client_secret_file and client_secret_env, not both")
	case envNode != nil:
		if o.ClientSecret = os.Getenv(secretEnv); o.ClientSecret == "" {
			return nil, p.errAt(envNode, "auth oauth client_secret_env %s is not set or empty", secretEnv)
		}
	case fileNode != nil:
		b, err := os.ReadFile(resolve(c.Dir, secretFile))
		if err != nil {
			return nil, p.errAt(fileNode, "auth oauth client_secret_file: %v", err)
		}
		if o.ClientSecret = strings.TrimSpace(string(b)); o.ClientSecret == "" {
			return nil, p.errAt(fileNode, "auth oauth client_secret_file %s is empty", secretFile)
		}
	case o.Mode != UpstreamOAuthService:
		// A public client (PKCE alone), or one the token endpoint knows
		// by its id; the catalog is then listed without a token.
	default:
		return nil, p.errAt(v, "auth oauth needs client_secret_file or client_secret_env")
	}
	return o, nil
}
