package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

const loginCols = `key, server, caller, scopes, created, expires, sealed`

// loginAddLock is the first key of the advisory lock AddPendingLogin
// takes per caller (the second is the caller's hashtext).
const loginAddLock = 0x6c6f67 // "log"

// AddPendingLogin implements store.PendingLogins: under a
// transaction-scoped advisory lock per caller, so two replicas adding a
// login for one caller at its cap are serialised: the second counts the
// first's row.
func (s *Store) AddPendingLogin(ctx context.Context, l *store.PendingLogin, now time.Time, max int) error {
	return s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, loginAddLock, l.Caller); err != nil {
			return fmt.Errorf("postgres store: pending login: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pending_logins WHERE expires <= $1`, ts(now)); err != nil {
			return fmt.Errorf("postgres store: pending logins: %w", err)
		}
		if max > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pending_logins WHERE caller = $1`, l.Caller).Scan(&n); err != nil {
				return fmt.Errorf("postgres store: pending logins: %w", err)
			}
			if n >= max {
				return fmt.Errorf("caller %s has %d: %w", l.Caller, n, store.ErrTooManyLogins)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO pending_logins (`+loginCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			l.Key, l.Server, l.Caller, strings.Join(l.Scopes, " "), ts(l.Created), ts(l.Expires), l.Sealed)
		if err != nil {
			return fmt.Errorf("postgres store: pending login: %w", err)
		}
		return nil
	})
}

// ListPendingLogins lists the caller's logins on server not expired at
// now, oldest first.
func (s *Store) ListPendingLogins(ctx context.Context, server, caller string, now time.Time) ([]store.PendingLogin, error) {
	var out []store.PendingLogin
	err := s.read(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT `+loginCols+` FROM pending_logins
			WHERE caller = $1 AND server = $2 AND expires > $3 ORDER BY created, key COLLATE "C"`, caller, server, ts(now))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.PendingLogin, error) {
			l, err := scanLogin(r)
			if err != nil {
				return store.PendingLogin{}, err
			}
			return *l, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: list pending logins: %w", err)
	}
	return out, nil
}

// TakePendingLogin deletes the login of key and returns it: one DELETE
// ... RETURNING, so of concurrent takers one gets the row.
func (s *Store) TakePendingLogin(ctx context.Context, key string) (*store.PendingLogin, error) {
	var l *store.PendingLogin
	err := s.write(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		l, err = scanLogin(conn.QueryRow(ctx, `DELETE FROM pending_logins WHERE key = $1 RETURNING `+loginCols, key))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pending login: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres store: take pending login: %w", err)
	}
	return l, nil
}

func scanLogin(r pgx.Row) (*store.PendingLogin, error) {
	var l store.PendingLogin
	var scopes string
	var created, expires pgtype.Timestamptz
	if err := r.Scan(&l.Key, &l.Server, &l.Caller, &scopes, &created, &expires, &l.Sealed); err != nil {
		return nil, err
	}
	l.Scopes = strings.Fields(scopes)
	l.Created, l.Expires = fromTS(created), fromTS(expires)
	return &l, nil
}
