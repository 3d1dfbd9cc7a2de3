package gateway

// The journal as front ends show it: the intents and the refusals of every
// replica in one list, newest first, with the filters an operator types
// (globs, a time range, text), read from the store a page at a time.

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
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

// journalPageRows is how many intents one store page reads.
const journalPageRows = 500

// globMeta reports whether s is a pattern rather than a name.
func globMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// nameMatch matches a name against an exact name or a glob.
func nameMatch(pattern, name string) bool {
	if pattern == "" {
		return true
	}
	if !globMeta(pattern) {
		return pattern == name
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// ValidJournalQuery checks q's patterns.
func ValidJournalQuery(q JournalQuery) error {
	for _, p := range []string{q.Caller, q.Tool} {
		if _, err := path.Match(p, ""); err != nil {
			return opError("bad_filter", "the pattern "+p+" is malformed: "+err.Error(), err)
		}
	}
	return nil
}

func textMatch(text string, fields ...string) bool {
	if text == "" {
		return true
	}
	text = strings.ToLower(text)
	for _, f := range fields {
		if strings.Contains(strings.ToLower(f), text) {
			return true
		}
	}
	return false
}

func (q *JournalQuery) inRange(t time.Time) bool {
	return (q.Since.IsZero() || !t.Before(q.Since)) && (q.Until.IsZero() || t.Before(q.Until))
}

func (q *JournalQuery) intentMatch(in *store.Intent) bool {
	switch q.Status {
	case "":
	case StatusToolError:
		if !ToolReportedError(in) {
			return false
		}
	default:
		if string(in.Status) != q.Status {
			return false
		}
	}
	return nameMatch(q.Caller, in.Caller) && nameMatch(q.Tool, in.Tool) && q.inRange(in.CreatedAt) &&
		(q.Class == "" || q.Class == in.ErrorClass) &&
		textMatch(q.Text, in.CallID, in.ApprovalID, in.Session, in.ErrorClass, in.ErrorMessage, in.IdempotencyKey, in.Tool, in.Caller)
}

func (q *JournalQuery) refusalMatch(r *store.Refusal) bool {
	return nameMatch(q.Caller, r.Caller) && nameMatch(q.Tool, r.Tool) && q.inRange(r.At) &&
		(q.Class == "" || q.Class == r.Class) &&
		textMatch(q.Text, r.CallID, r.ApprovalID, r.Session, r.Class, r.Message, r.Tool, r.Caller)
}

// Journal lists the entries q selects, newest first: the intents (read a
// store page at a time, newest commit first, until one older than
// q.Since) and the refusals, merged by time.
func (g *Gateway) Journal(ctx context.Context, q JournalQuery) (JournalPage, error) {
	if err := ValidJournalQuery(q); err != nil {
		return JournalPage{}, err
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	want := q.Offset + q.Limit + 1 // one more tells whether a page follows
	var page JournalPage
	var entries []JournalEntry

	if q.Status != StatusRefused {
		f := store.IntentFilter{Limit: journalPageRows}
		if !globMeta(q.Caller) {
			f.Caller = q.Caller
		}
		if !globMeta(q.Tool) {
			f.Tool = q.Tool
		}
		switch q.Status {
		case "", StatusToolError:
			if q.Status == StatusToolError {
				f.Status = store.StatusSucceeded
			}
		default:
			f.Status = store.Status(q.Status)
		}
		cursor, scanned, n := "", 0, 0
	intents:
		for {
			p, err := g.store.PageIntents(ctx, f, cursor)
			if err != nil {
				return JournalPage{}, err
			}
			for i := range p.Intents {
				in := &p.Intents[i]
				scanned++
				if !q.Since.IsZero() && in.CreatedAt.Before(q.Since) {
					break intents // commit order is creation order, near enough
				}
				if q.intentMatch(in) {
					entries = append(entries, JournalEntry{Intent: in})
					if n++; n >= want {
						break intents
					}
				}
			}
			if p.Next == "" {
				break
			}
			if scanned >= MaxJournalScan {
				page.Truncated = true
				break
			}
			cursor = p.Next
		}
	}
	if q.Status == "" || q.Status == StatusRefused {
		f := store.RefusalFilter{Since: q.Since, Until: q.Until, Limit: MaxJournalScan}
		if !globMeta(q.Caller) {
			f.Caller = q.Caller
		}
		if !globMeta(q.Tool) {
			f.Tool = q.Tool
		}
		if q.Caller == "" && q.Tool == "" && q.Class == "" && q.Text == "" {
			f.Limit = want // every row matches: no more are needed
		}
		rs, err := g.ListRefusals(ctx, f)
		if err != nil {
			return JournalPage{}, err
		}
		if len(rs) == MaxJournalScan {
			page.Truncated = true
		}
		n := 0
		for i := range rs {
			if q.refusalMatch(&rs[i]) {
				entries = append(entries, JournalEntry{Refusal: &rs[i]})
				if n++; n >= want {
					break
				}
			}
		}
	}
	slices.SortStableFunc(entries, func(a, b JournalEntry) int {
		if c := b.At().Compare(a.At()); c != 0 {
			return c
		}
		return strings.Compare(b.ID(), a.ID())
	})
	if q.Offset >= len(entries) {
		return page, nil
	}
	entries = entries[q.Offset:]
	if len(entries) > q.Limit {
		entries, page.More = entries[:q.Limit], true
	}
	page.Entries = entries
	return page, nil
}

// GetRefusal returns the refusal of call id; errors wrap
// store.ErrNotFound.
func (g *Gateway) GetRefusal(ctx context.Context, id string) (*store.Refusal, error) {
	rs, err := g.ListRefusals(ctx, store.RefusalFilter{CallID: id, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("refusal %s: %w", id, store.ErrNotFound)
	}
	return &rs[0], nil
}
