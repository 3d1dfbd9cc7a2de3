// Package opauth is the one authenticator of operators' bearer tokens:
// the server's operator endpoints (/metrics), the web console and the
// CLI's operator verbs all tell an operator's token from a caller's (and
// from no one's) through it.
//
// What it promises: a token is looked up by its SHA-256, so the time taken
// does not depend on how much of a configured token it shares; the empty
// token is no one's; a token in both tables is an operator's.
//
// Tokens also keep the one count of wrong tokens ([Tokens.Blocked],
// [Tokens.Fail], over internal/auththrottle): the server's endpoints and
// the console handed the same Tokens (assemble does) share it, so that a
// guesser gets no more tries by spreading them over /mcp, /metrics and
// the console's login.
package opauth

import (
	"crypto/sha256"
	"time"

	"github.com/agentbackplane/backplane/internal/auththrottle"
)

// Who a token belongs to.
type Who int

const (
	Nobody   Who = iota // no configured token
	Caller              // a caller's token (serve.tokens): not an operator
	Operator            // an operator's token
)

// Tokens maps operators' and callers' tokens to who holds them. The zero
// Tokens knows no token. It is safe for concurrent use (read only).
type Tokens struct {
	operators map[[32]byte]string
	callers   map[[32]byte]string
	throttle  *auththrottle.Throttle
}

// Options configure [New]. A nil *Options means the defaults.
type Options struct {
	// Now is the clock of the count of wrong tokens. Default time.Now.
	Now func() time.Time
}

// New returns the tokens of operators (token to operator name) and callers
// (token to caller name). Empty tokens are left out.
func New(operators, callers map[string]string, opts *Options) *Tokens {
	var now func() time.Time
	if opts != nil {
		now = opts.Now
	}
	t := &Tokens{operators: map[[32]byte]string{}, callers: map[[32]byte]string{}, throttle: auththrottle.New(now)}
	for tok, name := range operators {
		if tok != "" {
			t.operators[sha256.Sum256([]byte(tok))] = name
		}
	}
	for tok, name := range callers {
		if tok != "" {
			t.callers[sha256.Sum256([]byte(tok))] = name
		}
	}
	return t
}

// Check says who token belongs to and, for an operator or a caller, the
// name.
func (t *Tokens) Check(token string) (Who, string) {
	if t == nil || token == "" {
		return Nobody, ""
	}
	h := sha256.Sum256([]byte(token))
	if name, ok := t.operators[h]; ok {
		return Operator, name
	}
	if name, ok := t.callers[h]; ok {
		return Caller, name
	}
	return Nobody, ""
}

// Operator returns the operator whose token this is.
func (t *Tokens) Operator(token string) (string, bool) {
	who, name := t.Check(token)
	return name, who == Operator
}

// IsCaller reports whether token is a caller's and no operator's.
func (t *Tokens) IsCaller(token string) bool {
	who, _ := t.Check(token)
	return who == Caller
}

// Operators counts the operators' tokens.
func (t *Tokens) Operators() int {
	if t == nil {
		return 0
	}
	return len(t.operators)
}

// Blocked reports whether token starts like tokens that failed too often
// (see internal/auththrottle), and for how much longer it is refused: such
// a token is refused unchecked, wherever it is presented.
func (t *Tokens) Blocked(token string) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	return t.throttle.Blocked(token)
}

// Fail counts a failed attempt with token (a wrong operator's token, or a
// bearer token /mcp could not authenticate); it reports whether tokens
// that start like it are now blocked.
func (t *Tokens) Fail(token string) bool {
	if t == nil {
		return false
	}
	return t.throttle.Fail(token)
}
