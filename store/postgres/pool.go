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

// prepare makes each of the statements (SQL texts) a named prepared
// statement of c, unless it already is: the server then parses and plans
// it once per connection instead of at every execution, and pgx sends a
// statement so prepared (by its text, in a batch too) as Bind and Execute
// only. They are prepared here, each in a round trip of its own, and not
// by the batches that use them (the connection's DefaultQueryExecMode
// prepares nothing): after an error inside a pipelined batch the server
// skips the batch's later Parse messages, which would leave pgx believing
// in statements that do not exist. Only the statements every call runs are
// worth it; a connection that fails is closed (see release), and its
// replacement prepares them again.
func prepare(ctx context.Context, c *pgx.Conn, sqls ...string) error {
	for _, q := range sqls {
		if _, err := c.Prepare(ctx, q, q); err != nil {
			return err
		}
	}
	return nil
}
