// Package memstore is an in-memory [store.Store]: the reference
// implementation of the contract, for tests and for embedding a gateway that
// needs no durability. Nothing survives the process; "synced" is trivially
// true, and its single incarnation is always alive.
package memstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Store is an in-memory store.Store.
type Store struct {
	mu           sync.Mutex
	incarnation  string
	intents      map[string]*store.Intent
	order        []string             // call ids in commit order
	seqs         []int64              // seqs[i] is the commit number of order[i]
	seq          int64                // the last commit number
	keys         map[[2]string]string // (caller, idempotency key) -> call id
	reservations map[string][]budget.Reservation
	used         map[usageKey]*usage
	approvals    map[string]*store.Approval
	pins         map[string]*store.Pin
	refusals     []store.Refusal // in the order recorded
	refused      map[string]bool // their call ids
	creds        map[[2]string]store.Credential
	logins       map[string]store.PendingLogin // by key
	tasks        map[string]*store.Task
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		incarnation:  "mem-" + rand.Text()[:12],
		intents:      map[string]*store.Intent{},
		keys:         map[[2]string]string{},
		reservations: map[string][]budget.Reservation{},
		used:         map[usageKey]*usage{},
		approvals:    map[string]*store.Approval{},
		pins:         map[string]*store.Pin{},
		refused:      map[string]bool{},
		creds:        map[[2]string]store.Credential{},
		logins:       map[string]store.PendingLogin{},
		tasks:        map[string]*store.Task{},
	}
}

// usageKey identifies one usage: (scope, key, window).
type usageKey struct {
	scope, key string
	per        time.Duration
	start      int64 // unix seconds
}

type usage struct{ used, quota int64 }

func keyOf(r budget.Reservation) usageKey {
	return usageKey{r.Scope, r.Key, r.Window.Per, r.Window.StartSeconds()}
}

func (s *Store) Incarnation() string { return s.incarnation }

func (s *Store) CommitIntent(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := req.Intent
	if _, ok := s.intents[in.CallID]; ok {
		return nil, fmt.Errorf("memstore: call id %q already committed", in.CallID)
	}
	if in.IdempotencyKey != "" {
		if id, ok := s.keys[[2]string{in.Caller, in.IdempotencyKey}]; ok {
			return copyIntent(s.intents[id]), store.ErrDuplicateKey
		}
	}
	for _, r := range req.Reservations {
		if err := budget.CheckWindow(r.Window); err != nil {
			return nil, fmt.Errorf("memstore: %w", err)
		}
	}
	held := map[usageKey]int64{}
	for _, r := range req.Reservations {
		// Two reservations of one request on the same usage add up.
		k := keyOf(r)
		var used int64
		if u := s.used[k]; u != nil {
			used = u.used
		}
		used += held[k]
		if used+r.Amount > r.Quota {
			return nil, &store.BudgetError{Scope: r.Scope, Key: r.Key, Used: used, Requested: r.Amount, Quota: r.Quota, Window: r.Window}
		}
		held[k] += r.Amount
	}
	if req.ApprovalID != "" {
		a, ok := s.approvals[req.ApprovalID]
		if !ok || !approvalUsable(a, &in) {
			return nil, store.ErrApprovalUnavailable
		}
		a.ConsumedBy = in.CallID
		in.ApprovalID = a.ID
	}
	for _, r := range req.Reservations {
		u := s.used[keyOf(r)]
		if u == nil {
			u = &usage{}
			s.used[keyOf(r)] = u
		}
		u.used += r.Amount
		u.quota = r.Quota
	}
	if len(req.Reservations) > 0 {
		s.reservations[in.CallID] = slices.Clone(req.Reservations)
	}
	in.Status = store.StatusStarted
	in.Incarnation = s.incarnation
	in.Arguments = slices.Clone(in.Arguments)
	s.intents[in.CallID] = &in
	s.seq++
	s.order = append(s.order, in.CallID)
	s.seqs = append(s.seqs, s.seq)
	if in.IdempotencyKey != "" {
		s.keys[[2]string{in.Caller, in.IdempotencyKey}] = in.CallID
	}
	return nil, nil
}

// approvalUsable reports whether a approves exactly the call in, once.
func approvalUsable(a *store.Approval, in *store.Intent) bool {
	return a.Status == store.ApprovalApproved && a.ConsumedBy == "" && in.CreatedAt.Before(a.ExpiresAt) &&
		a.Caller == in.Caller && a.Tool == in.Tool && a.DefinitionHash == in.DefinitionHash && a.ArgsDigest == in.ArgsDigest
}

