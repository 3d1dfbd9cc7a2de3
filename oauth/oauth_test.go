package oauth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/agentbackplane/backplane/internal/testkit"
)

const (
	testIssuer   = "https://issuer.test"
	testAudience = "http://127.0.0.1:8787/mcp"
)

// signer is a test key (package testkit) that signs claims.
type signer struct{ testkit.SigningKey }

func newRSA(t *testing.T, kid string) signer { return signer{testkit.NewRSAKey(t, kid)} }

func newEC(t *testing.T, kid string) signer { return signer{testkit.NewECKey(t, kid)} }

// claims are a token's claims; zero times are left out.
type claims struct {
	iss, sub string
	aud      []string
	exp, nbf time.Time
	extra    map[string]any
}

func good(now time.Time) claims {
	return claims{iss: testIssuer, sub: "alice", aud: []string{testAudience}, exp: now.Add(time.Hour)}
}

func (s signer) sign(t *testing.T, c claims) string {
	t.Helper()
	b := jwt.NewBuilder().Issuer(c.iss).Subject(c.sub).Audience(c.aud)
	if !c.exp.IsZero() {
		b = b.Expiration(c.exp)
	}
	if !c.nbf.IsZero() {
		b = b.NotBefore(c.nbf)
	}
	for k, v := range c.extra {
		b = b.Claim(k, v)
	}
	return s.Sign(t, b)
}

// keySet is the public JWKS of signers.
func keySet(t *testing.T, ss ...signer) []byte {
	t.Helper()
	keys := make([]testkit.SigningKey, len(ss))
	for i, s := range ss {
		keys[i] = s.SigningKey
	}
	return testkit.KeySet(t, keys...)
}

// clock is a fake clock advanced by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestVerify(t *testing.T) {
	rsaKey, ecKey := newRSA(t, "rsa-1"), newEC(t, "ec-1")
	other := newRSA(t, "rsa-1") // the same kid, another key: a forged signature
	stranger := newRSA(t, "nobody")
	js := testkit.NewJWKSServer(t, keySet(t, rsaKey, ecKey))
	clk := &clock{now: time.Now().Truncate(time.Second)}
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	with := func(f func(*claims)) claims {
		c := good(now)
		f(&c)
		return c
	}
	noneToken := func() string {
		enc := base64.RawURLEncoding.EncodeToString
		h, _ := json.Marshal(map[string]string{"alg": "none", "kid": "rsa-1", "typ": "JWT"})
		p, _ := json.Marshal(map[string]any{"iss": testIssuer, "sub": "alice", "aud": testAudience, "exp": now.Add(time.Hour).Unix()})
		return enc(h) + "." + enc(p) + "."
	}
	tamper := func(tok string) string {
		// Swap the payload for another one: the signature no longer matches.
		parts := strings.Split(tok, ".")
		p, _ := json.Marshal(map[string]any{"iss": testIssuer, "sub": "mallory", "aud": testAudience, "exp": now.Add(time.Hour).Unix()})
		parts[1] = base64.RawURLEncoding.EncodeToString(p)
		return strings.Join(parts, ".")
	}
	for _, tc := range []struct {
		name, token, want string // want: the caller, or a part of the error
		ok                bool
	}{
		{"rsa", rsaKey.sign(t, good(now)), "alice", true},
		{"ec", ecKey.sign(t, good(now)), "alice", true},
		{"one of several audiences", rsaKey.sign(t, with(func(c *claims) { c.aud = []string{"https://other", testAudience} })), "alice", true},
		{"expired within the leeway", rsaKey.sign(t, with(func(c *claims) { c.exp = now.Add(-10 * time.Second) })), "alice", true},
		{"nbf within the leeway", rsaKey.sign(t, with(func(c *claims) { c.nbf = now.Add(10 * time.Second) })), "alice", true},
		{"wrong audience", rsaKey.sign(t, with(func(c *claims) { c.aud = []string{"https://other.example/mcp"} })), "(aud)", false},
		{"no audience", rsaKey.sign(t, with(func(c *claims) { c.aud = nil })), "(aud)", false},
		{"wrong issuer", rsaKey.sign(t, with(func(c *claims) { c.iss = "https://evil.test" })), "(iss)", false},
		{"expired", rsaKey.sign(t, with(func(c *claims) { c.exp = now.Add(-time.Minute) })), "expired", false},
		{"not yet valid", rsaKey.sign(t, with(func(c *claims) { c.nbf = now.Add(time.Minute) })), "(nbf)", false},
		{"no expiry", rsaKey.sign(t, with(func(c *claims) { c.exp = time.Time{} })), "(exp)", false},
		{"unknown key", stranger.sign(t, good(now)), `key "nobody" is not in`, false},
		{"bad signature", other.sign(t, good(now)), "bad signature", false},
		{"tampered payload", tamper(rsaKey.sign(t, good(now))), "bad signature", false},
		{"alg none", noneToken(), `"none" is not accepted`, false},
		{"no caller", rsaKey.sign(t, with(func(c *claims) { c.sub = "" })), `"sub"`, false},
		{"caller with a control character", rsaKey.sign(t, with(func(c *claims) { c.sub = "al\nice" })), "control character", false},
		{"not a JWT", "alice-token", "not a signed JWT", false},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), "longer than", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.token)
			if tc.ok {
				if err != nil || c.Caller != tc.want {
					t.Fatalf("got %+v, %v; want caller %s", c, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %+v", c)
			}
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want ErrInvalidToken saying %q", err, tc.want)
			}
		})
	}
}

