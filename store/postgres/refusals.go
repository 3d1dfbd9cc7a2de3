package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
)

// maxRefusals is store.MaxRefusals; tests lower it.
var maxRefusals = store.MaxRefusals

// RecordRefusals inserts rs in one transaction, then drops the oldest rows
// past maxRefusals. Replicas insert concurrently, so seq is only roughly the
// order of their commits: the cap is a bound, not an exact count.
func (s *Store) RecordRefusals(ctx context.Context, rs []store.Refusal) error {
	if len(rs) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, r := range rs {
			if _, err := tx.Exec(ctx, `INSERT INTO refusals (call_id, caller, session, tool, class, step, message, args_digest, approval_id, at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (call_id) DO NOTHING`,
				r.CallID, r.Caller, r.Session, r.Tool, r.Class, r.Step, store.TrimMessage(r.Message), r.ArgsDigest, r.ApprovalID, r.At); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM refusals WHERE seq <= (SELECT max(seq) FROM refusals) - $1`, maxRefusals)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres store: record refusals: %w", err)
	}
	return nil
}

// ListRefusals lists the refusals f selects, newest first.
func (s *Store) ListRefusals(ctx context.Context, f store.RefusalFilter) ([]store.Refusal, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1))
	}
	if f.CallID != "" {
		add(`call_id = ?`, f.CallID)
	}
	if f.Caller != "" {
		add(`caller = ?`, f.Caller)
	}
	if f.Tool != "" {
		add(`tool = ?`, f.Tool)
	}
	if !f.Since.IsZero() {
		add(`at >= ?`, f.Since)
	}
	if !f.Until.IsZero() {
		add(`at < ?`, f.Until)
	}
	q := `SELECT call_id, caller, session, tool, class, step, message, args_digest, approval_id, at FROM refusals`
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	args = append(args, limit)
	q += ` ORDER BY at DESC, call_id COLLATE "C" DESC LIMIT $` + strconv.Itoa(len(args))
	var out []store.Refusal
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.Refusal
			if err := rows.Scan(&r.CallID, &r.Caller, &r.Session, &r.Tool, &r.Class, &r.Step, &r.Message, &r.ArgsDigest, &r.ApprovalID, &r.At); err != nil {
				return err
			}
			r.At = r.At.UTC()
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: list refusals: %w", err)
	}
	return out, nil
}
