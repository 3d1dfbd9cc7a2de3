package postgres

// PauseRenewal stops renewing the lease (the goroutine keeps running
// Recover) until the returned function is called: a test's way to let a
// live replica's lease expire.
func (s *Store) PauseRenewal() (resume func()) {
	s.renewPaused.Store(true)
	return func() { s.renewPaused.Store(false) }
}

// Lost reports whether the store has learnt that it was declared dead.
func (s *Store) Lost() bool { return s.lost.Load() }
