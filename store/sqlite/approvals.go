package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/store"
)

const approvalCols = `id, caller, session, tool, definition_hash, args_digest, status, decided_by,
	created_at, expires_at, decided_at, consumed_by, arguments, channel, reason, resolved_path`

// CreateApproval records a new approval request; its id must be new.
func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	return s.write1(ctx, func(w *wtx) error { return insertApproval(w, a) })
}

// findApprovalQuery is FindApproval's: the newest open request of a call.
const findApprovalQuery = `SELECT ` + approvalCols + ` FROM approvals
		WHERE caller = ? AND tool = ? AND definition_hash = ? AND args_digest = ?
		AND expires_at > ? AND consumed_by IS NULL
		ORDER BY created_at DESC, id DESC LIMIT 1`

// OpenApproval implements store.Approvals. The search, the count and the
// insert run in one write transaction, which holds SQLite's write lock
// from its BEGIN IMMEDIATE: no other process can open a request between
// them.
func (s *Store) OpenApproval(ctx context.Context, a *store.Approval, maxPending int) (*store.Approval, bool, error) {
	var got *store.Approval
	var created bool
	err := s.write1(ctx, func(w *wtx) error {
		got, created = nil, false
		now := cmpNanos(a.CreatedAt)
		open, err := scanApproval(w.queryRow(findApprovalQuery, a.Caller, a.Tool, a.DefinitionHash, a.ArgsDigest, now))
		switch {
		case err == nil:
			got = open
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("sqlite store: open approval: %w", err)
		}
		if maxPending > 0 {
			var n int
			if err := w.queryRow(`SELECT count(*) FROM approvals WHERE caller = ? AND status = 'pending' AND expires_at > ?`,
				a.Caller, now).Scan(&n); err != nil {
				return fmt.Errorf("sqlite store: open approval: %w", err)
			}
			if n >= maxPending {
				return fmt.Errorf("sqlite store: caller %s: %d pending: %w", a.Caller, n, store.ErrTooManyPending)
			}
		}
		if err := insertApproval(w, a); err != nil {
			return err
		}
		c := *a
		if c.Status == "" {
			c.Status = store.ApprovalPending
		}
		got, created = &c, true
		return nil
	})
	return got, created, err
}

// insertApproval writes a as a new row; its id must be new.
func insertApproval(w *wtx, a *store.Approval) error {
	status := a.Status
	if status == "" {
		status = store.ApprovalPending
	}
	_, err := w.exec(`INSERT INTO approvals (`+approvalCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Caller, a.Session, a.Tool, a.DefinitionHash, a.ArgsDigest, string(status), a.DecidedBy,
		nanos(a.CreatedAt), nanos(a.ExpiresAt), nanos(a.DecidedAt), nullString(a.ConsumedBy), a.Arguments, a.Channel, a.Reason, a.ResolvedPath)
	if err != nil {
		if isUnique(err) {
			return fmt.Errorf("sqlite store: approval %q exists: %w", a.ID, err)
		}
		return fmt.Errorf("sqlite store: create approval %s: %w", a.ID, err)
	}
	return nil
}

// GetApproval returns the request with this id as stored (pending even when
// past its expiry; see store.EffectiveApprovalStatus), or ErrNotFound.
func (s *Store) GetApproval(ctx context.Context, id string) (*store.Approval, error) {
	a, err := s.readApproval(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
	}
	return a, err
}

// FindApproval returns the newest request for exactly this call that is
// neither expired at now nor consumed, or ErrNotFound.
func (s *Store) FindApproval(ctx context.Context, k store.ApprovalKey, now time.Time) (*store.Approval, error) {
	a, err := s.readApproval(ctx, findApprovalQuery, k.Caller, k.Tool, k.DefinitionHash, k.ArgsDigest, cmpNanos(now))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval for %s calling %s: %w", k.Caller, k.Tool, store.ErrNotFound)
	}
	return a, err
}

func (s *Store) readApproval(ctx context.Context, query string, args ...any) (*store.Approval, error) {
	st, err := s.rstmt(ctx, query)
	if err != nil {
		return nil, err
	}
	var a *store.Approval
	err = retryBusy(ctx, s.log, func() error {
		a, err = scanApproval(st.QueryRowContext(ctx, args...))
		return err
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	return a, err
}

// ListApprovals returns requests newest first, with their status as seen at
// now (a pending request past its expiry is listed expired).
func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter, now time.Time) ([]store.Approval, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT ` + approvalCols + ` FROM approvals`
	var args []any
	var conds []string
	switch f.Status {
	case "":
	case store.ApprovalPending, store.ApprovalExpired:
		// Expiry is derived at read time: both are stored pending.
		conds = append(conds, `status = 'pending'`)
	default:
		args = append(args, string(f.Status))
		conds = append(conds, `status = ?`)
	}
	if f.Caller != "" {
		args = append(args, f.Caller)
		conds = append(conds, `caller = ?`)
	}
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	q += ` ORDER BY created_at DESC, id DESC`
	var out []store.Approval
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for len(out) < limit && rows.Next() {
			a, err := scanApproval(rows)
			if err != nil {
				return err
			}
			a.Status = store.EffectiveApprovalStatus(a, now)
			if f.Status == "" || a.Status == f.Status {
				out = append(out, *a)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list approvals: %w", err)
	}
	return out, nil
}

// DecideApproval decides a pending request. The read and the update run in
// one write transaction, so two resolvers (in any processes) cannot both
// decide it.
func (s *Store) DecideApproval(ctx context.Context, id string, d store.ApprovalDecision) error {
	// Reads, then at most one UPDATE.
	return s.write1(ctx, func(w *wtx) error {
		a, err := scanApproval(w.queryRow(`SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite store: approval %s: %w", id, err)
		}
		status, err := store.Decide(a, d)
		if err != nil {
			return err
		}
		_, err = w.exec(`UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, channel = ?, reason = ? WHERE id = ? AND status = 'pending'`,
			string(status), d.By, nanos(d.At), d.Channel, d.Reason, id)
		if err != nil {
			return fmt.Errorf("sqlite store: decide approval %s: %w", id, err)
		}
		return nil
	})
}

func scanApproval(r scanner) (*store.Approval, error) {
	var a store.Approval
	var status string
	var created, expires, decided sql.NullInt64
	var consumed sql.NullString
	if err := r.Scan(&a.ID, &a.Caller, &a.Session, &a.Tool, &a.DefinitionHash, &a.ArgsDigest, &status, &a.DecidedBy,
		&created, &expires, &decided, &consumed, &a.Arguments, &a.Channel, &a.Reason, &a.ResolvedPath); err != nil {
		return nil, err
	}
	a.Status, a.ConsumedBy = store.ApprovalStatus(status), consumed.String
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromNanos(created), fromNanos(expires), fromNanos(decided)
	return &a, nil
}
