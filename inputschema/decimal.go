package inputschema

import (
	"math/big"
)

// Numbers are compared on their decimal text (D12, D13), never through
// float64: a gateway must not accept 0.99999999999999999999 for minimum 1.

// text is what a number literal can be held in: the input bytes of a call,
// or a string (a schema literal, a json.Number, a formatted float).
type text interface{ ~string | ~[]byte }

// dec is a parsed decimal literal: value = ±0.D × 10^exp where D, the
// significant digits, is a ++ b with no leading or trailing zeros. Zero has
// no digits. The digits stay in the literal, so parsing allocates nothing.
type dec[T text] struct {
	neg  bool
	a, b T
	exp  int64
	// bigExp holds the exponent instead of exp when the literal's exponent is
	// too large for int64 arithmetic (such as 1e99999999999999999999).
	bigExp *big.Int
}

// maxSmallExp bounds exponents kept in an int64: far from overflow even
// after adding the digit count of a document within the size limits.
const maxSmallExp = 1 << 60

func (d *dec[T]) zero() bool { return len(d.a)+len(d.b) == 0 }

func (d *dec[T]) ndigits() int { return len(d.a) + len(d.b) }

func (d *dec[T]) digit(i int) byte {
	if i < len(d.a) {
		return d.a[i]
	}
	if i-len(d.a) < len(d.b) {
		return d.b[i-len(d.a)]
	}
	return '0'
}

// parseDec parses a JSON number literal (RFC 8259 grammar, also accepting a
// leading '+' in the exponent as strconv writes it). ok is false when s is
// not a number literal.
func parseDec[T text](s T) (d dec[T], ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[start:i]
	if len(intPart) == 0 || (len(intPart) > 1 && intPart[0] == '0') {
		return d, false
	}
	var frac T
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == fs {
			return d, false
		}
		frac = s[fs:i]
	}
	var exp int64
	var bigExp *big.Int
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		es := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if exp < maxSmallExp {
				exp = exp*10 + int64(s[i]-'0')
			}
			i++
		}
		if i == es {
			return d, false
		}
		if exp >= maxSmallExp {
			bigExp, _ = new(big.Int).SetString(string(s[es:i]), 10)
			if eneg {
				bigExp.Neg(bigExp)
			}
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		return d, false
	}
	// value = 0.(intPart frac) × 10^(exp + len(intPart)); normalise the digits.
	shift := int64(len(intPart))
	a, b := intPart, frac
	for len(a) > 0 && a[0] == '0' {
		a = a[1:]
		shift--
	}
	if len(a) == 0 {
		for len(b) > 0 && b[0] == '0' {
			b = b[1:]
			shift--
		}
	}
	for len(b) > 0 && b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		for len(a) > 0 && a[len(a)-1] == '0' {
			a = a[:len(a)-1]
		}
	}
	d.a, d.b = a, b
	if d.zero() {
		d.neg = false
		return d, true
	}
	if bigExp != nil {
		d.bigExp = bigExp.Add(bigExp, big.NewInt(shift))
	} else {
		d.exp = exp + shift
	}
	return d, true
}

// isInteger reports whether the value has no fractional part (D12).
func (d *dec[T]) isInteger() bool {
	if d.zero() {
		return true
	}
	if d.bigExp != nil {
		return d.bigExp.Sign() > 0
	}
	return d.exp >= int64(d.ndigits())
}

// cmpDec compares two decimals exactly: -1, 0 or +1.
func cmpDec[T, U text](x *dec[T], y *dec[U]) int {
	xs, ys := sign(x), sign(y)
	if xs != ys {
		if xs < ys {
			return -1
		}
		return 1
	}
	if xs == 0 {
		return 0
	}
	m := cmpMagnitude(x, y)
	if xs < 0 {
		return -m
	}
	return m
}

func sign[T text](d *dec[T]) int {
	switch {
	case d.zero():
		return 0
	case d.neg:
		return -1
	}
	return 1
}

func cmpMagnitude[T, U text](x *dec[T], y *dec[U]) int {
	if c := cmpExp(x, y); c != 0 {
		return c
	}
	n := max(x.ndigits(), y.ndigits())
	for i := 0; i < n; i++ {
		if dx, dy := x.digit(i), y.digit(i); dx != dy {
			if dx < dy {
				return -1
			}
			return 1
		}
	}
	return 0
}

func cmpExp[T, U text](x *dec[T], y *dec[U]) int {
	if x.bigExp == nil && y.bigExp == nil {
		switch {
		case x.exp < y.exp:
			return -1
		case x.exp > y.exp:
			return 1
		}
		return 0
	}
	return expOf(x).Cmp(expOf(y))
}

func expOf[T text](d *dec[T]) *big.Int {
	if d.bigExp != nil {
		return d.bigExp
	}
	return big.NewInt(d.exp)
}
