package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
)

const pinCols = `tool, accepted_hash, seen_hash, accepted_by, first_seen, updated_at`

// SeePin records tool's definition hash: accepted at first sight, else the
// newest seen.
func (s *Store) SeePin(ctx context.Context, tool, hash string, now time.Time) (*store.Pin, error) {
	err := s.write1(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO pins (tool, accepted_hash, seen_hash, first_seen, updated_at) VALUES (?1, ?2, ?2, ?3, ?3)
			ON CONFLICT (tool) DO UPDATE SET seen_hash = excluded.seen_hash, updated_at = excluded.updated_at
			WHERE seen_hash <> excluded.seen_hash`, tool, hash, nanos(now))
		if err != nil {
			return fmt.Errorf("sqlite store: pin %s: %w", tool, err)
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
	st, err := s.rstmt(ctx, `SELECT `+pinCols+` FROM pins WHERE tool = ?`)
	if err != nil {
		return nil, err
	}
	var p *store.Pin
	err = retryBusy(ctx, s.log, func() error {
		p, err = scanPin(st.QueryRowContext(ctx, tool))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: pin %s: %w", tool, err)
	}
	return p, nil
}

// AcceptPin makes the seen hash, which must be hash, the accepted one.
func (s *Store) AcceptPin(ctx context.Context, tool, hash, by string, now time.Time) error {
	return s.write(ctx, func(w *wtx) error {
		var seen string
		err := w.queryRow(`SELECT seen_hash FROM pins WHERE tool = ?`, tool).Scan(&seen)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("pin %s: %w", tool, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite store: pin %s: %w", tool, err)
		}
		if seen != hash {
			return fmt.Errorf("pin %s: %w", tool, store.ErrPinChanged)
		}
		_, err = w.exec(`UPDATE pins SET accepted_hash = ?, accepted_by = ?, updated_at = ? WHERE tool = ?`, hash, by, nanos(now), tool)
		return err
	})
}

// ListPins lists every pin by tool name.
func (s *Store) ListPins(ctx context.Context) ([]store.Pin, error) {
	st, err := s.rstmt(ctx, `SELECT `+pinCols+` FROM pins ORDER BY tool`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list pins: %w", err)
	}
	defer rows.Close()
	var out []store.Pin
	for rows.Next() {
		p, err := scanPin(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: list pins: %w", err)
		}
		out = append(out, *p)
	}
	return out, rows.Err()
}

func scanPin(r scanner) (*store.Pin, error) {
	var p store.Pin
	var first, updated sql.NullInt64
	if err := r.Scan(&p.Tool, &p.AcceptedHash, &p.SeenHash, &p.AcceptedBy, &first, &updated); err != nil {
		return nil, err
	}
	p.FirstSeen, p.UpdatedAt = fromNanos(first), fromNanos(updated)
	return &p, nil
}
