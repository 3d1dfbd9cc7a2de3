package server

// ActiveCalls is the number of calls in flight, for tests.
func ActiveCalls(s *Server) int64 { return s.active.Load() }
