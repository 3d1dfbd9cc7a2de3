package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

const credCols = `server, caller, mode, scopes, subject, expiry, updated, sealed`

// PutCredential inserts or replaces c; with prev, only while the row's
// sealed token is prev (one conditional UPDATE: a replica's concurrent
// refresh is never overwritten).
func (s *Store) PutCredential(ctx context.Context, c *store.Credential, prev []byte) error {
	scopes := strings.Join(c.Scopes, " ")
	return s.write(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if prev == nil {
			_, err := conn.Exec(ctx, `INSERT INTO upstream_credentials (`+credCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (server, caller) DO UPDATE SET mode = excluded.mode, scopes = excluded.scopes, subject = excluded.subject,
				expiry = excluded.expiry, updated = excluded.updated, sealed = excluded.sealed`,
				c.Server, c.Caller, c.Mode, scopes, c.Subject, ts(c.Expiry), ts(c.Updated), c.Sealed)
			if err != nil {
				return fmt.Errorf("postgres store: credential %s/%s: %w", c.Server, c.Caller, err)
			}
			return nil
		}
		tag, err := conn.Exec(ctx, `UPDATE upstream_credentials SET mode = $3, scopes = $4, subject = $5, expiry = $6, updated = $7, sealed = $8
			WHERE server = $1 AND caller = $2 AND sealed = $9`,
			c.Server, c.Caller, c.Mode, scopes, c.Subject, ts(c.Expiry), ts(c.Updated), c.Sealed, prev)
		if err != nil {
			return fmt.Errorf("postgres store: credential %s/%s: %w", c.Server, c.Caller, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var one int
		err = conn.QueryRow(ctx, `SELECT 1 FROM upstream_credentials WHERE server = $1 AND caller = $2`, c.Server, c.Caller).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres store: credential %s/%s: %w", c.Server, c.Caller, err)
		}
		return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrCredentialChanged)
	})
}

// GetCredential returns the row of (server, caller), or ErrNotFound.
func (s *Store) GetCredential(ctx context.Context, server, caller string) (*store.Credential, error) {
	var c *store.Credential
	err := s.read(ctx, func(conn *pgx.Conn) error {
		var err error
		c, err = scanCred(conn.QueryRow(ctx, `SELECT `+credCols+` FROM upstream_credentials WHERE server = $1 AND caller = $2`, server, caller))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres store: credential %s/%s: %w", server, caller, err)
	}
	return c, nil
}

// ListCredentials lists server's rows ("" for all), by server then caller.
func (s *Store) ListCredentials(ctx context.Context, server string) ([]store.Credential, error) {
	var out []store.Credential
	err := s.read(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT `+credCols+` FROM upstream_credentials WHERE $1 = '' OR server = $1
			ORDER BY server COLLATE "C", caller COLLATE "C"`, server)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Credential, error) {
			c, err := scanCred(r)
			if err != nil {
				return store.Credential{}, err
			}
			return *c, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential deletes the row of (server, caller).
func (s *Store) DeleteCredential(ctx context.Context, server, caller string) error {
	return s.write(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, `DELETE FROM upstream_credentials WHERE server = $1 AND caller = $2`, server, caller)
		if err != nil {
			return fmt.Errorf("postgres store: credential %s/%s: %w", server, caller, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
		}
		return nil
	})
}

func scanCred(r pgx.Row) (*store.Credential, error) {
	var c store.Credential
	var scopes string
	var expiry, updated pgtype.Timestamptz
	if err := r.Scan(&c.Server, &c.Caller, &c.Mode, &scopes, &c.Subject, &expiry, &updated, &c.Sealed); err != nil {
		return nil, err
	}
	c.Scopes = strings.Fields(scopes)
	c.Expiry, c.Updated = fromTS(expiry), fromTS(updated)
	return &c, nil
}
