package server

import "github.com/modelcontextprotocol/go-sdk/mcp"

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
