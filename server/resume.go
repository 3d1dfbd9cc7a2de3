package server

import (
	"bytes"
	"context"
	"net/http"
	"sync"
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

// sessionLive is what the server knows of one HTTP session's requests in
// progress: how many there are (so that the entry is forgotten with the
// session), which of them resume a stream (they carry Last-Event-ID), and
// the calls whose own request dropped, waiting for such a resumption.
//
// Only a resumption counts as the client coming back: a session's other
// requests (the standalone GET stream the TypeScript SDK holds open from
// initialize on, a later unrelated POST) say nothing of whether the client
// still wants the call whose request dropped.
type sessionLive struct {
	requests atomic.Int64

	mu      sync.Mutex
	resumes map[*context.Context]struct{} // live resuming requests
	waiting map[*resumeWaiter]struct{}    // calls waiting for one
}

// resumeWaiter is one dropped call waiting for its client: resumed gets
// the context of the request that resumed the session's stream.
type resumeWaiter struct{ resumed chan context.Context }

// sessionRequest counts an HTTP request of session in progress, and, when
// it resumes a stream (Last-Event-ID), hands its context to the calls
// waiting for their client; the returned function ends it.
func (s *Server) sessionRequest(session string, resuming bool, ctx context.Context) func() {
	if session == "" {
		return func() {}
	}
	v, _ := s.live.LoadOrStore(session, &sessionLive{})
	l := v.(*sessionLive)
	l.requests.Add(1)
	key := &ctx
	if resuming {
		l.mu.Lock()
		if l.resumes == nil {
			l.resumes = map[*context.Context]struct{}{}
		}
		l.resumes[key] = struct{}{}
		for w := range l.waiting {
			select {
			case w.resumed <- ctx:
			default: // already resumed by another request
			}
		}
		l.mu.Unlock()
	}
	return func() {
		if resuming {
			l.mu.Lock()
			delete(l.resumes, key)
			l.mu.Unlock()
		}
		// The entry of a session that ended (or never was) goes with its
		// last request; an open one's stays for cancelUnlessResumed.
		if l.requests.Add(-1) == 0 {
			if _, open := s.openSessions.Load(session); !open {
				s.live.CompareAndDelete(session, v)
			}
		}
	}
}

// ownsSession reports whether the request of ctx was authenticated as the
// caller that opened session.
func (s *Server) ownsSession(ctx context.Context, session string) bool {
	id, ok := identFrom(ctx)
	if !ok || session == "" {
		return false
	}
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	e, known := s.sess.byID[session]
	return known && e.caller == id.caller
}

// awaitResume registers w for a resumption of session; when one is in
// progress already (the client noticed the drop and came back before the
// server did), w gets it at once. The returned function unregisters w.
func (s *Server) awaitResume(session string, w *resumeWaiter) func() {
	v, _ := s.live.LoadOrStore(session, &sessionLive{})
	l := v.(*sessionLive)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting == nil {
		l.waiting = map[*resumeWaiter]struct{}{}
	}
	l.waiting[w] = struct{}{}
	for ctx := range l.resumes {
		select {
		case w.resumed <- *ctx:
		default:
		}
		break
	}
	return func() {
		l.mu.Lock()
		delete(l.waiting, w)
		l.mu.Unlock()
		// The entry of a session that ended meanwhile goes with its
		// last waiter, as with its last request.
		if l.requests.Load() == 0 {
			if _, open := s.openSessions.Load(session); !open {
				s.live.CompareAndDelete(session, v)
			}
		}
	}
}

// sessionOpened records an initialized HTTP session until it ends; then
// its entry is forgotten (one per session would otherwise stay for the
// life of the process).
func (s *Server) sessionOpened(ss *mcp.ServerSession) {
	id := ss.ID()
	s.openSessions.Store(id, struct{}{})
	go func() {
		ss.Wait()
		s.openSessions.Delete(id)
		if v, ok := s.live.Load(id); ok && v.(*sessionLive).requests.Load() == 0 {
			s.live.CompareAndDelete(id, v)
		}
	}()
}

// liveCounters is how many HTTP sessions have an entry (tests).
func (s *Server) liveCounters() int {
	n := 0
	s.live.Range(func(any, any) bool { n++; return true })
	return n
}

// cancelUnlessResumed runs when the HTTP request carrying a call ends
// before the call. The client is away from then on (away is set): a call
// that is approved meanwhile does not go on (the gateway holds it:
// gateway.CallRequest.Away), since a client that closed its transport and
// quit looks the same as one whose connection broke. The call is
// cancelled (its client went away: it must not consume an approval),
// unless streams are resumable and a request of the session resumes a
// stream (Last-Event-ID) within the grace: then the client is back, and
// that request carries the call, watched the same way.
func (s *Server) cancelUnlessResumed(ctx context.Context, ss *mcp.ServerSession, cancel context.CancelFunc, away *atomic.Bool) {
	away.Store(true)
	s.drops.Add(1)
	grace := s.opts.ResumeGrace
	if grace == 0 {
		grace = DefaultResumeGrace
	}
	if grace < 0 || s.opts.ResumeBytes < 0 || ss == nil || ss.ID() == "" {
		cancel()
		return
	}
	w := &resumeWaiter{resumed: make(chan context.Context, 1)}
	unregister := s.awaitResume(ss.ID(), w)
	go func() {
		defer unregister()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			cancel()
		case rctx := <-w.resumed:
			away.Store(false)
			// Once the resuming request ends too, the same again. (It
			// ends at the latest when the session does.)
			stop := context.AfterFunc(rctx, func() { s.cancelUnlessResumed(ctx, ss, cancel, away) })
			context.AfterFunc(ctx, func() { stop() })
		}
	}()
}

