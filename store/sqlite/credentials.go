package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbackplane/backplane/store"
)

const credCols = `server, caller, mode, scopes, subject, expiry, updated, sealed`

// PutCredential inserts or replaces c; with prev, only while the row's
// sealed token is prev.
func (s *Store) PutCredential(ctx context.Context, c *store.Credential, prev []byte) error {
	scopes := strings.Join(c.Scopes, " ")
	return s.write(ctx, func(w *wtx) error {
		if prev == nil {
			_, err := w.exec(`INSERT INTO upstream_credentials (`+credCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (server, caller) DO UPDATE SET mode = excluded.mode, scopes = excluded.scopes, subject = excluded.subject,
				expiry = excluded.expiry, updated = excluded.updated, sealed = excluded.sealed`,
				c.Server, c.Caller, c.Mode, scopes, c.Subject, nanos(c.Expiry), nanos(c.Updated), c.Sealed)
			if err != nil {
				return fmt.Errorf("sqlite store: credential %s/%s: %w", c.Server, c.Caller, err)
			}
			return nil
		}
		n, err := w.affected(`UPDATE upstream_credentials SET mode = ?, scopes = ?, subject = ?, expiry = ?, updated = ?, sealed = ?
			WHERE server = ? AND caller = ? AND sealed = ?`,
			c.Mode, scopes, c.Subject, nanos(c.Expiry), nanos(c.Updated), c.Sealed, c.Server, c.Caller, prev)
		if err != nil {
			return fmt.Errorf("sqlite store: credential %s/%s: %w", c.Server, c.Caller, err)
		}
		if n == 1 {
			return nil
		}
		var one int
		err = w.queryRow(`SELECT 1 FROM upstream_credentials WHERE server = ? AND caller = ?`, c.Server, c.Caller).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite store: credential %s/%s: %w", c.Server, c.Caller, err)
		}
		return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrCredentialChanged)
	})
}

// GetCredential returns the row of (server, caller), or ErrNotFound.
func (s *Store) GetCredential(ctx context.Context, server, caller string) (*store.Credential, error) {
	st, err := s.rstmt(ctx, `SELECT `+credCols+` FROM upstream_credentials WHERE server = ? AND caller = ?`)
	if err != nil {
		return nil, err
	}
	var c *store.Credential
	err = retryBusy(ctx, s.log, func() error {
		c, err = scanCred(st.QueryRowContext(ctx, server, caller))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: credential %s/%s: %w", server, caller, err)
	}
	return c, nil
}

// ListCredentials lists server's rows ("" for all), by server then caller.
func (s *Store) ListCredentials(ctx context.Context, server string) ([]store.Credential, error) {
	q := `SELECT ` + credCols + ` FROM upstream_credentials`
	var args []any
	if server != "" {
		q, args = q+` WHERE server = ?`, append(args, server)
	}
	q += ` ORDER BY server, caller`
	var out []store.Credential
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c, err := scanCred(rows)
			if err != nil {
				return err
			}
			out = append(out, *c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential deletes the row of (server, caller).
func (s *Store) DeleteCredential(ctx context.Context, server, caller string) error {
	return s.write1(ctx, func(w *wtx) error {
		n, err := w.affected(`DELETE FROM upstream_credentials WHERE server = ? AND caller = ?`, server, caller)
		if err != nil {
			return fmt.Errorf("sqlite store: credential %s/%s: %w", server, caller, err)
		}
		if n == 0 {
			return fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
		}
		return nil
	})
}

func scanCred(r scanner) (*store.Credential, error) {
	var c store.Credential
	var scopes string
	var expiry, updated sql.NullInt64
	if err := r.Scan(&c.Server, &c.Caller, &c.Mode, &scopes, &c.Subject, &expiry, &updated, &c.Sealed); err != nil {
		return nil, err
	}
	c.Scopes = strings.Fields(scopes)
	c.Expiry, c.Updated = fromNanos(expiry), fromNanos(updated)
	return &c, nil
}
