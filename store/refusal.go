package store

import (
	"context"
	"time"
)

// Refusal is a call the gateway refused before it was journaled: an
// unknown tool, invalid arguments, a policy denial, an approval still
// required or denied, a budget exceeded. It is a light row kept beside the
// intents so that every replica's front ends see every decision, not only
// the calls that ran: who asked for which tool, where and why it was
// refused, and the digest of its arguments (never their values).
type Refusal struct {
	// CallID is the id the gateway gave the call (a refused call has no
	// intent; the id ties the row to the call's audit event).
	CallID  string `json:"call_id"`
	Caller  string `json:"caller"`
	Session string `json:"session,omitempty"`
	Tool    string `json:"tool"`
	// Class is the error class the caller got (forbidden,
	// approval_required, budget_exceeded, ...); Step the pipeline step
	// that refused (lookup, validate, authorize, approve, reserve, commit).
	Class   string `json:"class"`
	Step    string `json:"step"`
	Message string `json:"message,omitempty"` // for people, at most MaxRefusalMessage bytes
	// ArgsDigest is the arguments' digest when they were read that far.
	ArgsDigest string `json:"args_digest,omitempty"`
	// ApprovalID names the approval request the refusal waits on or was
	// refused by, if any.
	ApprovalID string    `json:"approval_id,omitempty"`
	At         time.Time `json:"at"`
}

// RefusalFilter selects refusals; zero fields match everything.
type RefusalFilter struct {
	CallID string
	Caller string
	Tool   string
	// Since and Until bound At: Since <= At < Until (zero: unbounded).
	Since, Until time.Time
	Limit        int // 0 means a default of 100
}

// Refusals keeps refused calls (see Refusal). The rows are bounded twice:
// Prune deletes those older than its cut with the intents, and a store
// keeps at most MaxRefusals rows, dropping the oldest, so that a caller
// that sends refused calls in a loop cannot fill the disk while retention
// is off.
type Refusals interface {
	// RecordRefusals records rs, in one transaction; a refusal whose
	// CallID is already recorded is left as it is.
	RecordRefusals(ctx context.Context, rs []Refusal) error
	// ListRefusals returns the refusals f selects, newest first (by At,
	// then CallID).
	ListRefusals(ctx context.Context, f RefusalFilter) ([]Refusal, error)
}

const (
	// MaxRefusals bounds the refusals a store keeps.
	MaxRefusals = 100_000
	// MaxRefusalMessage bounds a refusal's message, in bytes.
	MaxRefusalMessage = 1000
)

// TrimMessage cuts s to MaxRefusalMessage bytes at a rune boundary.
func TrimMessage(s string) string {
	if len(s) <= MaxRefusalMessage {
		return s
	}
	i := MaxRefusalMessage
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}
