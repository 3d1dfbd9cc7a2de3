// Package auththrottle slows the guessing of bearer tokens without letting
// a guesser lock out the holder of a real one.
//
// Failed attempts are counted by a key derived from the token presented:
// its first half, and at least its first [PrefixBytes] bytes (for a JWT,
// everything but its signature), hashed, never kept. Half, because tokens
// often share a public start ("bp_operator_" for every operator token
// backplane init makes): a fixed short prefix would let anyone block all
// of them at once. After [Failures] failures under one key within
// [Window], every attempt under that key is refused, unchecked, for a block
// that doubles with each further block of the key (one Window, then two,
// four, ... at most [MaxBlock]). Keying by the token and not by the
// client's address matters on one machine: every local process shares
// 127.0.0.1, so an address throttle lets any of them lock the operator out,
// while a key throttle blocks only the tokens that start like the ones
// guessed. The operator's correct token is refused only when someone
// failed with its first half, which means knowing it.
//
// What it does not do: slow a dictionary against a short token (each guess
// starts differently, and one right guess is one attempt): tokens must be
// long and random. The keys tracked are bounded ([MaxKeys]); when the table
// is full, the keys with the fewest failures go first, never a blocked one,
// so a flood of random tokens cannot clear the block of a targeted one.
package auththrottle

import (
	"crypto/sha256"
	"strings"
	"sync"
	"time"
)

// Defaults.
const (
	PrefixBytes = 16
	Failures    = 10
	Window      = time.Minute
	MaxBlock    = time.Hour
	MaxKeys     = 4096
)

type entry struct {
	start   time.Time // of the counting window
	n       int       // failures in it
	until   time.Time // blocked until
	strikes int       // blocks so far, for the doubling
}

// Throttle counts failures by token key. The zero value is not usable: use
// New. It is safe for concurrent use.
type Throttle struct {
	mu  sync.Mutex
	m   map[[32]byte]*entry
	now func() time.Time
}

// New returns a Throttle on the clock now (time.Now when nil).
func New(now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{m: map[[32]byte]*entry{}, now: now}
}

// key is the hash of the part of token failures are counted by.
func key(token string) [32]byte {
	p := token
	if i := strings.LastIndexByte(token, '.'); strings.Count(token, ".") == 2 && i > 0 {
		// A JWT: every JWT starts with the same base64 of {"alg":...; its
		// header and claims are what tell one from another.
		p = token[:i]
	} else if n := max(PrefixBytes, (len(p)+1)/2); len(p) > n {
		p = p[:n]
	}
	return sha256.Sum256([]byte(p))
}

// Blocked reports whether attempts with token are refused now, and for how
// much longer.
func (t *Throttle) Blocked(token string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key(token)]
	if !ok {
		return 0, false
	}
	if left := e.until.Sub(t.now()); left > 0 {
		return left, true
	}
	return 0, false
}

// Fail records a failed attempt with token; it reports whether the key is
// now blocked.
func (t *Throttle) Fail(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	k := key(token)
	e, ok := t.m[k]
	if !ok {
		if len(t.m) >= MaxKeys && !t.evict(now) {
			return false // full of blocked keys: this one is not tracked
		}
		e = &entry{start: now}
		t.m[k] = e
	}
	if now.Sub(e.start) >= Window {
		e.start, e.n = now, 0
	}
	e.n++
	if e.n >= Failures {
		block := Window << min(e.strikes, 10)
		e.until, e.start, e.n = now.Add(min(block, MaxBlock)), now, 0
		e.strikes++
		return true
	}
	return false
}

// evict makes room for one key: first the ones whose window ended and that
// are not blocked, else the unblocked one with the fewest failures.
func (t *Throttle) evict(now time.Time) bool {
	var (
		victim [32]byte
		least  = -1
	)
	for k, e := range t.m {
		if e.until.After(now) {
			continue
		}
		if now.Sub(e.start) >= Window && now.Sub(e.until) >= MaxBlock {
			delete(t.m, k)
			continue
		}
		if least < 0 || e.n < least {
			victim, least = k, e.n
		}
	}
	if len(t.m) < MaxKeys {
		return true
	}
	if least < 0 {
		return false
	}
	delete(t.m, victim)
	return true
}
