package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
)

// pool hands out connections from a pgxpool. pgxpool destroys, rather than
// reuses, a released connection that is closed, busy (its statement was
// interrupted) or left inside a transaction, and pings one that sat idle
// before handing it out again, so a server restart costs a reconnection,
// not a failed call.
type pool struct {
	p *pgxpool.Pool
}

// acquired is one connection checked out of the pool.
type acquired struct {
	*pgx.Conn
	pc *pgxpool.Conn
}

func newPool(cfg *pgx.ConnConfig, max int) (*pool, error) {
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = cfg
	pc.MaxConns = int32(max)
	pc.MinConns = 0
	pc.PingTimeout = 5 * time.Second
	pc.MaxConnIdleTime = 5 * time.Minute
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, err
	}
	return &pool{p: p}, nil
}

// acquire returns a connection for the caller's exclusive use until
// release. It waits for a free connection as long as ctx allows.
func (p *pool) acquire(ctx context.Context) (*acquired, error) {
	c, err := p.p.Acquire(ctx)
	if err != nil {
		if errors.Is(err, puddle.ErrClosedPool) {
			return nil, ErrClosed
		}
		return nil, err
	}
	return &acquired{Conn: c.Conn(), pc: c}, nil
}

// release returns c to the pool, unless the work done with it failed: then
// the connection is closed (and the pool drops it). After an error inside a
// pipelined batch the server skips the batch's later Parse messages, so the
// connection's cache of prepared statements can no longer be trusted.
func (p *pool) release(c *acquired, err error) {
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.Conn.Close(ctx)
		cancel()
	}
	c.pc.Release()
}

func (p *pool) close() { p.p.Close() }
