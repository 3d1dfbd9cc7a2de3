// Package testkit holds helpers that the tests of several packages share
// (the signing keys and JWKS endpoint of a test OAuth issuer; a fresh
// PostgreSQL schema per test). Only
// _test.go files import it: it imports package testing, and the product
// binary must not depend on it (go list -deps ./cmd/backplane does not
// list it).
package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// SigningKey is a private key generated in the test, with its kid set,
// and the algorithm it signs with.
type SigningKey struct {
	Private jwk.Key
	Alg     jwa.SignatureAlgorithm
}

// NewRSAKey returns a fresh 2048-bit RSA key (RS256) with kid.
func NewRSAKey(t testing.TB, kid string) SigningKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, k, kid, jwa.RS256())
}

// NewECKey returns a fresh P-256 key (ES256) with kid.
func NewECKey(t testing.TB, kid string) SigningKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, k, kid, jwa.ES256())
}

func importKey(t testing.TB, raw any, kid string, alg jwa.SignatureAlgorithm) SigningKey {
	t.Helper()
	k, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	return SigningKey{k, alg}
}

// Sign builds b's token and returns it signed with k, in compact form.
func (k SigningKey) Sign(t testing.TB, b *jwt.Builder) string {
	t.Helper()
	tok, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Sign(tok, jwt.WithKey(k.Alg, k.Private))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// KeySet is the JSON public key set (JWKS) of keys.
func KeySet(t testing.TB, keys ...SigningKey) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		pub, err := k.Private.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := set.AddKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// JWKSServer is an issuer's key set endpoint on 127.0.0.1, serving a body
// the test may replace (to rotate keys), and counting its requests.
type JWKSServer struct {
	// URL is the key set's address.
	URL string

	mu   sync.Mutex
	body []byte
	hits int
}

// NewJWKSServer serves body until the test ends.
func NewJWKSServer(t testing.TB, body []byte) *JWKSServer {
	t.Helper()
	s := &JWKSServer{body: body}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits++
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(s.body)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/jwks.json"
	return s
}

// Set replaces the body served from now on.
func (s *JWKSServer) Set(body []byte) {
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

// Hits is how many requests the endpoint has answered.
func (s *JWKSServer) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}
