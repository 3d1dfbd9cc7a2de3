package mcpstream

import (
	"math/big"
	"strconv"
	"testing"
)

// The short-integer shortcut of requestID accepts exactly the ids the
// exact comparison accepts: every integer of up to 15 digits, and around
// the edges where a float64 stops holding integers.
func TestRequestIDShortIntegers(t *testing.T) {
	exact := func(raw string) bool {
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return false
		}
		r, ok := new(big.Rat).SetString(raw)
		return ok && r.Cmp(new(big.Rat).SetFloat64(f)) == 0
	}
	var ids []string
	for _, n := range []int64{0, 1, 7, 42, 999, 1 << 31, 99999999999999, 999999999999999, 1000000000000000, 1<<53 - 1, 1 << 53, 1<<53 + 1} {
		ids = append(ids, strconv.FormatInt(n, 10), strconv.FormatInt(-n, 10))
	}
	ids = append(ids, "-0", "1.5", "1e3", "9007199254740993", "1234567890123456789")
	for _, raw := range ids {
		_, err := requestID([]byte(raw))
		if got, want := err == nil, exact(raw); got != want {
			t.Errorf("id %s: accepted %v, the exact comparison says %v (%v)", raw, got, want, err)
		}
	}
}
