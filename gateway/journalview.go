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

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

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
func ValidJournalQuery(q opsview.JournalQuery) error {
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

func inRange(q *opsview.JournalQuery, t time.Time) bool {
	return (q.Since.IsZero() || !t.Before(q.Since)) && (q.Until.IsZero() || t.Before(q.Until))
}

func intentMatch(q *opsview.JournalQuery, in *store.Intent) bool {
	switch q.Status {
	case "":
	case opsview.StatusToolError:
		if !opsview.ToolReportedError(in) {
			return false
		}
	default:
		if string(in.Status) != q.Status {
			return false
		}
	}
	return nameMatch(q.Caller, in.Caller) && nameMatch(q.Tool, in.Tool) && inRange(q, in.CreatedAt) &&
		(q.Class == "" || q.Class == in.ErrorClass) &&
		textMatch(q.Text, in.CallID, in.ApprovalID, in.Session, in.ErrorClass, in.ErrorMessage, in.IdempotencyKey, in.Tool, in.Caller)
}

func refusalMatch(q *opsview.JournalQuery, r *store.Refusal) bool {
	return nameMatch(q.Caller, r.Caller) && nameMatch(q.Tool, r.Tool) && inRange(q, r.At) &&
		(q.Class == "" || q.Class == r.Class) &&
		textMatch(q.Text, r.CallID, r.ApprovalID, r.Session, r.Class, r.Message, r.Tool, r.Caller)
}

// Journal lists the entries q selects, newest first: the intents (read a
// store page at a time, newest commit first, until one older than
// q.Since) and the refusals, merged by time.
func (g *Gateway) Journal(ctx context.Context, q opsview.JournalQuery) (opsview.JournalPage, error) {
	if err := ValidJournalQuery(q); err != nil {
		return opsview.JournalPage{}, err
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	want := q.Offset + q.Limit + 1 // one more tells whether a page follows
	var page opsview.JournalPage
	var entries []opsview.JournalEntry

	if q.Status != opsview.StatusRefused {
		f := store.IntentFilter{Limit: journalPageRows}
		if !globMeta(q.Caller) {
			f.Caller = q.Caller
		}
		if !globMeta(q.Tool) {
			f.Tool = q.Tool
		}
		switch q.Status {
		case "", opsview.StatusToolError:
			if q.Status == opsview.StatusToolError {
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
				return opsview.JournalPage{}, err
			}
			for i := range p.Intents {
				in := &p.Intents[i]
				scanned++
				if !q.Since.IsZero() && in.CreatedAt.Before(q.Since) {
					break intents // commit order is creation order, near enough
				}
				if intentMatch(&q, in) {
					entries = append(entries, opsview.JournalEntry{Intent: in})
					if n++; n >= want {
						break intents
					}
				}
			}
			if p.Next == "" {
				break
			}
			if scanned >= opsview.MaxJournalScan {
				page.Truncated = true
				break
			}
			cursor = p.Next
		}
	}
	if q.Status == "" || q.Status == opsview.StatusRefused {
		f := store.RefusalFilter{Since: q.Since, Until: q.Until, Limit: opsview.MaxJournalScan}
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
			return opsview.JournalPage{}, err
		}
		if len(rs) == opsview.MaxJournalScan {
			page.Truncated = true
		}
		n := 0
		for i := range rs {
			if refusalMatch(&q, &rs[i]) {
				entries = append(entries, opsview.JournalEntry{Refusal: &rs[i]})
				if n++; n >= want {
					break
				}
			}
		}
	}
	slices.SortStableFunc(entries, func(a, b opsview.JournalEntry) int {
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
