package oauth

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// rawKey signs header and claims given as JSON text, byte for byte, so a
// test can write what a JWT library would never produce.
type rawKey struct {
	kid  string
	priv *rsa.PrivateKey
}

func newRawKey(t *testing.T, kid string) rawKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return rawKey{kid: kid, priv: k}
}

func (k rawKey) jwks(t *testing.T) []byte {
	t.Helper()
	pub, err := jwk.Import(k.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub.Set(jwk.KeyIDKey, k.kid)
	set := jwk.NewSet()
	set.AddKey(pub)
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (k rawKey) sign(t *testing.T, header, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	input := enc([]byte(header)) + "." + enc([]byte(claims))
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.priv, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + enc(sig)
}

// A JWT means one thing: duplicate members in its header or claims, and
// time claims that are not numbers, are refused, though the signature is
// good.
func TestVerifyRefusesAmbiguousJSON(t *testing.T) {
	k := newRawKey(t, "raw-1")
	js := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(k.jwks(t)) }))
	t.Cleanup(js.Close)
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js.URL})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	header := `{"alg":"RS256","kid":"raw-1","typ":"JWT"}`
	body := func(extra string) string {
		return fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":%d,"sub":"alice"%s}`, testIssuer, testAudience, exp, extra)
	}
	// The helper's tokens verify: the refusals below are for what they say.
	if c, err := v.Verify(context.Background(), k.sign(t, header, body(""))); err != nil || c.Caller != "alice" {
		t.Fatalf("a plain raw token: %+v, %v", c, err)
	}
	for _, tc := range []struct{ name, header, claims, want string }{
		{"two sub", header, body(`,"sub":"ops"`), "duplicate member"},
		{"two sub, escaped", header, body(`,"s\u0075b":"ops"`), "duplicate member"},
		{"two kid", `{"alg":"RS256","kid":"raw-1","kid":"other"}`, body(""), "duplicate member"},
		{"two alg", `{"alg":"RS256","alg":"none","kid":"raw-1"}`, body(""), "duplicate member"},
		{"two exp", header, body(`,"exp":1`), "duplicate member"},
		{"exp as a string", header, fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":"%d","sub":"alice"}`, testIssuer, testAudience, exp), `"exp" is not a number`},
		{"nbf as a string", header, body(`,"nbf":"0"`), `"nbf" is not a number`},
		{"iat as a string", header, body(`,"iat":"0"`), `"iat" is not a number`},
		{"exp as null", header, fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":null,"sub":"alice"}`, testIssuer, testAudience), `"exp" is not a number`},
		{"claims not an object", header, `["alice"]`, "not a JSON object"},
		{"lone surrogate in a claim", header, body(`,"name":"\ud800"`), "not strict JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), k.sign(t, tc.header, tc.claims))
			if err == nil {
				t.Fatalf("accepted as %+v", c)
			}
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want ErrInvalidToken saying %q", err, tc.want)
			}
		})
	}
}

// Caller names that display as another name are refused: format characters
// (bidi controls, zero-width), other separators, controls.
func TestVerifyRefusesMisleadingCallers(t *testing.T) {
	k := newRSA(t, "rsa-1")
	js := httptestJWKS(t, keySet(t, k))
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: js})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, sub := range []string{
		"al\u202eice", "ali\u200bce", "alice\u2066", "\u061calice", "alice\u200e", "al\u00adice",
		"alice\ufeff", "alice\u00a0", "a\u2028b", "alice\u0085", "alice\x7f", "al\ue000ice",
	} {
		c := good(now)
		c.sub = sub
		if got, err := v.Verify(context.Background(), k.sign(t, c)); err == nil || !errors.Is(err, ErrInvalidToken) {
			t.Errorf("caller %+q accepted as %+v (%v)", sub, got, err)
		}
	}
	for _, sub := range []string{"alice", "Ålice Ünïcode", "アリス", "alice@example.test", "ops:1"} {
		c := good(now)
		c.sub = sub
		if got, err := v.Verify(context.Background(), k.sign(t, c)); err != nil || got.Caller != sub {
			t.Errorf("caller %+q: %+v, %v", sub, got, err)
		}
	}
}

func httptestJWKS(t *testing.T, body []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A token whose kid is held verifies while another token's unknown kid has
// a read of a slow key set under way: the read runs outside the lock. Both
// orderings are proved by channels: the read is known to be in flight (the
// server has the request and has not answered), and the valid token's
// answer arrives before the server is let go.
func TestKnownKidDoesNotWaitForAKeySetRead(t *testing.T) {
	k, later := newRSA(t, "known"), newRSA(t, "published-later")
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	readEnded := make(chan struct{}) // closed when the verifier's second read has its answer
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		n := hits
		mu.Unlock()
		if n == 1 {
			w.Write(keySet(t, k)) // New's read
			return
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(keySet(t, k, later)) // the issuer published a key meanwhile
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // runs before srv.Close: no handler is left blocked

	// The verifier's side of the reads: readEnded closes when the second
	// one has come back (answered, or given up on), seen from the client.
	var rounds sync.Mutex
	round := 0
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		rounds.Lock()
		round++
		if round == 2 {
			close(readEnded)
		}
		rounds.Unlock()
		return resp, err
	})}
	clk := &clock{now: time.Now()}
	v, err := New(&Options{Issuer: testIssuer, Audience: testAudience, KeySetURL: srv.URL, Now: clk.Now, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 4)
	v.mu.Lock()
	v.onWait = func() { waiting <- struct{}{} }
	v.mu.Unlock()
	ctx := context.Background()
	unknown := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, newRSA(t, "made-up").sign(t, good(clk.Now())))
		unknown <- err
	}()
	await(t, entered, "the made-up kid's read to reach the server")

	valid := make(chan error, 1)
	go func() {
		c, err := v.Verify(ctx, k.sign(t, good(clk.Now())))
		if err == nil && c.Caller != "alice" {
			err = fmt.Errorf("caller %q", c.Caller)
		}
		valid <- err
	}()
	select {
	case err := <-valid:
		if err != nil {
			t.Fatalf("the known kid: %v", err)
		}
		select {
		case <-readEnded:
			t.Fatal("the known kid was answered only once the other token's key set read had ended")
		default: // answered while the read was held at the server
		}
	case <-time.After(30 * time.Second): // a safety net, not a bound: on success this is never near
		t.Fatal("a token with a known kid waited for another token's key set read")
	}
	// A token naming the kid being published, within the refresh interval,
	// joins the read under way (no second read) and verifies with its key.
	joined := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, later.sign(t, good(clk.Now())))
		joined <- err
	}()
	// Two waiters: the made-up kid's and this one's, in either order.
	await(t, waiting, "a token to wait for the read")
	await(t, waiting, "a second token to wait for the read")
	letGo()
	if err := <-unknown; err == nil || !strings.Contains(err.Error(), "is not in the issuer's key set") {
		t.Errorf("made-up kid: %v", err)
	}
	if err := <-joined; err != nil {
		t.Errorf("the kid the read brought: %v", err)
	}
	if f := v.Fetches(); f != 2 {
		t.Errorf("%d reads of the key set, want 2 (New's and the made-up kid's)", f)
	}
}

// await receives from ch. The timeout is a safety net so that a broken
// build fails instead of hanging; it is not a bound on anything measured.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("still waiting for %s", what)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
