package opsview

import (
	"time"

	"github.com/agentbackplane/backplane/store"
)

// JournalQuery selects journal entries; zero fields match everything.
type JournalQuery struct {
	// Caller and Tool are exact names or path.Match globs ("fs.*").
	Caller, Tool string
	// Status is an intent status, StatusToolError (succeeded, and the tool
	// reported an error) or StatusRefused (only refusals); "" means both
	// intents and refusals.
	Status string
	// Class matches an intent's error class or a refusal's class.
	Class string
	// Text is searched, without regard to case, in ids (call, approval,
	// session), error classes and messages.
	Text string
	// Since and Until bound the entry's time (Since <= t < Until).
	Since, Until  time.Time
	Offset, Limit int // Limit 0 means 50
}

// Journal statuses besides the intents' own.
const (
	StatusToolError = "tool_error"
	StatusRefused   = "refused"
)

// JournalEntry is one intent or one refusal (exactly one is set).
type JournalEntry struct {
	Intent  *store.Intent
	Refusal *store.Refusal
}

// At is when the entry's call was committed or refused.
func (e JournalEntry) At() time.Time {
	if e.Intent != nil {
		return e.Intent.CreatedAt
	}
	return e.Refusal.At
}

// ID is the entry's call id.
func (e JournalEntry) ID() string {
	if e.Intent != nil {
		return e.Intent.CallID
	}
	return e.Refusal.CallID
}

// JournalPage is one page of Journal.
type JournalPage struct {
	Entries []JournalEntry
	More    bool // another page follows
	// Truncated says the search stopped after MaxJournalScan rows of
	// each kind: older matches may exist (narrow the time range).
	Truncated bool
}

// MaxJournalScan bounds the rows of each kind (intents, refusals) one
// Journal query reads.
const MaxJournalScan = 20000
