package server

// ActiveCalls is the number of calls in flight, for tests.
func ActiveCalls(s *Server) int64 { return s.active.Load() }

// LiveCounters is how many HTTP sessions have a request counter, for tests.
func LiveCounters(s *Server) int { return s.liveCounters() }
