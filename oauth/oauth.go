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
//   - The key set comes from a file or a URL, read at [New] and again
//     when older than [Options.MaxKeyAge]. A token naming a kid the set
//     does not hold triggers a re-read at once, at most one such re-read
//     per [Options.MinRefreshInterval] (a flood of made-up kids costs the
//     key source at most one request per interval). A failed re-read keeps
//     the keys held.
//   - [Verifier.MetadataHandler] serves the protected resource metadata
//     document; [Verifier.MetadataURL] is where RFC 9728 puts it for the
//     resource, for the resource_metadata parameter of WWW-Authenticate.
package oauth

import (
	"context"
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

	mu          sync.Mutex // held across a refresh: one at a time
	keys        jwk.Set
	fetchedAt   time.Time // last successful read
	attemptedAt time.Time // last read, successful or not
	kidRefresh  time.Time // last read an unknown kid triggered
	fetches     int       // reads of the key source, for tests
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
	if err := v.refreshLocked(context.Background()); err != nil {
		o.Logger.Warn("the JSON Web Key Set cannot be read: JWT access tokens are refused until it can", "error", err)
	}
	v.mu.Unlock()
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

// checkCaller refuses a caller name that could mislead a log or a policy:
// empty, too long, or holding control characters.
func checkCaller(c string) error {
	if c == "" {
		return errors.New("empty")
	}
	if len(c) > MaxCallerLen {
		return fmt.Errorf("longer than %d bytes", MaxCallerLen)
	}
	for _, r := range c {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return errors.New("holds a control character")
		}
	}
	return nil
}

// keysFor returns the key set to verify a token naming kid with,
// re-reading it when stale, or when kid is unknown and no unknown kid
// triggered a read within MinRefreshInterval.
func (v *Verifier) keysFor(ctx context.Context, kid string) (jwk.Set, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.o.Now()
	stale := v.keys == nil || now.Sub(v.fetchedAt) >= v.o.MaxKeyAge
	if stale && now.Sub(v.attemptedAt) >= v.o.MinRefreshInterval {
		if err := v.refreshLocked(ctx); err != nil {
			v.o.Logger.Warn("re-reading the JSON Web Key Set failed: the keys held are kept", "error", err)
		}
	}
	if v.keys != nil {
		if _, ok := v.keys.LookupKeyID(kid); !ok && now.Sub(v.kidRefresh) >= v.o.MinRefreshInterval {
			v.kidRefresh = now
			v.o.Logger.Info("a token names a key not in the key set: re-reading it", "kid", kid)
			if err := v.refreshLocked(ctx); err != nil {
				v.o.Logger.Warn("re-reading the JSON Web Key Set failed: the keys held are kept", "error", err)
			}
		}
	}
	if v.keys == nil {
		return nil, fmt.Errorf("%w: the issuer's key set could not be read", ErrInvalidToken)
	}
	return v.keys, nil
}

// refreshLocked reads the key set; v.mu is held.
func (v *Verifier) refreshLocked(ctx context.Context) error {
	v.attemptedAt = v.o.Now()
	v.fetches++
	b, err := v.read(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	set, err := jwk.Parse(b)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	// Only public keys verify: a set holding a private or symmetric key
	// is a mistake on the issuer's side, and its keys are not used.
	for i := range set.Len() {
		k, _ := set.Key(i)
		if k.KeyType() == jwa.OctetSeq() {
			return fmt.Errorf("%w: it holds a symmetric key: only public keys are accepted", ErrKeySource)
		}
	}
	pub, err := jwk.PublicSetOf(set)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeySource, err)
	}
	v.keys = pub
	v.fetchedAt = v.attemptedAt
	return nil
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
