package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DiedMessage is the error message of intents recovery marks uncertain.
const DiedMessage = "the gateway replica died or lost its lease while the call was in progress (incarnation %s); its outcome is unknown and it will not be re-run"

// Recover declares dead every other incarnation whose lease has expired
// (on the database's clock), marks uncertain the started intents of every
// incarnation that is not alive (just declared dead, or closed earlier
// with calls in progress), and returns how many intents it marked.
//
// It is one transaction. The expired incarnations are locked FOR UPDATE
// first, which waits for their commits in flight (CommitIntent share-locks
// its incarnation's row) and re-checks the lease once it has the lock, so a
// lease renewed meanwhile is left alone; after this transaction commits,
// their CommitIntent and Settle are refused.
func (s *Store) Recover(ctx context.Context) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.inflight.Done()
	return s.recover(ctx)
}

func (s *Store) recover(ctx context.Context) (int, error) {
	var dead []string
	marked := map[string]int{}
	total := 0
	err := s.writeConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
		return s.runTx(ctx, c, func(ctx context.Context, tx pgx.Tx) error {
			dead, total = dead[:0], 0
			clear(marked)
			rows, err := tx.Query(ctx, `SELECT id FROM incarnations
				WHERE state = 'alive' AND id <> $1 AND lease_expires_at < now()
				ORDER BY id FOR UPDATE`, s.incarnation)
			if err != nil {
				return err
			}
			if dead, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			if len(dead) > 0 {
				if _, err := tx.Exec(ctx, `UPDATE incarnations SET state = 'dead', ended_at = now() WHERE id = ANY($1)`, dead); err != nil {
					return err
				}
			}
			// Started intents of any incarnation not alive: the ones just
			// declared dead, and closed ones that left calls in progress.
			// Each gets its settlement row, uncertain, and leaves
			// open_intents.
			rows, err = tx.Query(ctx, `WITH o AS (DELETE FROM open_intents
					WHERE incarnation IN (SELECT id FROM incarnations WHERE state <> 'alive')
					RETURNING seq, incarnation),
				s AS (INSERT INTO settlements (seq, status, error_class, error_message, settled_at)
					SELECT seq, 'uncertain', 'unknown_outcome', format($1, incarnation), now() FROM o)
				SELECT incarnation FROM o`, DiedMessage)
			if err != nil {
				return err
			}
			incs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, id := range incs {
				marked[id]++
			}
			total = len(incs)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("postgres store: recover: %w", err)
	}
	for _, id := range dead {
		s.log.Warn("declared a replica dead: its lease expired; its started intents are now uncertain",
			"dead_incarnation", id, "intents", marked[id])
		delete(marked, id)
	}
	for id, n := range marked {
		s.log.Warn("marked uncertain the intents a closed replica left started", "closed_incarnation", id, "intents", n)
	}
	return total, nil
}

// keepAlive renews the lease every renewEvery and runs Recover every
// leaseTTL until ctx ends.
func (s *Store) keepAlive(ctx context.Context) {
	defer close(s.keepDone)
	renew := time.NewTicker(s.renewEvery)
	defer renew.Stop()
	recov := time.NewTicker(s.leaseTTL)
	defer recov.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if !s.renewPaused.Load() && !s.lost.Load() {
				s.renew(ctx)
			}
		case <-recov.C:
			rctx, cancel := context.WithTimeout(ctx, s.leaseTTL)
			if _, err := s.recover(rctx); err != nil && ctx.Err() == nil {
				s.log.Warn("periodic recovery failed", "error", err)
			}
			cancel()
		}
	}
}

// renew extends the lease to leaseTTL from now on the database's clock,
// unless the incarnation is no longer alive: then it was declared dead by
// another replica, and the store is lost.
func (s *Store) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.renewEvery)
	defer cancel()
	var lapsed bool
	var state string
	err := s.conn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, `UPDATE incarnations i SET lease_expires_at = clock_timestamp() + $2 * interval '1 microsecond'
			FROM (SELECT lease_expires_at FROM incarnations WHERE id = $1) old
			WHERE i.id = $1 AND i.state = 'alive'
			RETURNING old.lease_expires_at < clock_timestamp()`, s.incarnation, s.leaseTTL.Microseconds()).Scan(&lapsed)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err = c.QueryRow(ctx, `SELECT state FROM incarnations WHERE id = $1`, s.incarnation).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			state = "missing"
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
			s.log.Warn("lease renewal failed; calls will be refused if the lease expires", "error", err)
		}
	case state == "dead" || state == "missing":
		s.lose()
	case lapsed:
		s.log.Warn("the lease had expired before this renewal; no replica had declared this one dead, so it goes on")
	}
}

// lose records that another replica declared this incarnation dead.
func (s *Store) lose() {
	if s.lost.CompareAndSwap(false, true) {
		s.log.Error("LEASE LOST: another replica declared this one dead after its lease expired and marked its calls in progress uncertain; this store now refuses every call; restart the process")
	}
}
