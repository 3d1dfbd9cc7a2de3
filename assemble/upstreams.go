package assemble

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// A server that fails at start (its program missing or crashing, its URL
// unreachable) would otherwise refuse the whole start, so that one broken
// upstream takes every other tool down with it. Unless it is marked
// required, the gateway serves without it (degraded: /healthz, /metrics
// and the console say it is down) and retries it with backoff; once it
// connects its tools are registered (the gateway announces the change) and
// it is supervised like the others. Its resources and prompts are not
// served: the content of the upstreams is assembled once, at start.

// Backoff of the retries of a server that failed at start.
const (
	lateMinBackoff = time.Second
	lateMaxBackoff = time.Minute
)

// lateUpstreams holds the servers that failed at start.
type lateUpstreams struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	failed map[string]error              // server name -> its last failure, while not connected
	up     map[string]*upstream.Upstream // connected by a retry
	order  []*upstream.Upstream
	wake   map[string]chan struct{} // server name -> its retry's "try now" (now)
}

func newLateUpstreams() *lateUpstreams {
	ctx, cancel := context.WithCancel(context.Background())
	return &lateUpstreams{ctx: ctx, cancel: cancel, failed: map[string]error{}, up: map[string]*upstream.Upstream{}, wake: map[string]chan struct{}{}}
}

// retry records that s failed with err and retries it until it connects
// or Close.
func (l *lateUpstreams) retry(s config.ServerConfig, srv upstream.Server, opts *upstream.Options, err error, log *slog.Logger) {
	wake := make(chan struct{}, 1)
	l.mu.Lock()
	l.failed[s.Name] = err
	l.wake[s.Name] = wake
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		delay := lateMinBackoff
		for {
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(delay):
			case <-wake:
				delay = lateMinBackoff // what it lacked may be there now: back off from the start
			}
			delay = min(delay*2, lateMaxBackoff)
			u, err := upstream.Connect(l.ctx, srv, opts)
			l.mu.Lock()
			if err == nil && l.ctx.Err() != nil {
				// Close ran meanwhile: this connection is ours to stop.
				l.mu.Unlock()
				u.Close()
				return
			}
			if err != nil {
				if l.ctx.Err() == nil {
					l.failed[s.Name] = err
				}
				l.mu.Unlock()
				if l.ctx.Err() != nil {
					return
				}
				log.Warn("upstream still failing to start", "server", s.Name, "error", err.Error(), "retry_in", delay.String())
				continue
			}
			delete(l.failed, s.Name)
			delete(l.wake, s.Name)
			l.up[s.Name] = u
			l.order = append(l.order, u)
			l.mu.Unlock()
			log.Info("upstream started after failing at start: no longer degraded", "server", s.Name)
			return
		}
	}()
}

// now makes the named server's retry try at once, when it is waiting:
// what it failed for may be there now (an operator's login from the
// console saved its token).
func (l *lateUpstreams) now(name string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.wake[name]; ok {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// failure is why the named server is not connected, nil when it is or
// never failed.
func (l *lateUpstreams) failure(name string) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed[name]
}

// connected lists the servers a retry connected.
func (l *lateUpstreams) connected() []*upstream.Upstream {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*upstream.Upstream(nil), l.order...)
}

// Close stops the retries and closes what they connected.
func (l *lateUpstreams) Close() error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	order := l.order
	l.order, l.up = nil, map[string]*upstream.Upstream{}
	l.mu.Unlock()
	var errs []error
	for i := len(order) - 1; i >= 0; i-- {
		errs = append(errs, order[i].Close())
	}
	return errors.Join(errs...)
}

// allUpstreams are the servers connected at start, then those connected
// later.
func (rt *Runtime) allUpstreams() []*upstream.Upstream {
	return append(append([]*upstream.Upstream(nil), rt.upstreams...), rt.late.connected()...)
}