func (s *Store) Settle(ctx context.Context, callID string, st store.Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[callID]
	if !ok {
		return fmt.Errorf("settle %s: %w", callID, store.ErrNotFound)
	}
	if in.Status != store.StatusStarted || in.Incarnation != s.incarnation {
		return fmt.Errorf("settle %s (%s): %w", callID, in.Status, store.ErrNotStarted)
	}
	in.Status = st.Status
	in.Result, in.ErrorDetail = slices.Clone(st.Result), slices.Clone(st.ErrorDetail)
	in.ErrorClass, in.ErrorMessage, in.SettledAt = st.ErrorClass, st.ErrorMessage, st.At
	if store.Released(st.Status) {
		s.release(callID)
	}
	return nil
}

// copyIntent returns a copy of in that shares no bytes with the store, so
// no caller's change to a returned slice alters the journal.
func copyIntent(in *store.Intent) *store.Intent {
	out := *in
	out.Arguments = slices.Clone(in.Arguments)
	out.Result, out.ErrorDetail = slices.Clone(in.Result), slices.Clone(in.ErrorDetail)
	return &out
}

func (s *Store) release(callID string) {
	for _, r := range s.reservations[callID] {
		// A usage pruned (its window ended) or reset has nothing to give back.
		if u := s.used[keyOf(r)]; u != nil {
			u.used -= r.Amount
		}
	}
	delete(s.reservations, callID)
}

func (s *Store) GetIntent(ctx context.Context, callID string) (*store.Intent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[callID]
	if !ok {
		return nil, fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
	}
	return copyIntent(in), nil
}

func (s *Store) GetIntentByKey(ctx context.Context, caller, key string) (*store.Intent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.keys[[2]string{caller, key}]
	if !ok {
		return nil, fmt.Errorf("idempotency key %q: %w", key, store.ErrNotFound)
	}
	return copyIntent(s.intents[id]), nil
}

func (s *Store) ListIntents(ctx context.Context, f store.IntentFilter) ([]store.Intent, error) {
	p, err := s.PageIntents(ctx, f, "")
	return p.Intents, err
}

// PageIntents pages by commit number: the cursor is the commit number of
// the last intent listed.
func (s *Store) PageIntents(ctx context.Context, f store.IntentFilter, cursor string) (store.IntentPage, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	before := int64(math.MaxInt64)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n <= 0 {
			return store.IntentPage{}, fmt.Errorf("memstore: cursor %q: %w", cursor, store.ErrBadCursor)
		}
		before = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p store.IntentPage
	// Newest first, as an operator reads a journal.
	i, _ := slices.BinarySearch(s.seqs, before) // s.seqs[i-1] is the newest before the cursor
	for i--; i >= 0; i-- {
		in := s.intents[s.order[i]]
		if (f.Status == "" || in.Status == f.Status) && (f.Caller == "" || in.Caller == f.Caller) && (f.Tool == "" || in.Tool == f.Tool) {
			if len(p.Intents) == limit {
				p.Next = strconv.FormatInt(s.seqs[i+1], 10)
				break
			}
			p.Intents = append(p.Intents, *copyIntent(in))
		}
	}
	return p, nil
}

// Prune deletes the settled intents settled before before, their
// reservations, the approvals expired before it and the budget windows
// ended before it. The store's one incarnation is alive: none is pruned.
func (s *Store) Prune(ctx context.Context, before time.Time) (store.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return store.PruneResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var r store.PruneResult
	order, seqs := s.order[:0], s.seqs[:0]
	for i, id := range s.order {
		in := s.intents[id]
		if in.Status.Terminal() && !in.SettledAt.IsZero() && in.SettledAt.Before(before) {
			r.Intents++
			r.Reservations += int64(len(s.reservations[id]))
			delete(s.reservations, id)
			delete(s.intents, id)
			if in.IdempotencyKey != "" {
				delete(s.keys, [2]string{in.Caller, in.IdempotencyKey})
			}
			continue
		}
		order, seqs = append(order, id), append(seqs, s.seqs[i])
	}
	clear(s.order[len(order):])
	s.order, s.seqs = order, seqs
	for id, a := range s.approvals {
		if a.ExpiresAt.Before(before) {
			delete(s.approvals, id)
			r.Approvals++
		}
	}
	for id, t := range s.tasks {
		if t.ExpiresAt.Before(before) {
			delete(s.tasks, id)
			r.Tasks++
		}
	}
	for k, l := range s.logins {
		if l.Expires.Before(before) {
			delete(s.logins, k)
			r.Logins++
		}
	}
	for k := range s.used {
		if k.per > 0 && !time.Unix(k.start, 0).Add(k.per).After(before) {
			delete(s.used, k)
			r.Windows++
		}
	}
	kept := s.refusals[:0]
	for _, rf := range s.refusals {
		if rf.At.Before(before) {
			delete(s.refused, rf.CallID)
			r.Refusals++
			continue
		}
		kept = append(kept, rf)
	}
	clear(s.refusals[len(kept):])
	s.refusals = kept
	return r, nil
}

