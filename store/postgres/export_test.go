package postgres

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// PauseRenewal stops renewing the lease (the goroutine keeps running
// Recover) until the returned function is called: a test's way to let a
// live replica's lease expire.
func (s *Store) PauseRenewal() (resume func()) {
	s.renewPaused.Store(true)
	return func() { s.renewPaused.Store(false) }
}

// Lost reports whether the store has learnt that it was declared dead.
func (s *Store) Lost() bool { return s.lost.Load() }

// MigrateTo brings schema on c to version (an older one), for upgrade
// tests.
func MigrateTo(ctx context.Context, c *pgx.Conn, schema string, version int) error {
	saved := migrations
	migrations = migrations[:version]
	defer func() { migrations = saved }()
	return migrate(ctx, c, schema, slog.New(slog.DiscardHandler))
}
