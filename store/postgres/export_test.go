package postgres

import (
	"context"
	"errors"
	"log/slog"

	"github.com/agentbackplane/backplane/store"
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

// CommitTogether commits reqs as one group (see group.go), for tests that
// need a group of a known composition.
func (s *Store) CommitTogether(reqs ...*store.CommitRequest) error {
	jobs := make([]*commitJob, len(reqs))
	for i, r := range reqs {
		jobs[i] = &commitJob{ctx: context.Background(), req: r, done: make(chan struct{})}
	}
	return s.commitTogether(jobs)
}

// SettleTogether settles the call ids as one group and returns those it
// settled. The seq of an intent this Store no longer counts as open (it
// settled it) is read from the database, so that the group's own
// conditions are what refuses it; a call id of no intent gets seq -1.
func (s *Store) SettleTogether(st store.Settlement, callIDs ...string) (map[string]bool, error) {
	ctx := context.Background()
	jobs := make([]*settleJob, len(callIDs))
	for i, id := range callIDs {
		seq, ok := s.openSeq(id)
		if !ok {
			seq = -1
			err := s.conn(ctx, func(c *pgx.Conn) error {
				err := c.QueryRow(ctx, `SELECT seq FROM intents WHERE call_id = $1`, id).Scan(&seq)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		jobs[i] = &settleJob{ctx: ctx, callID: id, seq: seq, st: st, done: make(chan struct{})}
	}
	settled, err := s.settleTogether(jobs)
	byID := map[string]bool{}
	for _, j := range jobs {
		if settled[j.seq] {
			byID[j.callID] = true
			s.forget(j.callID)
		}
	}
	return byID, err
}
