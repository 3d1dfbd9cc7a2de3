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
//
// Service mode can instead hold an operator's one-time consent, through
// the authorization code flow (`backplane servers login NAME`):
//
//	oauth:
//	  mode: service
//	  grant: authorization_code          # default client_credentials
//	  client_id: backplane               # optional: else a client ID metadata document or dynamic registration
//	  client_id_metadata_url: https://gw.example.com/oauth/client.json   # optional
//
// Its tokens are kept in the store, sealed: it needs secrets: {key_file}.
type UpstreamOAuth struct {
	Mode string
	// Grant is GrantClientCredentials ("" means it) or
	// GrantAuthorizationCode, for service mode.
	Grant        string
	ClientID     string
	ClientSecret string
	// ClientIDMetadataURL is this gateway's client ID metadata document
	// (an https URL with a path), used where the authorization server
	// supports them (authorization_code only).
	ClientIDMetadataURL string
	Scopes              []string
	TokenURL            string
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

// The grants of service mode.
const (
	GrantClientCredentials = "client_credentials"
	GrantAuthorizationCode = "authorization_code"
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
	var modeNode, fileNode, envNode, tokenURLNode *yaml.Node
	err := p.mapping(v, "auth oauth", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "mode":
			modeNode = v
			o.Mode, err = p.str(v, "auth oauth mode")
		case "client_id":
			o.ClientID, err = p.str(v, "auth oauth client_id")
		case "grant":
			if o.Grant, err = p.str(v, "auth oauth grant"); err == nil && o.Grant != GrantClientCredentials && o.Grant != GrantAuthorizationCode {
				err = p.errAt(v, "auth oauth grant %q: %s or %s", o.Grant, GrantClientCredentials, GrantAuthorizationCode)
			}
			if o.Grant == GrantClientCredentials {
				o.Grant = ""
			}
		case "client_id_metadata_url":
			if o.ClientIDMetadataURL, err = p.str(v, "auth oauth client_id_metadata_url"); err == nil {
				u, perr := url.Parse(o.ClientIDMetadataURL)
				if perr != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") == "" {
					err = p.errAt(v, "auth oauth client_id_metadata_url must be an https:// URL with a path (the client ID metadata document)")
				}
			}
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
			tokenURLNode = v
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
	}, append([]string{"mode", "grant", "client_id", "client_id_metadata_url", "client_secret_file", "client_secret_env", "client_secret", "scopes", "token_url"}, callerOAuthKeys...)...)
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
	code := o.Grant == GrantAuthorizationCode
	switch {
	case o.Grant != "" && o.Mode != UpstreamOAuthService:
		return nil, p.errAt(v, "auth oauth grant applies to mode: service")
	case o.ClientID == "" && !code && o.Mode != UpstreamOAuthPerCaller: // per_caller: registered dynamically
		return nil, p.errAt(v, "auth oauth needs a client_id")
	case o.ClientIDMetadataURL != "" && !code:
		return nil, p.errAt(v, "auth oauth client_id_metadata_url applies to grant: authorization_code")
	case code && tokenURLNode != nil:
		return nil, p.errAt(tokenURLNode, "auth oauth token_url applies to the client credentials grant: with authorization_code the endpoints are discovered")
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
	case o.Mode != UpstreamOAuthService || code:
		// A public client (PKCE alone), one the token endpoint knows by
		// its id, or one registered at login; the catalog is then listed
		// without a token.
	default:
		return nil, p.errAt(v, "auth oauth needs client_secret_file or client_secret_env")
	}
	return o, nil
}
