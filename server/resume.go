package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultResumeGrace is how long, by default, a call whose HTTP request
// dropped waits for its client to resume.
const DefaultResumeGrace = 10 * time.Second

// DefaultResumeBytes bounds the in-memory event store of the HTTP
// handler by default.
const DefaultResumeBytes = 8 << 20

// eventStore keeps the events of the HTTP streams, each with an id, so
// that a client whose connection dropped during a long call or an approval
// wait reconnects with Last-Event-ID and gets what it missed, the answer
// included. It is bounded: past ResumeBytes the oldest events are dropped
// (a client that comes back for them gets an error, not a wrong answer).
// It is nil (no resumption) when ResumeBytes is negative.
func (s *Server) eventStore() mcp.EventStore {
	n := s.opts.ResumeBytes
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = DefaultResumeBytes
	}
	es := mcp.NewMemoryEventStore(nil)
	es.SetMaxBytes(n)
	return es
}

// sessionRequest counts an HTTP request of session in progress; the
// returned function ends it.
func (s *Server) sessionRequest(session string) func() {
	if session == "" {
		return func() {}
	}
	v, _ := s.live.LoadOrStore(session, new(atomic.Int64))
	n := v.(*atomic.Int64)
	n.Add(1)
	return func() {
		// The counter of a session that ended (or never was) goes with
		// its last request; an open one's stays for cancelUnlessResumed.
		if n.Add(-1) == 0 {
			if _, open := s.openSessions.Load(session); !open {
				s.live.CompareAndDelete(session, v)
			}
		}
	}
}

// sessionOpened records an initialized HTTP session until it ends; then
// its request counter is forgotten (one per session would otherwise stay
// for the life of the process).
func (s *Server) sessionOpened(ss *mcp.ServerSession) {
	id := ss.ID()
	s.openSessions.Store(id, struct{}{})
	go func() {
		ss.Wait()
		s.openSessions.Delete(id)
		if v, ok := s.live.Load(id); ok && v.(*atomic.Int64).Load() == 0 {
			s.live.CompareAndDelete(id, v)
		}
	}()
}

// liveCounters is how many HTTP sessions have a request counter (tests).
func (s *Server) liveCounters() int {
	n := 0
	s.live.Range(func(any, any) bool { n++; return true })
	return n
}

// cancelUnlessResumed runs when the HTTP request of a call ends before the
// call: the call is cancelled (its client went away: it must not consume
// an approval), unless streams are resumable and the session has a request
// in progress again within the grace (the client reconnected, with
// Last-Event-ID, to get the answer).
func (s *Server) cancelUnlessResumed(ctx context.Context, ss *mcp.ServerSession, cancel context.CancelFunc) {
	grace := s.opts.ResumeGrace
	if grace == 0 {
		grace = DefaultResumeGrace
	}
	if grace < 0 || s.opts.ResumeBytes < 0 || ss == nil || ss.ID() == "" {
		cancel()
		return
	}
	v, _ := s.live.LoadOrStore(ss.ID(), new(atomic.Int64))
	n := v.(*atomic.Int64)
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				cancel()
				return
			case <-tick.C:
				if n.Load() > 0 {
					return // resumed
				}
			}
		}
	}()
}
