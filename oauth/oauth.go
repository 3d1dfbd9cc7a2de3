// Package oauth makes Backplane an OAuth 2.1 resource server as the MCP
// authorization specification describes it: it verifies JWT access tokens
// and describes the protected resource (RFC 9728).
//
// What it promises:
//
//   - [Verifier.Verify] accepts a token only when it is a compact JWS
//     signed with an asymmetric algorithm (RS*, PS*, ES*, EdDSA; never
//     "none" nor HMAC) by a key of the JSON Web Key Set whose kid the
//     token names, with the configured issuer ("iss"), the resource among
//     its audiences ("aud", RFC 8707), an expiry ("exp") not past and a
//     not-before ("nbf") reached, both within [Options.Leeway], and a
//     non-empty string in the caller claim. Every refusal wraps
//     [ErrInvalidToken]. The JOSE work is github.com/lestrrat-go/jwx/v3's.
//   - A token has one meaning: its header and claims are strict JSON
//     objects (package jsonstrict: a duplicate member name, such as two
//     "sub", is refused, never resolved to the last one), and "exp",
//     "nbf" and "iat", when present, are JSON numbers (a string is refused,
//     not read as a date).
//   - The caller a token names is printable text: control characters,
//     format characters (Unicode category Cf: bidi controls, zero-width
//     characters), separators other than the ASCII space, private-use and
//     unassigned code points are refused, so a caller name cannot display
//     as another one in a log, a console or a policy file.
//   - The key set comes from a file or a URL, read at [New] and again
//     when older than [Options.MaxKeyAge]. A token naming a kid the set
//     does not hold triggers a re-read at once, at most one such re-read
//     per [Options.MinRefreshInterval] (a flood of made-up kids costs the
//     key source at most one request per interval). A failed re-read keeps
//     the keys held. Reads happen outside the verifier's lock and one at a
//     time (concurrent needs share one read): a token whose kid is held in
//     fresh keys never waits for a read another token started.
//   - [Verifier.MetadataHandler] serves the protected resource metadata
//     document; [Verifier.MetadataURL] is where RFC 9728 puts it for the
//     resource, for the resource_metadata parameter of WWW-Authenticate.
package oauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// ErrInvalidToken is wrapped by every refusal of a token. It wraps the MCP
// SDK's auth.ErrInvalidToken, so that the SDK's middleware answers 401.
var ErrInvalidToken = fmt.Errorf("oauth: invalid access token: %w", auth.ErrInvalidToken)

// ErrKeySource is wrapped by a failure to read or parse the key set.
var ErrKeySource = errors.New("oauth: the JSON Web Key Set cannot be read")

// Defaults.
const (
	DefaultCallerClaim        = "sub"
	DefaultLeeway             = 30 * time.Second
	DefaultMaxKeyAge          = 15 * time.Minute
	DefaultMinRefreshInterval = 30 * time.Second
	// MaxKeySetBytes bounds a key set document.
	MaxKeySetBytes = 1 << 20
	// MaxTokenBytes bounds an access token: larger ones are refused unread.
	MaxTokenBytes = 16 << 10
	// MaxCallerLen bounds the caller a token names.
	MaxCallerLen = 256
	// PathMetadata is RFC 9728's well-known path.
	PathMetadata = "/.well-known/oauth-protected-resource"
)

// Options configure a Verifier. Issuer, Audience and one of KeySetFile and
// KeySetURL are required.
type Options struct {
	// Issuer is the authorization server's issuer identifier: a token's
	// "iss" must equal it.
	Issuer string
	// Audience is the resource identifier of this server (its public MCP
	// URL, RFC 8707): a token's "aud" must hold it. It is also the
	// "resource" of the metadata document.
	Audience string
	// KeySetFile is a file holding the issuer's JSON Web Key Set.
	KeySetFile string
	// KeySetURL is where the issuer publishes its JSON Web Key Set.
	KeySetURL string
	// CallerClaim names the claim whose string value is the caller.
	// Default "sub".
	CallerClaim string
	// AuthorizationServers are listed in the metadata document. Default:
	// the issuer.
	AuthorizationServers []string
	// Leeway is the clock skew tolerated on exp and nbf. Default 30s;
	// negative: none.
	Leeway time.Duration
	// MaxKeyAge: keys read longer ago than this are re-read before use.
	// Default 15m.
	MaxKeyAge time.Duration
	// MinRefreshInterval bounds the re-reads an unknown kid triggers.
	// Default 30s.
	MinRefreshInterval time.Duration
	// HTTPClient fetches KeySetURL. Default: a client with a 10s timeout.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives key set refreshes and their failures. Default:
	// discard.
	Logger *slog.Logger
}

