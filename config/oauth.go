package config

import (
	"net/url"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// OAuthConfig makes `backplane serve` an OAuth 2.1 resource server (the
// MCP authorization specification): JWT access tokens from an
// authorization server are accepted besides the static serve.tokens.
//
//	serve:
//	  oauth:
//	    issuer: https://auth.example            # a token's iss must equal it
//	    audience: https://gw.example/mcp        # this server's resource URL; a token's aud must hold it
//	    jwks_url: https://auth.example/jwks.json   # or jwks_file: keys.json (relative to this file)
//	    caller_claim: sub                       # the claim naming the caller (default sub)
//	    authorization_servers: [https://auth.example]   # in the metadata document (default: the issuer)
//
// The values are plain: package oauth does the verifying.
type OAuthConfig struct {
	// Issuer is the authorization server's issuer identifier (an
	// absolute http(s) URL).
	Issuer string
	// Audience is the resource identifier of this server, its public MCP
	// URL (RFC 8707): absolute http(s), no query, no fragment.
	Audience string
	// JWKSFile is a file holding the issuer's JSON Web Key Set, made
	// absolute against the configuration's folder.
	JWKSFile string
	// JWKSURL is where the issuer publishes its key set: https, or http on
	// a loopback host.
	JWKSURL string
	// CallerClaim names the claim whose value is the caller. Default "sub".
	CallerClaim string
	// AuthorizationServers are listed in the protected resource metadata.
	// Default: the issuer.
	AuthorizationServers []string
	// Line is where the oauth section starts.
	Line int
}

// DefaultCallerClaim is the claim naming the caller by default.
const DefaultCallerClaim = "sub"

// claimName is a JWT claim name as the configuration accepts it.
var claimName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)

func (p *parser) oauth(c *Config, v *yaml.Node) error {
	o := &OAuthConfig{Line: v.Line, CallerClaim: DefaultCallerClaim}
	err := p.mapping(v, "serve oauth", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "issuer":
			o.Issuer, err = p.str(v, "serve oauth issuer")
			if err == nil {
				err = p.checkURL(v, "issuer", o.Issuer, false)
			}
		case "audience":
			o.Audience, err = p.str(v, "serve oauth audience")
			if err == nil {
				err = p.checkURL(v, "audience", o.Audience, false)
			}
			if err == nil {
				if u, _ := url.Parse(o.Audience); u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
					err = p.errAt(v, "serve oauth audience %q: the resource URL may have no query and no fragment (RFC 8707, RFC 9728)", o.Audience)
				}
			}
		case "jwks_file":
			o.JWKSFile, err = p.str(v, "serve oauth jwks_file")
			if err == nil && o.JWKSFile == "" {
				err = p.errAt(v, "serve oauth jwks_file must be a path")
			}
			o.JWKSFile = resolve(c.Dir, o.JWKSFile)
		case "jwks_url":
			o.JWKSURL, err = p.str(v, "serve oauth jwks_url")
			if err == nil {
				err = p.checkURL(v, "jwks_url", o.JWKSURL, true)
			}
		case "caller_claim":
			o.CallerClaim, err = p.str(v, "serve oauth caller_claim")
			if err == nil && !claimName.MatchString(o.CallerClaim) {
				err = p.errAt(v, "serve oauth caller_claim %q is not a claim name (letters, digits and _.:/-, such as sub or email)", o.CallerClaim)
			}
		case "authorization_servers":
			o.AuthorizationServers, err = p.strList(v, "serve oauth authorization_servers")
			for _, s := range o.AuthorizationServers {
				if err == nil {
					err = p.checkURL(v, "authorization_servers entry", s, false)
				}
			}
		}
		return err
	}, "issuer", "audience", "jwks_file", "jwks_url", "caller_claim", "authorization_servers")
	if err != nil {
		return err
	}
	switch {
	case o.Issuer == "":
		return p.errAt(v, "serve oauth needs an issuer: the authorization server whose tokens are accepted")
	case o.Audience == "":
		return p.errAt(v, "serve oauth needs an audience: this server's public MCP URL, which tokens must be issued for (such as http://127.0.0.1:8787/mcp)")
	case (o.JWKSFile == "") == (o.JWKSURL == ""):
		return p.errAt(v, "serve oauth needs exactly one of jwks_file and jwks_url: where the issuer's signing keys are")
	}
	c.Serve.OAuth = o
	return nil
}

// checkURL refuses what is not an absolute http(s) URL; with keys, plain
// http only on a loopback host (keys fetched in clear could be swapped).
func (p *parser) checkURL(v *yaml.Node, what, s string, keys bool) error {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return p.errAt(v, "serve oauth %s %q is not an absolute http(s) URL", what, s)
	}
	if keys && u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		return p.errAt(v, "serve oauth %s %q: keys must be fetched over https (plain http only on a loopback host)", what, s)
	}
	return nil
}
