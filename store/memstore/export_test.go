package memstore

// SetMaxRefusals lowers the refusals kept, for a test; it returns the undo.
func SetMaxRefusals(n int) func() {
	old := maxRefusals
	maxRefusals = n
	return func() { maxRefusals = old }
}
