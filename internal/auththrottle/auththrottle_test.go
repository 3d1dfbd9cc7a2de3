package auththrottle

import (
	"fmt"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// Failures under one key block it, and only it; blocks double; a flood of
// other tokens neither blocks the real one nor clears a block.
func TestThrottle(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	th := New(c.now)
	const real = "bp_operator_Rz7kQ2vX9mLp3sT8wYbNx4"
	// Tokens that share only a public start block nothing.
	for i := range Failures * 2 {
		th.Fail(fmt.Sprintf("bp_operator_%022d", i))
	}
	if _, b := th.Blocked(real); b {
		t.Fatal("the operator's token is blocked by guesses that share only its public start")
	}
	for i := range Failures * 3 {
		th.Fail(fmt.Sprintf("guess-%04d-xxxxxxxx", i)) // each a new key
	}
	if _, b := th.Blocked(real); b {
		t.Fatal("the operator's token is blocked by guesses that start otherwise")
	}
	// Guesses that start like the real token (someone knows its first half).
	for i := range Failures {
		blocked := th.Fail(alike(real, i))
		if blocked != (i == Failures-1) {
			t.Fatalf("failure %d: blocked=%v", i+1, blocked)
		}
	}
	if left, b := th.Blocked(real); !b || left != Window {
		t.Fatalf("after %d failures: blocked=%v for %v, want %v", Failures, b, left, Window)
	}
	if _, b := th.Blocked("another-token-entirely"); b {
		t.Error("a token of another key is blocked")
	}
	// A flood of new keys past the table's size does not clear the block.
	for i := range MaxKeys * 2 {
		th.Fail(fmt.Sprintf("flood-%06d", i))
	}
	if _, b := th.Blocked(real); !b {
		t.Error("a flood of other tokens cleared the block")
	}
	if len(th.m) > MaxKeys {
		t.Errorf("%d keys tracked, more than %d", len(th.m), MaxKeys)
	}
	// The block ends; the next one is twice as long.
	c.t = c.t.Add(Window)
	if _, b := th.Blocked(real); b {
		t.Error("still blocked after its window")
	}
	for range Failures {
		th.Fail(alike(real, 999))
	}
	if left, b := th.Blocked(real); !b || left != 2*Window {
		t.Errorf("second block: %v %v, want %v", b, left, 2*Window)
	}
}

// JWTs share their first bytes ({"alg":...): they are told apart by their
// header and claims, so failures of forged ones do not block the others.
func TestJWTKey(t *testing.T) {
	th := New(nil)
	for i := range Failures {
		th.Fail(fmt.Sprintf("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.sig%d", i))
	}
	if _, b := th.Blocked("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.good"); b {
		t.Error("another JWT is blocked by forged ones")
	}
	if _, b := th.Blocked("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.other"); !b {
		t.Error("the forged claims are not blocked")
	}
}

// alike is a wrong token of the length of real that shares its first half
// (and more): what someone who knows that half would guess.
func alike(real string, i int) string {
	return real[:len(real)-3] + fmt.Sprintf("%03d", i)
}
