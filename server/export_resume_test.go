package server

// ActiveCalls is the number of calls in flight, for tests.
func ActiveCalls(s *Server) int64 { return s.active.Load() }

// LiveCounters is how many HTTP sessions have a request counter, for tests.
func LiveCounters(s *Server) int { return s.liveCounters() }

// Drops is how many calls saw their HTTP request end before them, for tests.
func Drops(s *Server) int64 { return s.drops.Load() }