// Verifier verifies access tokens. Create it with New; it is safe for
// concurrent use.
type Verifier struct {
	o        Options
	metadata *oauthex.ProtectedResourceMetadata

	// mu guards the fields below; it is never held while the key source is
	// read (a slow JWKS would hold back tokens whose keys are at hand).
	mu          sync.Mutex
	keys        jwk.Set
	fetchedAt   time.Time // last successful read
	attemptedAt time.Time // last read started, successful or not
	kidRefresh  time.Time // last read an unknown kid triggered
	fetches     int       // reads of the key source, for tests
	inflight    *flight   // the read under way, if any: later needs join it
	onWait      func()    // tests: called when a token starts waiting for a read
}

// flight is one read of the key source; done is closed when it ended.
type flight struct {
	done chan struct{}
}

// allowedAlgs are the signature algorithms accepted: asymmetric only.
var allowedAlgs = map[string]bool{
	"RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true,
	"ES256": true, "ES384": true, "ES512": true,
	"EdDSA": true,
}

// New returns a verifier and reads its key set once. A key set that
// cannot be read is not fatal (the issuer may be briefly down): New logs
// it and every token is refused until a read succeeds. Bad options are an
// error.
func New(opts *Options) (*Verifier, error) {
	if opts == nil {
		return nil, errors.New("oauth: options are required")
	}
	o := *opts
	if o.Issuer == "" || o.Audience == "" {
		return nil, errors.New("oauth: an issuer and an audience are required")
	}
	if (o.KeySetFile == "") == (o.KeySetURL == "") {
		return nil, errors.New("oauth: exactly one of a key set file and a key set URL is required")
	}
	if _, err := MetadataURL(o.Audience); err != nil {
		return nil, err
	}
	if o.CallerClaim == "" {
		o.CallerClaim = DefaultCallerClaim
	}
	switch {
	case o.Leeway == 0:
		o.Leeway = DefaultLeeway
	case o.Leeway < 0:
		o.Leeway = 0
	}
	if o.MaxKeyAge <= 0 {
		o.MaxKeyAge = DefaultMaxKeyAge
	}
	if o.MinRefreshInterval <= 0 {
		o.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	servers := o.AuthorizationServers
	if len(servers) == 0 {
		servers = []string{o.Issuer}
	}
	v := &Verifier{o: o, metadata: &oauthex.ProtectedResourceMetadata{
		Resource:               o.Audience,
		AuthorizationServers:   servers,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Backplane",
	}}
	v.mu.Lock()
	f := v.startLocked(context.Background())
	v.mu.Unlock()
	<-f.done // the read logs its own failure
	return v, nil
}

// Claims is what a verified token says.
type Claims struct {
	// Caller is the value of the caller claim.
	Caller string
	// Expiry is the token's exp.
	Expiry time.Time
	// Scopes are the space-separated values of the "scope" claim, if any.
	Scopes []string
}

// Verify verifies token and returns its claims, or an error wrapping
// ErrInvalidToken.
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, MaxTokenBytes)
	}
	if err := checkStrict(token); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil {
		return nil, fmt.Errorf("%w: not a signed JWT", ErrInvalidToken)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return nil, fmt.Errorf("%w: %d signatures, want 1", ErrInvalidToken, len(sigs))
	}
	h := sigs[0].ProtectedHeaders()
	alg, _ := h.Algorithm()
	if !allowedAlgs[alg.String()] {
		return nil, fmt.Errorf("%w: signature algorithm %q is not accepted (asymmetric algorithms only)", ErrInvalidToken, alg.String())
	}
	kid, _ := h.KeyID()
	if kid == "" {
		return nil, fmt.Errorf("%w: the token names no key (kid)", ErrInvalidToken)
	}
	keys, err := v.keysFor(ctx, kid)
	if err != nil {
		return nil, err
	}
	key, ok := keys.LookupKeyID(kid)
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not in the issuer's key set", ErrInvalidToken, kid)
	}
	// The key's own alg, when it has one, must be the token's: a key is
	// used for one algorithm (RFC 7517 4.4).
	if ka, ok := key.Algorithm(); ok && ka.String() != alg.String() {
		return nil, fmt.Errorf("%w: key %q is for %s, the token is signed with %s", ErrInvalidToken, kid, ka, alg)
	}
	sa, ok := jwa.LookupSignatureAlgorithm(alg.String())
	if !ok {
		return nil, fmt.Errorf("%w: unknown signature algorithm %q", ErrInvalidToken, alg.String())
	}
	tok, err := jwt.Parse([]byte(token),
		jwt.WithKey(sa, key),
		jwt.WithValidate(true),
		jwt.WithIssuer(v.o.Issuer),
		jwt.WithAudience(v.o.Audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithAcceptableSkew(v.o.Leeway),
		jwt.WithClock(jwt.ClockFunc(v.o.Now)),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, describe(err))
	}
	var caller string
	if err := tok.Get(v.o.CallerClaim, &caller); err != nil {
		return nil, fmt.Errorf("%w: no string claim %q names the caller", ErrInvalidToken, v.o.CallerClaim)
	}
	if err := checkCaller(caller); err != nil {
		return nil, fmt.Errorf("%w: claim %q: %v", ErrInvalidToken, v.o.CallerClaim, err)
	}
	c := &Claims{Caller: caller}
	c.Expiry, _ = tok.Expiration()
	var scope string
	if tok.Get("scope", &scope) == nil {
		c.Scopes = strings.Fields(scope)
	}
	return c, nil
}