// ResumeConflictWait bounds how long a request resuming a stream waits for
// the request the stream began on to let it go.
const ResumeConflictWait = 5 * time.Second

// serveResumption serves a GET that resumes a stream (Last-Event-ID). The
// SDK refuses it (409 Conflict) while the stream is still held by the
// request it began on, and that is the usual case for a client that comes
// back at once: it saw its connection end before this server did (the old
// connection's end is noticed by another goroutine, later under load). A
// client such as the TypeScript SDK's does not retry a refused resumption,
// so its call would wait for an answer that never comes. A conflict is
// therefore retried here, with backoff, until the old request lets the
// stream go, for at most ResumeConflictWait; meanwhile the events of the
// stream are kept in the event store and replayed once it is resumed.
func (s *Server) serveResumption(next http.Handler, w http.ResponseWriter, r *http.Request) {
	deadline := time.Now().Add(ResumeConflictWait)
	delay := 5 * time.Millisecond
	for {
		saved := w.Header().Clone()
		hw := &heldConflict{ResponseWriter: w}
		next.ServeHTTP(hw, r)
		if !hw.conflict {
			return
		}
		if time.Now().Add(delay).After(deadline) || r.Context().Err() != nil {
			hw.release()
			return
		}
		// The refused attempt's headers (http.Error's) go; the next
		// attempt starts from the request's own.
		clear(w.Header())
		for k, v := range saved {
			w.Header()[k] = v
		}
		t := time.NewTimer(delay)
		select {
		case <-r.Context().Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// heldConflict is a response writer that holds back a 409 Conflict
// written before anything else (serveResumption may retry instead of
// sending it); everything else passes through.
type heldConflict struct {
	http.ResponseWriter
	conflict bool // a 409 was written first: held, with its body
	started  bool // something else was written: passed through
	code     int
	body     bytes.Buffer
}

func (h *heldConflict) WriteHeader(code int) {
	if !h.started && !h.conflict && code == http.StatusConflict {
		h.conflict, h.code = true, code
		return
	}
	if h.conflict {
		return
	}
	h.started = true
	h.ResponseWriter.WriteHeader(code)
}

func (h *heldConflict) Write(p []byte) (int, error) {
	if h.conflict {
		return h.body.Write(p)
	}
	h.started = true
	return h.ResponseWriter.Write(p)
}

// FlushError flushes what passed through; a held conflict stays held.
func (h *heldConflict) FlushError() error {
	if h.conflict {
		return nil
	}
	h.started = true
	return http.NewResponseController(h.ResponseWriter).Flush()
}

func (h *heldConflict) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// release sends the held conflict: the wait is over.
func (h *heldConflict) release() {
	h.ResponseWriter.WriteHeader(h.code)
	h.ResponseWriter.Write(h.body.Bytes())
}
