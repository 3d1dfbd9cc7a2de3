package config

import (
	"go.yaml.in/yaml/v3"
)

// TLSConfig is serve.tls: serve terminates TLS itself, with no proxy in
// front:
//
//	serve:
//	  tls:
//	    cert_file: tls/server.crt     # PEM, the leaf first, then its chain (relative to this file)
//	    key_file: tls/server.key      # PEM, the certificate's private key
//	    client_ca_file: tls/ca.crt    # optional: verify client certificates issued by these CAs
//	    caller_from: cn               # optional, with client_ca_file: cn, san_uri or san_dns
//
// The files are read when serve starts (a pair that does not load fails
// the start) and again on SIGHUP and whenever one of them changes on disk
// (checked at most once a second, on a handshake); a new pair that does
// not load is refused with a warning and the old one goes on. Open
// connections keep the certificate they were opened with.
//
// With client_ca_file a client may present a certificate (none is
// required: bearer tokens still work); one that does not verify against
// those CAs fails the handshake. With caller_from too, a request that
// carries no Authorization header is made as the caller the verified
// certificate names: its subject's common name (cn), its first URI SAN
// (san_uri) or its first DNS SAN (san_dns), taken as the caller's name as
// it is (the CA is the operator's: what it signs, it vouches for), and
// refused when empty, longer than 256 bytes or holding control or format
// characters. A bearer token, when sent, decides the caller instead.
type TLSConfig struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
	// CallerFrom is "", "cn", "san_uri" or "san_dns".
	CallerFrom string
	Line       int
}

// CallerFrom values.
var tlsCallerFrom = []string{"cn", "san_uri", "san_dns"}

func (p *parser) tls(c *Config, v *yaml.Node) error {
	t := &TLSConfig{Line: v.Line}
	var fromNode *yaml.Node
	err := p.mapping(v, "serve tls", func(key string, k, v *yaml.Node) error {
		s, err := p.str(v, "serve tls "+key)
		if err != nil {
			return err
		}
		if s == "" {
			return p.errAt(v, "serve tls %s must not be empty", key)
		}
		switch key {
		case "cert_file":
			t.CertFile = resolve(c.Dir, s)
		case "key_file":
			t.KeyFile = resolve(c.Dir, s)
		case "client_ca_file":
			t.ClientCAFile = resolve(c.Dir, s)
		case "caller_from":
			fromNode = v
			t.CallerFrom = s
			known := false
			for _, f := range tlsCallerFrom {
				known = known || f == s
			}
			if !known {
				return p.errAt(v, "serve tls caller_from %q: must be cn (the subject's common name), san_uri or san_dns (the first such subject alternative name)", s)
			}
		}
		return nil
	}, "cert_file", "key_file", "client_ca_file", "caller_from")
	if err != nil {
		return err
	}
	switch {
	case t.CertFile == "" || t.KeyFile == "":
		return p.errAt(v, "serve tls needs cert_file and key_file: the server's certificate (PEM, with its chain) and its private key")
	case fromNode != nil && t.ClientCAFile == "":
		return p.errAt(fromNode, "serve tls caller_from needs client_ca_file: only a certificate verified against your CAs may name a caller")
	}
	c.Serve.TLS = t
	return nil
}