// describe says which check refused a token, without echoing it.
func describe(err error) string {
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		return "expired (exp)"
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return "not valid yet (nbf)"
	case errors.Is(err, jwt.InvalidIssuerError()):
		return "wrong issuer (iss)"
	case errors.Is(err, jwt.InvalidAudienceError()):
		return "not for this resource (aud)"
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return "no expiry (exp)"
	case errors.Is(err, jwt.InvalidIssuedAtError()):
		return "issued in the future (iat)"
	case errors.Is(err, jws.VerifyError()), errors.Is(err, jws.VerificationError()):
		return "bad signature"
	}
	return err.Error()
}

// checkStrict refuses a compact JWS whose protected header or payload is
// not one strict JSON object, or whose time claims are not numbers. jwx
// reads duplicate members as the last one and accepts a string "exp"; a
// token must mean one thing to every reader (the issuer, a log, this
// verifier), and a signature over two meanings proves neither.
func checkStrict(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a signed JWT")
	}
	var objs [2]map[string]any
	for i, what := range []string{"header", "claims"} {
		b, err := base64.RawURLEncoding.Strict().DecodeString(parts[i])
		if err != nil {
			return errors.New("not a signed JWT")
		}
		v, err := jsonstrict.Decode(b, &jsonstrict.Options{MaxBytes: MaxTokenBytes, MaxDepth: 32})
		if err != nil {
			if errors.Is(err, jsonstrict.ErrDuplicateName) {
				return fmt.Errorf("the %s has a duplicate member", what)
			}
			return fmt.Errorf("the %s is not strict JSON: %v", what, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("the %s is not a JSON object", what)
		}
		objs[i] = obj
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		if x, ok := objs[1][name]; ok {
			if _, isNum := x.(jsonstrict.Number); !isNum {
				return fmt.Errorf("claim %q is not a number", name)
			}
		}
	}
	return nil
}

// checkCaller refuses a caller name that could mislead a log or a policy:
// empty, too long, or holding anything but printable characters. Printable
// is unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
// ASCII space; so controls (Cc), format characters (Cf: bidi overrides and
// isolates, zero-width joiners and spaces), other spaces and separators,
// private-use and unassigned code points are refused, and so is U+FFFD,
// which stands for bytes that were not UTF-8.
func checkCaller(c string) error {
	if c == "" {
		return errors.New("empty")
	}
	if len(c) > MaxCallerLen {
		return fmt.Errorf("longer than %d bytes", MaxCallerLen)
	}
	if !utf8.ValidString(c) {
		return errors.New("not UTF-8")
	}
	for _, r := range c {
		switch {
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			return errors.New("holds a control character")
		case unicode.Is(unicode.Cf, r):
			return fmt.Errorf("holds the format character U+%04X", r)
		case !unicode.IsPrint(r):
			return fmt.Errorf("holds the non-printing character U+%04X", r)
		}
	}
	return nil
}

// keysFor returns the key set to verify a token naming kid with,
// re-reading it when stale, or when kid is unknown and no unknown kid
// triggered a read within MinRefreshInterval. A kid held in fresh keys is
// answered at once, whatever read is under way.
func (v *Verifier) keysFor(ctx context.Context, kid string) (jwk.Set, error) {
	v.mu.Lock()
	now := v.o.Now()
	stale := v.keys == nil || now.Sub(v.fetchedAt) >= v.o.MaxKeyAge
	need := stale && now.Sub(v.attemptedAt) >= v.o.MinRefreshInterval
	if !stale {
		if _, ok := v.keys.LookupKeyID(kid); !ok && now.Sub(v.kidRefresh) >= v.o.MinRefreshInterval {
			// Claimed before the read starts, so that a flood of unknown
			// kids while it runs starts no other.
			v.kidRefresh = now
			need = true
			v.o.Logger.Info("a token names a key not in the key set: re-reading it", "kid", kid)
		}
	}
	f := v.inflight
	if need && f == nil {
		f = v.startLocked(ctx)
	}
	known := false
	if v.keys != nil {
		_, known = v.keys.LookupKeyID(kid)
	}
	// Without a read of its own to wait for, a token still waits for the
	// read under way when its keys are stale or its kid unknown (the read
	// may bring it); a known kid in fresh keys never does.
	wait := need || (f != nil && (stale || !known))
	if !wait {
		keys := v.keys
		v.mu.Unlock()
		if keys == nil {
			return nil, fmt.Errorf("%w: the issuer's key set could not be read", ErrInvalidToken)
		}
		return keys, nil
	}
	onWait := v.onWait
	v.mu.Unlock()
	if onWait != nil {
		onWait()
	}
	// Stale keys, or a kid that may have just been published: wait for the
	// read (the one started here, or the one under way), or for the caller
	// to give up.
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: gave up waiting for the issuer's key set: %v", ErrInvalidToken, ctx.Err())
	}
	v.mu.Lock()
	keys := v.keys
	v.mu.Unlock()
	if keys == nil {
		return nil, fmt.Errorf("%w: the issuer's key set could not be read", ErrInvalidToken)
	}
	return keys, nil
}

