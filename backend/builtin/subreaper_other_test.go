//go:build !linux

package builtin

// setSubreaper: only Linux has child subreapers (the tests compile
// elsewhere: GOOS=darwin go vet).
func setSubreaper() bool { return false }
