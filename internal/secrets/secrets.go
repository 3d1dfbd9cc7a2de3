// Package secrets seals what the gateway keeps but must not be readable
// from the store alone: upstream OAuth tokens and refresh tokens.
//
// A Sealer holds one or more 32-byte keys. The first seals; every one
// opens, so keys can be rotated without a window in which some replicas
// cannot read what others wrote: add the new key in front of the old one
// on every replica, re-seal every row (backplane secrets reseal), then drop
// the old key. Sealing is AES-256-GCM (the standard library's) with a fresh
// random 96-bit nonce per seal, and associated data the caller gives (the
// row's key: a sealed value moved to another row does not open). A sealed
// value names its key by a short fingerprint (the first 8 bytes of the
// SHA-256 of a fixed label and the key), never the key.
//
// The format, version 1: 0x01 | fingerprint (8) | nonce (12) | ciphertext
// and tag.
package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a key, in bytes.
const KeySize = 32

const (
	version   = 1
	fpSize    = 8
	nonceSize = 12
	header    = 1 + fpSize + nonceSize
)

var (
	// ErrUnknownKey is Open's answer for a value sealed with a key the
	// Sealer does not hold (a key dropped before every row was re-sealed).
	ErrUnknownKey = errors.New("sealed with a key that is not configured")
	// ErrCorrupt is Open's answer for a value that does not open: changed,
	// truncated, or moved from another row (other associated data).
	ErrCorrupt = errors.New("sealed value does not open (changed, or moved from another row)")
	// ErrBadKey is ParseKey's answer for what is not a key.
	ErrBadKey = errors.New("not a 32-byte key (raw, 64 hex digits or base64)")
)

type key struct {
	fp   [fpSize]byte
	aead cipher.AEAD
}

// Sealer seals with its first key and opens with any. It is safe for
// concurrent use.
type Sealer struct {
	keys []key
}

// New makes a Sealer from keys, each KeySize bytes; the first seals.
func New(keys ...[]byte) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("secrets: no key")
	}
	s := &Sealer{}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("secrets: key %d: %w", i+1, ErrBadKey)
		}
		blk, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("secrets: key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(blk)
		if err != nil {
			return nil, fmt.Errorf("secrets: key %d: %w", i+1, err)
		}
		fp := Fingerprint(k)
		for _, o := range s.keys {
			if o.fp == fp {
				return nil, fmt.Errorf("secrets: key %d is given twice", i+1)
			}
		}
		s.keys = append(s.keys, key{fp: fp, aead: aead})
	}
	return s, nil
}

// Fingerprint names a key without revealing it.
func Fingerprint(k []byte) [fpSize]byte {
	h := sha256.New()
	h.Write([]byte("backplane secrets key fingerprint v1\x00"))
	h.Write(k)
	var fp [fpSize]byte
	copy(fp[:], h.Sum(nil))
	return fp
}

// Seal encrypts plaintext under the first key, bound to ad.
func (s *Sealer) Seal(plaintext, ad []byte) ([]byte, error) {
	k := s.keys[0]
	out := make([]byte, header, header+len(plaintext)+k.aead.Overhead())
	out[0] = version
	copy(out[1:], k.fp[:])
	if _, err := rand.Read(out[1+fpSize : header]); err != nil {
		return nil, fmt.Errorf("secrets: nonce: %w", err)
	}
	return k.aead.Seal(out, out[1+fpSize:header], plaintext, ad), nil
}

// Open decrypts what Seal made with ad. ErrUnknownKey, ErrCorrupt.
func (s *Sealer) Open(sealed, ad []byte) ([]byte, error) {
	if len(sealed) < header || sealed[0] != version {
		return nil, ErrCorrupt
	}
	for _, k := range s.keys {
		if !bytes.Equal(k.fp[:], sealed[1:1+fpSize]) {
			continue
		}
		pt, err := k.aead.Open(nil, sealed[1+fpSize:header], sealed[header:], ad)
		if err != nil {
			return nil, ErrCorrupt
		}
		return pt, nil
	}
	return nil, ErrUnknownKey
}

// Current reports whether sealed was sealed with the first key (a value
// sealed with another is what a re-seal rewrites).
func (s *Sealer) Current(sealed []byte) bool {
	return len(sealed) >= header && bytes.Equal(s.keys[0].fp[:], sealed[1:1+fpSize])
}

// ParseKey reads a key as a file or a variable holds it: exactly 32 raw
// bytes, or (surrounding white space trimmed) 64 hex digits or the
// standard or URL base64 of 32 bytes. The key is never in an error.
func ParseKey(b []byte) ([]byte, error) {
	if len(b) == KeySize && !isText(b) {
		return append([]byte(nil), b...), nil
	}
	t := strings.TrimSpace(string(b))
	if len(t) == 2*KeySize {
		if k, err := hex.DecodeString(t); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(t); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	if len(b) == KeySize {
		return append([]byte(nil), b...), nil
	}
	return nil, ErrBadKey
}

// isText reports whether b looks like an encoded key rather than raw bytes.
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// NewKey returns a fresh random key, base64 encoded (what ParseKey reads).
func NewKey() (string, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(k), nil
}
