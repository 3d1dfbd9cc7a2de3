package server

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The HTTP sessions of each caller, for the per-caller cap and for
// operators (Server.Sessions, /metrics, the console).
//
// Clients that never end their session are common: the TypeScript SDK's
// client.close() and the MCP Inspector CLI close their transport without
// the DELETE that ends the session. Refusing new sessions at the cap would
// lock such a caller out until the idle timeout (30 minutes by default)
// closed its old ones, so at the cap a new session closes the caller's
// least recently used session that has nothing in flight instead; only
// when every session of the caller is busy is the new one refused (429).

// sessionEntry is what the server knows of one HTTP session.
type sessionEntry struct {
	caller     string
	ss         *mcp.ServerSession
	opened     time.Time
	lastActive time.Time
	// inFlight counts the session's HTTP requests in progress (the
	// standalone GET stream a live client holds open included) and its
	// tool calls still running (one whose request dropped, waiting for a
	// resumption, included): a session with any is in use, never evicted.
	inFlight int
}

// sessions tracks whose each HTTP session is, for the per-caller cap.
type sessions struct {
	mu      sync.Mutex
	byID    map[string]*sessionEntry // session id -> its entry
	pending map[string]int           // caller -> sessions being created, not yet recorded
	// converted counts, per caller, requests whose session was recorded
	// (it moved from pending to byID) while the request still runs: the
	// client may send its next initialize before the handler returns.
	converted map[string]int
}

// SessionInfo describes one open HTTP session, for operators.
type SessionInfo struct {
	Caller string
	// ID is the session's Mcp-Session-Id. It is no credential on its own
	// (a session answers only to the caller that opened it), but pages
	// show only its start (SessionIDPrefix).
	ID         string
	Opened     time.Time
	LastActive time.Time
	InFlight   int
}

// recordSession notes that the session ss (just initialized) is caller's.
func (s *Server) recordSession(ss *mcp.ServerSession, caller string) {
	if ss == nil || ss.ID() == "" {
		return // stdio: one session, nothing to bound
	}
	s.sessionOpened(ss)
	now := time.Now()
	s.sess.mu.Lock()
	s.sess.byID[ss.ID()] = &sessionEntry{caller: caller, ss: ss, opened: now, lastActive: now}
	if s.sess.pending[caller] > 0 {
		s.sess.pending[caller]--
		s.sess.converted[caller]++
	}
	s.sess.mu.Unlock()
}

// sessionActive counts one request or call of session (delta +1 when it
// starts, -1 when it ends) and marks the session used now. A session the
// server does not know (ended, evicted, or another caller's: ownership is
// checked by the caller of this) is left alone.
func (s *Server) sessionActive(session string, delta int) {
	if session == "" {
		return
	}
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	if e, ok := s.sess.byID[session]; ok {
		e.inFlight = max(e.inFlight+delta, 0)
		e.lastActive = time.Now()
	}
}

// liveSessionsLocked counts caller's open HTTP sessions, forgetting the
// closed ones. The caller holds s.sess.mu.
func (s *Server) liveSessionsLocked(caller string) int {
	live := map[string]bool{}
	for ss := range s.http.Sessions() {
		live[ss.ID()] = true
	}
	n := 0
	for id, e := range s.sess.byID {
		switch {
		case !live[id]:
			delete(s.sess.byID, id)
		case e.caller == caller:
			n++
		}
	}
	return n
}

// idleVictimLocked removes from the table, and returns, caller's least
// recently used session with nothing in flight; nil when every one is
// busy. The caller holds s.sess.mu (and has just pruned the closed ones).
func (s *Server) idleVictimLocked(caller string) (string, *sessionEntry) {
	var id string
	var victim *sessionEntry
	for sid, e := range s.sess.byID {
		if e.caller != caller || e.inFlight > 0 {
			continue
		}
		if victim == nil || e.lastActive.Before(victim.lastActive) {
			id, victim = sid, e
		}
	}
	if victim != nil {
		delete(s.sess.byID, id)
	}
	return id, victim
}

// SessionCount returns how many HTTP sessions caller holds open.
func (s *Server) SessionCount(caller string) int {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	return s.liveSessionsLocked(caller)
}

// Sessions lists the open HTTP sessions, by caller, oldest first.
func (s *Server) Sessions() []SessionInfo {
	s.sess.mu.Lock()
	s.liveSessionsLocked("")
	out := make([]SessionInfo, 0, len(s.sess.byID))
	for id, e := range s.sess.byID {
		out = append(out, SessionInfo{Caller: e.caller, ID: id, Opened: e.opened, LastActive: e.lastActive, InFlight: e.inFlight})
	}
	s.sess.mu.Unlock()
	slices.SortFunc(out, func(a, b SessionInfo) int {
		return cmp.Or(cmp.Compare(a.Caller, b.Caller), a.Opened.Compare(b.Opened), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// SessionIDPrefix is as much of a session id as pages show: enough to
// tell sessions apart, not the whole identifier.
func SessionIDPrefix(id string) string {
	const n = 8
	if len(id) <= n {
		return id
	}
	return id[:n] + "…"
}

// limitSessions holds a request that would open a session (a POST without
// Mcp-Session-Id) to its caller's cap, counting those being opened: at the
// cap, the caller's least recently used idle session is closed to make
// room (logged and counted); when every one is in use, the request is
// answered 429.
func (s *Server) limitSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		max := s.opts.MaxSessionsPerCaller
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || max < 0 {
			next.ServeHTTP(w, r)
			return
		}
		id, _ := identFrom(r.Context()) // requireToken put it there
		caller := id.caller
		s.sess.mu.Lock()
		open := s.liveSessionsLocked(caller) + s.sess.pending[caller]
		var victimID string
		var victim *sessionEntry
		if open >= max {
			victimID, victim = s.idleVictimLocked(caller)
			if victim == nil {
				s.sess.mu.Unlock()
				s.metrics.limited.WithLabelValues(caller, "sessions").Inc()
				s.refusals.warn(s.log, "sessions "+caller, "session refused: every session of the caller is in use", "caller", caller, "open", open, "max", max)
				w.Header().Set("Retry-After", "60")
				http.Error(w, fmt.Sprintf(
					"caller %s already holds %d MCP sessions, the most allowed (serve.max_sessions_per_caller), and every one has a request or stream in progress: end one with DELETE, or try again once one is idle",
					caller, open), http.StatusTooManyRequests)
				return
			}
		}
		s.sess.pending[caller]++
		s.sess.mu.Unlock()
		if victim != nil {
			// Closed outside the lock (Close waits for the session's
			// handlers) and without waiting: the table no longer counts
			// it, and a request that raced in gets the SDK's 404, which
			// tells a client to start a new session.
			go victim.ss.Close()
			s.metrics.evicted.WithLabelValues(caller).Inc()
			s.log.Info("idle session closed to make room for a new one: the caller was at serve.max_sessions_per_caller",
				"caller", caller, "session", SessionIDPrefix(victimID), "idle", time.Since(victim.lastActive).Round(time.Second).String(), "max", max)
		}
		defer func() {
			s.sess.mu.Lock()
			if s.sess.converted[caller] > 0 {
				if s.sess.converted[caller]--; s.sess.converted[caller] == 0 {
					delete(s.sess.converted, caller)
				}
			} else if s.sess.pending[caller]--; s.sess.pending[caller] <= 0 {
				delete(s.sess.pending, caller)
			}
			s.sess.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}
