package server

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestCertCaller(t *testing.T) {
	u, _ := url.Parse("spiffe://example.org/agent/carol")
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "carol"}, URIs: []*url.URL{u}, DNSNames: []string{"carol.agents.example", "other.example"}}
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	unverified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	for _, tc := range []struct {
		from  string
		state *tls.ConnectionState
		want  string
		ok    bool
	}{
		{"cn", verified, "carol", true},
		{"san_uri", verified, "spiffe://example.org/agent/carol", true},
		{"san_dns", verified, "carol.agents.example", true},
		{"cn", unverified, "", false}, // presented, not verified: no caller
		{"cn", nil, "", false},        // plain HTTP
		{"", verified, "", false},     // caller_from not set
	} {
		s := &Server{opts: Options{CertCaller: tc.from}}
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.TLS = tc.state
		got, ok, err := s.certCaller(r)
		if got != tc.want || ok != tc.ok || err != nil {
			t.Errorf("%s: %q %v %v, want %q %v", tc.from, got, ok, err, tc.want, tc.ok)
		}
	}
	// A certificate without the field asked for names no one, and is an
	// error (not a fall-through to the anonymous caller).
	bare := &x509.Certificate{Subject: pkix.Name{CommonName: "dave"}}
	s := &Server{opts: Options{CertCaller: "san_uri"}}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{bare}}}
	if _, ok, err := s.certCaller(r); !ok || err == nil {
		t.Errorf("a certificate without a URI SAN: ok %v, err %v; want an error", ok, err)
	}
}

func TestCheckCertCaller(t *testing.T) {
	for _, name := range []string{"carol", "svc-a@example.org", "spiffe://x/y", "Zoë"} {
		if err := checkCertCaller(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "a\nb", "a\x1b[31m", "ali\u202ece", "a\u200bb", "\xff", strings.Repeat("a", 257)} {
		if err := checkCertCaller(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}
