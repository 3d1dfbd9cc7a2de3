package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Callers named by client certificates (serve.tls.caller_from). Only a
// certificate the TLS stack verified against the configured client CAs
// counts (r.TLS.VerifiedChains non-empty): with VerifyClientCertIfGiven
// an unverifiable one already failed the handshake, and the check here
// keeps a configuration that does not verify from naming anyone.

// maxCertCaller bounds a caller name taken from a certificate.
const maxCertCaller = 256

// certCaller is the caller r's verified client certificate names, ok
// false when it names none (no TLS, no certificate, no CertCaller); an
// error when it names one that cannot be a caller.
func (s *Server) certCaller(r *http.Request) (caller string, ok bool, err error) {
	if s.opts.CertCaller == "" || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false, nil
	}
	leaf := r.TLS.VerifiedChains[0][0]
	var name string
	switch s.opts.CertCaller {
	case "cn":
		name = leaf.Subject.CommonName
	case "san_uri":
		if len(leaf.URIs) > 0 {
			name = leaf.URIs[0].String()
		}
	case "san_dns":
		if len(leaf.DNSNames) > 0 {
			name = leaf.DNSNames[0]
		}
	default:
		return "", false, fmt.Errorf("server: unknown caller_from %q", s.opts.CertCaller)
	}
	if err := checkCertCaller(name); err != nil {
		return "", true, fmt.Errorf("the client certificate names no usable caller (%s): %w", s.opts.CertCaller, err)
	}
	return name, true, nil
}

// checkCertCaller refuses what cannot be a caller's name: it is printed
// to operators, written in the audit log and matched by policy, so no
// controls (a terminal acts on them) and no format characters (bidi
// overrides and zero-width characters make one name look like another).
func checkCertCaller(name string) error {
	switch {
	case name == "":
		return errors.New("it is empty")
	case len(name) > maxCertCaller:
		return fmt.Errorf("it is longer than %d bytes", maxCertCaller)
	case !utf8.ValidString(name):
		return errors.New("it is not UTF-8")
	case strings.IndexFunc(name, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError
	}) >= 0:
		return errors.New("it holds control or format characters")
	}
	return nil
}

// handshakeLog takes net/http's error log of a TLS server: each line (a
// failed handshake, mostly) through the throttled refusal log.
type handshakeLog struct{ s *Server }

func (h *handshakeLog) Write(p []byte) (int, error) {
	h.s.refusals.warn(h.s.log, "tls", "TLS listener: connection refused or failed", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}