// maxRefusals is store.MaxRefusals; tests lower it.
var maxRefusals = store.MaxRefusals

// RecordRefusals keeps rs; past maxRefusals the oldest recorded go.
func (s *Store) RecordRefusals(ctx context.Context, rs []store.Refusal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		if s.refused[r.CallID] {
			continue
		}
		r.Message = store.TrimMessage(r.Message)
		s.refused[r.CallID] = true
		s.refusals = append(s.refusals, r)
	}
	if over := len(s.refusals) - maxRefusals; over > 0 {
		for _, r := range s.refusals[:over] {
			delete(s.refused, r.CallID)
		}
		s.refusals = slices.Clone(s.refusals[over:])
	}
	return nil
}

// ListRefusals lists the refusals f selects, newest first.
func (s *Store) ListRefusals(ctx context.Context, f store.RefusalFilter) ([]store.Refusal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	var out []store.Refusal
	for _, r := range s.refusals {
		if (f.CallID != "" && r.CallID != f.CallID) || (f.Caller != "" && r.Caller != f.Caller) || (f.Tool != "" && r.Tool != f.Tool) ||
			(!f.Since.IsZero() && r.At.Before(f.Since)) || (!f.Until.IsZero() && !r.At.Before(f.Until)) {
			continue
		}
		out = append(out, r)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.Refusal) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return cmp.Compare(b.CallID, a.CallID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ResetBudget removes the usage of (scope, key) in every window and takes
// its reservations out of the count.
func (s *Store) ResetBudget(ctx context.Context, scope, key string) ([]store.Usage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Usage
	for k, u := range s.used {
		if k.scope == scope && k.key == key {
			out = append(out, store.Usage{Scope: scope, Key: key, Window: budget.WindowOf(int64(k.per/time.Second), k.start), Quota: u.quota, Used: u.used})
			delete(s.used, k)
		}
	}
	for id, rs := range s.reservations {
		rs = slices.DeleteFunc(rs, func(r budget.Reservation) bool { return r.Scope == scope && r.Key == key })
		if len(rs) == 0 {
			delete(s.reservations, id)
		} else {
			s.reservations[id] = rs
		}
	}
	slices.SortFunc(out, store.CompareUsage)
	return out, nil
}

func (s *Store) ResolveIntent(ctx context.Context, callID string, executed bool, by string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[callID]
	if !ok {
		return fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
	}
	if in.Status != store.StatusUncertain {
		return fmt.Errorf("resolve %s (%s): %w", callID, in.Status, store.ErrNotUncertain)
	}
	in.Status = store.StatusExecuted
	if !executed {
		in.Status = store.StatusNotExecuted
		s.release(callID)
	}
	in.ResolvedBy, in.SettledAt, in.ErrorClass = by, at, store.ResolvedClass(executed, in.ErrorClass)
	return nil
}

// Recover finds nothing: the only incarnation is this live process.
func (s *Store) Recover(ctx context.Context) (int, error) { return 0, nil }

func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.approvals[a.ID]; ok {
		return fmt.Errorf("memstore: approval %q exists", a.ID)
	}
	c := *a
	c.Arguments = slices.Clone(a.Arguments)
	s.approvals[a.ID] = &c
	return nil
}

func (s *Store) OpenApproval(ctx context.Context, a *store.Approval, maxPending int) (*store.Approval, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := store.ApprovalKey{Caller: a.Caller, Tool: a.Tool, DefinitionHash: a.DefinitionHash, ArgsDigest: a.ArgsDigest}
	if open := s.findApproval(key, a.CreatedAt); open != nil {
		c := *open
		return &c, false, nil
	}
	if maxPending > 0 {
		n := 0
		for _, p := range s.approvals {
			if p.Caller == a.Caller && store.EffectiveApprovalStatus(p, a.CreatedAt) == store.ApprovalPending {
				n++
			}
		}
		if n >= maxPending {
			return nil, false, fmt.Errorf("memstore: caller %s: %d pending: %w", a.Caller, n, store.ErrTooManyPending)
		}
	}
	if _, ok := s.approvals[a.ID]; ok {
		return nil, false, fmt.Errorf("memstore: approval %q exists", a.ID)
	}
	c := *a
	if c.Status == "" {
		c.Status = store.ApprovalPending
	}
	c.Arguments = slices.Clone(a.Arguments)
	s.approvals[a.ID] = &c
	r := c
	return &r, true, nil
}

func (s *Store) GetApproval(ctx context.Context, id string) (*store.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.approvals[id]
	if !ok {
		return nil, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
	}
	c := *a
	return &c, nil
}

func (s *Store) FindApproval(ctx context.Context, k store.ApprovalKey, now time.Time) (*store.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := s.findApproval(k, now)
	if best == nil {
		return nil, store.ErrNotFound
	}
	c := *best
	return &c, nil
}

// findApproval is FindApproval's search; s.mu held.
func (s *Store) findApproval(k store.ApprovalKey, now time.Time) *store.Approval {
	var best *store.Approval
	for _, a := range s.approvals {
		if a.Caller != k.Caller || a.Tool != k.Tool || a.DefinitionHash != k.DefinitionHash || a.ArgsDigest != k.ArgsDigest {
			continue
		}
		if !now.Before(a.ExpiresAt) || a.ConsumedBy != "" {
			continue
		}
		if best == nil || a.CreatedAt.After(best.CreatedAt) || (a.CreatedAt.Equal(best.CreatedAt) && a.ID > best.ID) {
			best = a
		}
	}
	return best
}

func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter, now time.Time) ([]store.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []store.Approval
	for _, a := range s.approvals {
		if f.Caller != "" && a.Caller != f.Caller {
			continue
		}
		c := *a
		c.Status = store.EffectiveApprovalStatus(a, now)
		if f.Status == "" || c.Status == f.Status {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b store.Approval) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *Store) DecideApproval(ctx context.Context, id string, d store.ApprovalDecision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.approvals[id]
	if !ok {
		return fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
	}
	status, err := store.Decide(a, d)
	if err != nil {
		return err
	}
	a.Status = status
	a.DecidedBy, a.DecidedAt, a.Channel, a.Reason = d.By, d.At, d.Channel, d.Reason
	return nil
}

func (s *Store) BudgetUsage(ctx context.Context) ([]store.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.Usage, 0, len(s.used))
	for k, u := range s.used {
		out = append(out, store.Usage{Scope: k.scope, Key: k.key, Window: budget.WindowOf(int64(k.per/time.Second), k.start), Quota: u.quota, Used: u.used})
	}
	slices.SortFunc(out, store.CompareUsage)
	return out, nil
}

func (s *Store) Close() error { return nil }

func (s *Store) SeePin(ctx context.Context, tool, hash string, now time.Time) (*store.Pin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pins[tool]
	if !ok {
		p = &store.Pin{Tool: tool, AcceptedHash: hash, SeenHash: hash, FirstSeen: now, UpdatedAt: now}
		s.pins[tool] = p
	} else if p.SeenHash != hash {
		p.SeenHash, p.UpdatedAt = hash, now
	}
	c := *p
	return &c, nil
}

func (s *Store) GetPin(ctx context.Context, tool string) (*store.Pin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pins[tool]
	if !ok {
		return nil, fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
	}
	c := *p
	return &c, nil
}

func (s *Store) AcceptPin(ctx context.Context, tool, hash, by string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pins[tool]
	if !ok {
		return fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
	}
	if p.SeenHash != hash {
		return fmt.Errorf("pin %s: %w", tool, store.ErrPinChanged)
	}
	p.AcceptedHash, p.AcceptedBy, p.UpdatedAt = hash, by, now
	return nil
}

func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.Pin, 0, len(s.pins))
	for _, p := range s.pins {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b store.Pin) int { return cmp.Compare(a.Tool, b.Tool) })
	return out, nil
}
