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

const loginCols = `key, server, caller, scopes, created, expires, sealed`

// AddPendingLogin inserts l after deleting the expired logins; with max,
// only while the caller has fewer than max (one write transaction: the
// single writer makes the count and the insert atomic).
func (s *Store) AddPendingLogin(ctx context.Context, l *store.PendingLogin, now time.Time, max int) error {
	return s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`DELETE FROM pending_logins WHERE expires <= ?`, now.UnixNano()); err != nil {
			return fmt.Errorf("sqlite store: pending logins: %w", err)
		}
		if max > 0 {
			var n int
			if err := w.queryRow(`SELECT count(*) FROM pending_logins WHERE caller = ?`, l.Caller).Scan(&n); err != nil {
				return fmt.Errorf("sqlite store: pending logins: %w", err)
			}
			if n >= max {
				return fmt.Errorf("caller %s has %d: %w", l.Caller, n, store.ErrTooManyLogins)
			}
		}
		_, err := w.exec(`INSERT INTO pending_logins (`+loginCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			l.Key, l.Server, l.Caller, strings.Join(l.Scopes, " "), l.Created.UnixNano(), l.Expires.UnixNano(), l.Sealed)
		if err != nil {
			return fmt.Errorf("sqlite store: pending login: %w", err)
		}
		return nil
	})
}

// ListPendingLogins lists the caller's logins on server not expired at
// now, oldest first.
func (s *Store) ListPendingLogins(ctx context.Context, server, caller string, now time.Time) ([]store.PendingLogin, error) {
	var out []store.PendingLogin
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, `SELECT `+loginCols+` FROM pending_logins
			WHERE caller = ? AND server = ? AND expires > ? ORDER BY created, key`, caller, server, now.UnixNano())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l, err := scanLogin(rows)
			if err != nil {
				return err
			}
			out = append(out, *l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list pending logins: %w", err)
	}
	return out, nil
}

// TakePendingLogin deletes the login of key and returns it (DELETE ...
// RETURNING: one statement, so one taker gets it).
func (s *Store) TakePendingLogin(ctx context.Context, key string) (*store.PendingLogin, error) {
	var l *store.PendingLogin
	err := s.write1(ctx, func(w *wtx) error {
		var err error
		l, err = scanLogin(w.queryRow(`DELETE FROM pending_logins WHERE key = ? RETURNING `+loginCols, key))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pending login: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: take pending login: %w", err)
	}
	return l, nil
}

func scanLogin(r scanner) (*store.PendingLogin, error) {
	var l store.PendingLogin
	var scopes string
	var created, expires int64
	if err := r.Scan(&l.Key, &l.Server, &l.Caller, &scopes, &created, &expires, &l.Sealed); err != nil {
		return nil, err
	}
	l.Scopes = strings.Fields(scopes)
	l.Created, l.Expires = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
	return &l, nil
}