// An HS256 token whose secret is the RSA public key's bytes (the classic
// algorithm confusion) is refused before any key is used.
func TestVerifyRefusesHMAC(t *testing.T) {
	rsaKey := newRSA(t, "rsa-1")
	js := testkit.NewJWKSServer(t, keySet(t, rsaKey))
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL})
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := jwk.Import(keySet(t, rsaKey))
	secret.Set(jwk.KeyIDKey, "rsa-1")
	hs := signer{testkit.SigningKey{Private: secret, Alg: jwa.HS256()}}.sign(t, good(time.Now()))
	if _, err := v.Verify(context.Background(), hs); err == nil || !strings.Contains(err.Error(), `"HS256" is not accepted`) {
		t.Fatalf("HS256: %v", err)
	}
}

func TestCallerClaim(t *testing.T) {
	k := newEC(t, "ec-1")
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(file, keySet(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetFile: file, CallerClaim: "email"})
	if err != nil {
		t.Fatal(err)
	}
	c := good(time.Now())
	c.extra = map[string]any{"email": "alice@example.test", "scope": "tools:call tools:list"}
	got, err := v.Verify(context.Background(), k.sign(t, c))
	if err != nil || got.Caller != "alice@example.test" || len(got.Scopes) != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
	c.extra = map[string]any{"email": 7}
	if _, err := v.Verify(context.Background(), k.sign(t, c)); err == nil || !strings.Contains(err.Error(), `"email"`) {
		t.Fatalf("a number as the caller: %v", err)
	}
}

// A new kid in the key set is picked up when a token names it; a flood of
// unknown kids re-reads the set at most once per MinRefreshInterval.
func TestKeyRotation(t *testing.T) {
	old, rotated := newRSA(t, "2026-11"), newRSA(t, "2026-12")
	js := testkit.NewJWKSServer(t, keySet(t, old))
	clk := &clock{now: time.Now()}
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL, Now: clk.Now, MinRefreshInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if js.Hits() != 1 {
		t.Fatalf("%d reads at start, want 1", js.Hits())
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, old.sign(t, good(clk.Now()))); err != nil {
		t.Fatal(err)
	}
	if js.Hits() != 1 {
		t.Fatalf("a known kid re-read the set (%d reads)", js.Hits())
	}
	// The issuer rotates: the new kid is read on first sight.
	js.Set(keySet(t, old, rotated))
	if c, err := v.Verify(ctx, rotated.sign(t, good(clk.Now()))); err != nil || c.Caller != "alice" {
		t.Fatalf("rotated key: %+v, %v", c, err)
	}
	if js.Hits() != 2 {
		t.Fatalf("%d reads after the rotation, want 2", js.Hits())
	}
	// Made-up kids within the interval: no more reads.
	for i := range 5 {
		if _, err := v.Verify(ctx, newEC(t, "made-up-"+string(rune('a'+i))).sign(t, good(clk.Now()))); err == nil {
			t.Fatal("a made-up kid was accepted")
		}
	}
	if js.Hits() != 2 {
		t.Fatalf("%d reads after unknown kids within the interval, want still 2", js.Hits())
	}
	// Another rotation, seen once the interval has passed.
	third := newRSA(t, "2027-01")
	js.Set(keySet(t, rotated, third))
	if _, err := v.Verify(ctx, third.sign(t, good(clk.Now()))); err == nil {
		t.Fatal("a kid was read within the interval")
	}
	clk.advance(time.Minute)
	if _, err := v.Verify(ctx, third.sign(t, good(clk.Now()))); err != nil {
		t.Fatalf("after the interval: %v", err)
	}
	// The retired key is gone with the set that held it.
	if _, err := v.Verify(ctx, old.sign(t, good(clk.Now()))); err == nil {
		t.Fatal("a key removed from the set still verifies")
	}
	// Stale keys are re-read before use; a failing source keeps them.
	n := js.Hits()
	js.Set([]byte("not json"))
	clk.advance(DefaultMaxKeyAge)
	if _, err := v.Verify(ctx, rotated.sign(t, good(clk.Now()))); err != nil {
		t.Fatalf("a failed re-read dropped the keys: %v", err)
	}
	if js.Hits() != n+1 {
		t.Fatalf("stale keys: %d reads, want %d", js.Hits(), n+1)
	}
}

