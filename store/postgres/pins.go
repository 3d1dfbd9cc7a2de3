package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

const pinCols = `tool, accepted_hash, seen_hash, accepted_by, first_seen, updated_at`

// SeePin records tool's definition hash: accepted at first sight, else the
// newest seen.
func (s *Store) SeePin(ctx context.Context, tool, hash string, now time.Time) (*store.Pin, error) {
	err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO pins AS p (tool, accepted_hash, seen_hash, first_seen, updated_at) VALUES ($1, $2, $2, $3, $3)
			ON CONFLICT (tool) DO UPDATE SET seen_hash = excluded.seen_hash, updated_at = excluded.updated_at
			WHERE p.seen_hash <> excluded.seen_hash`, tool, hash, ts(now))
		if err != nil {
			return fmt.Errorf("postgres store: pin %s: %w", tool, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.GetPin(ctx, tool)
}

// GetPin returns tool's pin, or ErrNotFound.
func (s *Store) GetPin(ctx context.Context, tool string) (*store.Pin, error) {
	var p *store.Pin
	err := s.read(ctx, func(c *pgx.Conn) error {
		var err error
		p, err = scanPin(c.QueryRow(ctx, `SELECT `+pinCols+` FROM pins WHERE tool = $1`, tool))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres store: pin %s: %w", tool, err)
	}
	return p, nil
}

// AcceptPin makes the seen hash, which must be hash, the accepted one: one
// conditional UPDATE, so a definition seen meanwhile by another replica is
// never accepted unreviewed.
func (s *Store) AcceptPin(ctx context.Context, tool, hash, by string, now time.Time) error {
	return s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE pins SET accepted_hash = $2, accepted_by = $3, updated_at = $4 WHERE tool = $1 AND seen_hash = $2`,
			tool, hash, by, ts(now))
		if err != nil {
			return fmt.Errorf("postgres store: pin %s: %w", tool, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var one int
		err = c.QueryRow(ctx, `SELECT 1 FROM pins WHERE tool = $1`, tool).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres store: pin %s: %w", tool, err)
		}
		return fmt.Errorf("pin %s: %w", tool, store.ErrPinChanged)
	})
}

// ListPins lists every pin by tool name.
func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	var out []store.Pin
	err := s.read(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT `+pinCols+` FROM pins ORDER BY tool COLLATE "C"`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Pin, error) {
			p, err := scanPin(r)
			if err != nil {
				return store.Pin{}, err
			}
			return *p, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: list pins: %w", err)
	}
	return out, nil
}

func scanPin(r pgx.Row) (*store.Pin, error) {
	var p store.Pin
	var first, updated pgtype.Timestamptz
	if err := r.Scan(&p.Tool, &p.AcceptedHash, &p.SeenHash, &p.AcceptedBy, &first, &updated); err != nil {
		return nil, err
	}
	p.FirstSeen, p.UpdatedAt = fromTS(first), fromTS(updated)
	return &p, nil
}