// startLocked starts a read of the key set; v.mu is held. The read runs
// without the lock and without the caller's cancellation (other tokens
// may be waiting for it; read bounds it by its own timeout), and installs
// what it read under the lock.
func (v *Verifier) startLocked(ctx context.Context) *flight {
	f := &flight{done: make(chan struct{})}
	v.inflight = f
	v.attemptedAt = v.o.Now()
	v.fetches++
	started := v.attemptedAt
	rctx := context.WithoutCancel(ctx)
	go func() {
		defer close(f.done)
		set, err := v.load(rctx)
		v.mu.Lock()
		defer v.mu.Unlock()
		v.inflight = nil
		switch {
		case err != nil && v.keys == nil:
			v.o.Logger.Warn("the JSON Web Key Set cannot be read: JWT access tokens are refused until it can", "error", err)
			return
		case err != nil:
			v.o.Logger.Warn("re-reading the JSON Web Key Set failed: the keys held are kept", "error", err)
			return
		}
		v.keys = set
		v.fetchedAt = started
	}()
	return f
}

// load reads and parses the key set, holding no lock.
func (v *Verifier) load(ctx context.Context) (jwk.Set, error) {
	b, err := v.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	set, err := jwk.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	// Only public keys verify: a set holding a private or symmetric key
	// is a mistake on the issuer's side, and its keys are not used.
	for i := range set.Len() {
		k, _ := set.Key(i)
		if k.KeyType() == jwa.OctetSeq() {
			return nil, fmt.Errorf("%w: it holds a symmetric key: only public keys are accepted", ErrKeySource)
		}
	}
	pub, err := jwk.PublicSetOf(set)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	return pub, nil
}

func (v *Verifier) read(ctx context.Context) ([]byte, error) {
	if v.o.KeySetFile != "" {
		f, err := os.Open(v.o.KeySetFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readCapped(f)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.o.KeySetURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := v.o.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", v.o.KeySetURL, resp.Status)
	}
	return readCapped(resp.Body)
}

func readCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxKeySetBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxKeySetBytes)
	}
	return b, nil
}

// Fetches returns how many times the key source was read.
func (v *Verifier) Fetches() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fetches
}

// Leeway returns the clock skew tolerated on exp and nbf.
func (v *Verifier) Leeway() time.Duration { return v.o.Leeway }

// Audience returns the resource identifier.
func (v *Verifier) Audience() string { return v.o.Audience }

// MetadataURL returns where RFC 9728 (section 3.1) puts the metadata of
// resource: the well-known path between its host and its path.
func MetadataURL(resource string) (string, error) {
	u, err := url.Parse(resource)
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("oauth: the audience %q is not an absolute http(s) URL", resource)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("oauth: the audience %q has a query or a fragment (RFC 8707 forbids a fragment; RFC 9728 a query)", resource)
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + PathMetadata + path, nil
}

// MetadataURL is [MetadataURL] of the verifier's audience.
func (v *Verifier) MetadataURL() string {
	s, _ := MetadataURL(v.o.Audience) // New checked it
	return s
}

// MetadataPaths are the paths the metadata document is served at on this
// server: RFC 9728's for the audience, and the bare well-known path, which
// MCP clients try second.
func (v *Verifier) MetadataPaths() []string {
	u, _ := url.Parse(v.MetadataURL())
	paths := []string{PathMetadata}
	if p := u.EscapedPath(); p != PathMetadata {
		paths = append(paths, p)
	}
	return paths
}

// MetadataHandler serves the protected resource metadata document (the
// MCP SDK's handler: GET, with CORS for browser clients).
func (v *Verifier) MetadataHandler() http.Handler {
	return auth.ProtectedResourceMetadataHandler(v.metadata)
}