func TestKeySourceDown(t *testing.T) {
	k := newRSA(t, "k")
	js := testkit.NewJWKSServer(t, []byte(`{"keys":`))
	clk := &clock{now: time.Now()}
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL, Now: clk.Now})
	if err != nil {
		t.Fatalf("an unreadable key set must not stop New: %v", err)
	}
	if _, err := v.Verify(context.Background(), k.sign(t, good(clk.Now()))); err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("no keys: %v", err)
	}
	js.Set(keySet(t, k))
	clk.advance(DefaultMinRefreshInterval)
	if _, err := v.Verify(context.Background(), k.sign(t, good(clk.Now()))); err != nil {
		t.Fatalf("once the source answers: %v", err)
	}
}

func TestRefusesSymmetricKeySet(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	os.WriteFile(file, []byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`), 0o600)
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if v.keys != nil {
		t.Fatal("a set with a symmetric key was taken")
	}
}

func TestMetadata(t *testing.T) {
	for _, tc := range []struct{ aud, want string }{
		{"http://127.0.0.1:8787/mcp", "http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp"},
		{"https://gw.example/", "https://gw.example/.well-known/oauth-protected-resource"},
		{"https://gw.example", "https://gw.example/.well-known/oauth-protected-resource"},
	} {
		if got, err := MetadataURL(tc.aud); err != nil || got != tc.want {
			t.Errorf("MetadataURL(%s) = %s, %v; want %s", tc.aud, got, err, tc.want)
		}
	}
	for _, bad := range []string{"gw.example/mcp", "ftp://gw.example/", "https://gw.example/mcp#x", "https://gw.example/mcp?a=b", "/mcp"} {
		if _, err := MetadataURL(bad); err == nil {
			t.Errorf("MetadataURL(%s) accepted", bad)
		}
	}
	k := newRSA(t, "k")
	js := testkit.NewJWKSServer(t, keySet(t, k))
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL, AuthorizationServers: []string{"https://as.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := v.MetadataPaths(); len(p) != 2 || p[1] != "/.well-known/oauth-protected-resource/mcp" {
		t.Errorf("paths %v", p)
	}
	rec := httptest.NewRecorder()
	v.MetadataHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathMetadata, nil))
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc["resource"] != testAudience {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if as, _ := doc["authorization_servers"].([]any); len(as) != 1 || as[0] != "https://as.test" {
		t.Errorf("authorization_servers %v", doc["authorization_servers"])
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []*Options{
		nil,
		{Audience: testAudience, KeySetFile: "x"},
		{Issuer: testIssuer, KeySetFile: "x"},
		{Issuer: testIssuer, Audience: testAudience},
		{Issuer: testIssuer, Audience: testAudience, KeySetFile: "x", KeySetURL: "http://127.0.0.1/"},
		{Issuer: testIssuer, Audience: "mcp", KeySetFile: "x"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// FuzzVerify: no input panics the verifier, and none is accepted without
// the key.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	file := filepath.Join(dir, "jwks.json")
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub, _ := jwk.Import(k.Public())
	pub.Set(jwk.KeyIDKey, "k")
	set := jwk.NewSet()
	set.AddKey(pub)
	b, _ := json.Marshal(set)
	os.WriteFile(file, b, 0o600)
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetFile: file})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJhIn0.c2ln")
	f.Add("a.b.c")
	f.Add("...")
	f.Add(`{"payload":"e30","signatures":[]}`)
	f.Fuzz(func(t *testing.T, tok string) {
		if c, err := v.Verify(context.Background(), tok); err == nil {
			t.Fatalf("accepted %q as %+v", tok, c)
		}
	})
}
