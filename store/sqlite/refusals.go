package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/agentbackplane/backplane/store"
)

// maxRefusals is store.MaxRefusals; tests lower it.
var maxRefusals = store.MaxRefusals

// RecordRefusals inserts rs in one transaction, then drops the oldest rows
// past maxRefusals (by seq: the newest row's seq minus the cap).
func (s *Store) RecordRefusals(ctx context.Context, rs []store.Refusal) error {
	if len(rs) == 0 {
		return nil
	}
	err := s.write(ctx, func(w *wtx) error {
		for _, r := range rs {
			if _, err := w.exec(`INSERT INTO refusals (call_id, caller, session, tool, class, step, message, args_digest, approval_id, at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (call_id) DO NOTHING`,
				r.CallID, r.Caller, r.Session, r.Tool, r.Class, r.Step, store.TrimMessage(r.Message), r.ArgsDigest, r.ApprovalID,
				r.At.UnixNano()); err != nil {
				return err
			}
		}
		_, err := w.exec(`DELETE FROM refusals WHERE seq <= (SELECT max(seq) FROM refusals) - ?`, maxRefusals)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite store: record refusals: %w", err)
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
	if f.CallID != "" {
		conds, args = append(conds, `call_id = ?`), append(args, f.CallID)
	}
	if f.Caller != "" {
		conds, args = append(conds, `caller = ?`), append(args, f.Caller)
	}
	if f.Tool != "" {
		conds, args = append(conds, `tool = ?`), append(args, f.Tool)
	}
	if !f.Since.IsZero() {
		conds, args = append(conds, `at >= ?`), append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		conds, args = append(conds, `at < ?`), append(args, f.Until.UnixNano())
	}
	q := `SELECT call_id, caller, session, tool, class, step, message, args_digest, approval_id, at FROM refusals`
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	q += ` ORDER BY at DESC, call_id DESC LIMIT ?`
	args = append(args, limit)
	var out []store.Refusal
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.Refusal
			var at int64
			if err := rows.Scan(&r.CallID, &r.Caller, &r.Session, &r.Tool, &r.Class, &r.Step, &r.Message, &r.ArgsDigest, &r.ApprovalID, &at); err != nil {
				return err
			}
			r.At = fromNanos(sql.NullInt64{Int64: at, Valid: true})
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list refusals: %w", err)
	}
	return out, nil
}
