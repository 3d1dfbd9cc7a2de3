package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k1 := newKey(t)
	s, err := New(k1)
	if err != nil {
		t.Fatal(err)
	}
	pt := []byte("access-token-text")
	ad := []byte("server\x00caller")
	sealed, err := s.Seal(pt, ad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, pt) {
		t.Fatal("the sealed value holds the plaintext")
	}
	got, err := s.Open(sealed, ad)
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Another row's associated data does not open it.
	if _, err := s.Open(sealed, []byte("server\x00other")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("moved: %v, want ErrCorrupt", err)
	}
	// A flipped bit does not open.
	bad := append([]byte(nil), sealed...)
	bad[len(bad)-1] ^= 1
	if _, err := s.Open(bad, ad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("changed: %v, want ErrCorrupt", err)
	}
	if _, err := s.Open(sealed[:5], ad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v, want ErrCorrupt", err)
	}
	// Two seals of one value differ (fresh nonces).
	again, _ := s.Seal(pt, ad)
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals are equal")
	}
}

func TestRotation(t *testing.T) {
	oldK, newK := newKey(t), newKey(t)
	old, _ := New(oldK)
	sealed, _ := old.Seal([]byte("x"), nil)

	both, err := New(newK, oldK)
	if err != nil {
		t.Fatal(err)
	}
	if both.Current(sealed) {
		t.Fatal("a value sealed with the old key is current")
	}
	if got, err := both.Open(sealed, nil); err != nil || string(got) != "x" {
		t.Fatalf("the old key no longer opens: %q, %v", got, err)
	}
	resealed, _ := both.Seal([]byte("x"), nil)
	if !both.Current(resealed) {
		t.Fatal("a new seal is not current")
	}
	onlyNew, _ := New(newK)
	if _, err := onlyNew.Open(sealed, nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("dropped key: %v, want ErrUnknownKey", err)
	}
	if _, err := onlyNew.Open(resealed, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := New(newK, newK); err == nil {
		t.Fatal("the same key twice is accepted")
	}
}

func TestParseKey(t *testing.T) {
	k := newKey(t)
	for name, in := range map[string][]byte{
		"raw":       k,
		"hex":       []byte(hex.EncodeToString(k) + "\n"),
		"base64":    []byte(" " + base64.StdEncoding.EncodeToString(k) + "\n"),
		"base64url": []byte(base64.RawURLEncoding.EncodeToString(k)),
	} {
		got, err := ParseKey(in)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: %x, %v", name, got, err)
		}
	}
	for _, in := range []string{"", "short", hex.EncodeToString(k[:31]), base64.StdEncoding.EncodeToString(k[:16])} {
		if _, err := ParseKey([]byte(in)); !errors.Is(err, ErrBadKey) {
			t.Errorf("%q: %v, want ErrBadKey", in, err)
		}
	}
	nk, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseKey([]byte(nk)); err != nil {
		t.Fatalf("NewKey's key does not parse: %v", err)
	}
	if _, err := New([]byte("short")); !errors.Is(err, ErrBadKey) {
		t.Fatalf("New(short): %v", err)
	}
}
