package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

const approvalCols = `id, caller, session, tool, definition_hash, args_digest, status, decided_by,
	created_at, expires_at, decided_at, consumed_by, arguments, channel, reason, resolved_path`

// CreateApproval records a new approval request; its id must be new.
func (s *Store) CreateApproval(ctx context.Context, a *store.Approval) error {
	return s.write(ctx, func(ctx context.Context, c *pgx.Conn) error { return insertApproval(ctx, c, a) })
}

// findApprovalQuery is FindApproval's: the newest open request of a call.
const findApprovalQuery = `SELECT ` + approvalCols + ` FROM approvals
		WHERE caller = $1 AND tool = $2 AND definition_hash = $3 AND args_digest = $4
		AND expires_at > $5 AND consumed_by IS NULL
		ORDER BY created_at DESC NULLS LAST, id COLLATE "C" DESC LIMIT 1`

// approvalOpenLock is the first key of the advisory lock OpenApproval
// takes per caller (the second is the caller's hashtext).
const approvalOpenLock = 0x617072 // "apr"

// OpenApproval implements store.Approvals: under a transaction-scoped
// advisory lock per caller, so two replicas opening a request for one
// call (or past the caller's cap) are serialised: the second sees the
// first's row.
func (s *Store) OpenApproval(ctx context.Context, a *store.Approval, maxPending int) (*store.Approval, bool, error) {
	var got *store.Approval
	var created bool
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		got, created = nil, false
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, approvalOpenLock, a.Caller); err != nil {
			return fmt.Errorf("postgres store: open approval: %w", err)
		}
		now := cmpTS(a.CreatedAt)
		open, err := scanApproval(tx.QueryRow(ctx, findApprovalQuery, a.Caller, a.Tool, a.DefinitionHash, a.ArgsDigest, now))
		switch {
		case err == nil:
			got = open
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("postgres store: open approval: %w", err)
		}
		if maxPending > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE caller = $1 AND status = 'pending' AND expires_at > $2`,
				a.Caller, now).Scan(&n); err != nil {
				return fmt.Errorf("postgres store: open approval: %w", err)
			}
			if n >= maxPending {
				return fmt.Errorf("postgres store: caller %s: %d pending: %w", a.Caller, n, store.ErrTooManyPending)
			}
		}
		if err := insertApproval(ctx, tx, a); err != nil {
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
func insertApproval(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, a *store.Approval) error {
	status := a.Status
	if status == "" {
		status = store.ApprovalPending
	}
	_, err := db.Exec(ctx, `INSERT INTO approvals (`+approvalCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		a.ID, a.Caller, a.Session, a.Tool, a.DefinitionHash, a.ArgsDigest, string(status), a.DecidedBy,
		ts(a.CreatedAt), ts(a.ExpiresAt), ts(a.DecidedAt), nullString(a.ConsumedBy), a.Arguments, a.Channel, a.Reason, a.ResolvedPath)
	if err != nil {
		if isUnique(err) {
			return fmt.Errorf("postgres store: approval %q exists: %w", a.ID, err)
		}
		return fmt.Errorf("postgres store: create approval %s: %w", a.ID, err)
	}
	return nil
}

// GetApproval returns the request with this id as stored (pending even when
// past its expiry; see store.EffectiveApprovalStatus), or ErrNotFound.
func (s *Store) GetApproval(ctx context.Context, id string) (*store.Approval, error) {
	a, err := s.readApproval(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
	}
	return a, err
}

// FindApproval returns the newest request for exactly this call that is
// neither expired at now nor consumed, or ErrNotFound.
func (s *Store) FindApproval(ctx context.Context, k store.ApprovalKey, now time.Time) (*store.Approval, error) {
	a, err := s.readApproval(ctx, findApprovalQuery, k.Caller, k.Tool, k.DefinitionHash, k.ArgsDigest, cmpTS(now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("approval for %s calling %s: %w", k.Caller, k.Tool, store.ErrNotFound)
	}
	return a, err
}

func (s *Store) readApproval(ctx context.Context, query string, args ...any) (*store.Approval, error) {
	var a *store.Approval
	err := s.read(ctx, func(c *pgx.Conn) error {
		var err error
		a, err = scanApproval(c.QueryRow(ctx, query, args...))
		return err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres store: %w", err)
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
		conds = append(conds, `status = $`+strconv.Itoa(len(args)))
	}
	if f.Caller != "" {
		args = append(args, f.Caller)
		conds = append(conds, `caller = $`+strconv.Itoa(len(args)))
	}
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	q += ` ORDER BY created_at DESC NULLS LAST, id COLLATE "C" DESC`
	var out []store.Approval
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, q, args...)
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
		return nil, fmt.Errorf("postgres store: list approvals: %w", err)
	}
	return out, nil
}

// DecideApproval decides a pending request. The row is locked while it is
// read and updated, so two resolvers (through any replicas) cannot both
// decide it.
func (s *Store) DecideApproval(ctx context.Context, id string, d store.ApprovalDecision) error {
	return s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		a, err := scanApproval(tx.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres store: approval %s: %w", id, err)
		}
		status, err := store.Decide(a, d)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE approvals SET status = $1, decided_by = $2, decided_at = $3, channel = $4, reason = $5 WHERE id = $6`,
			string(status), d.By, ts(d.At), d.Channel, d.Reason, id)
		if err != nil {
			return fmt.Errorf("postgres store: decide approval %s: %w", id, err)
		}
		return nil
	})
}

func scanApproval(r pgx.Row) (*store.Approval, error) {
	var a store.Approval
	var status string
	var created, expires, decided pgtype.Timestamptz
	var consumed pgtype.Text
	if err := r.Scan(&a.ID, &a.Caller, &a.Session, &a.Tool, &a.DefinitionHash, &a.ArgsDigest, &status, &a.DecidedBy,
		&created, &expires, &decided, &consumed, &a.Arguments, &a.Channel, &a.Reason, &a.ResolvedPath); err != nil {
		return nil, err
	}
	a.Status, a.ConsumedBy = store.ApprovalStatus(status), consumed.String
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromTS(created), fromTS(expires), fromTS(decided)
	return &a, nil
}
