package canonjson_test

import (
	"bytes"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// randomInteger returns a decimal integer of 1 to 60 digits, often beyond
// 2^53 where a double cannot hold it.
func randomInteger(r *rand.Rand) string {
	n := 1 + r.IntN(60)
	var b strings.Builder
	if r.IntN(4) == 0 {
		b.WriteByte('-')
	}
	b.WriteByte(byte('1' + r.IntN(9)))
	for i := 1; i < n; i++ {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	return b.String()
}

// otherForms returns literals of the same exact value as the integer lit,
// written differently: each is something a tool may read differently
// (an int or a float, a scale, the text).
func otherForms(lit string) []string {
	digits, neg := strings.CutPrefix(lit, "-")
	sign := ""
	if neg {
		sign = "-"
	}
	forms := []string{
		lit + ".0",
		lit + ".000",
		lit + "e0",
		lit + "E+0",
		lit + "0e-1",
		sign + digits[:1] + "." + digits[1:] + "0e" + strconv.Itoa(len(digits)-1),
	}
	if len(digits) > 1 {
		forms = append(forms, sign+digits[:1]+"."+digits[1:]+"e"+strconv.Itoa(len(digits)-1))
	}
	return forms
}

func exact(t *testing.T, lit string) *big.Rat {
	t.Helper()
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		t.Fatalf("%q is not a decimal", lit)
	}
	return r
}

func digestOf(t *testing.T, doc string) string {
	t.Helper()
	d, err := canonjson.Digest([]byte(doc))
	if err != nil {
		t.Fatalf("digest %s: %v", doc, err)
	}
	return d
}

// Property: two argument documents that differ in one number share a digest
// only when the two literals are the same text; the canonical form keeps the
// number's exact value; member order and whitespace never matter.
func TestDigestPropertyExactNumbers(t *testing.T) {
	seed := uint64(0x5eed_0005)
	r := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %#x", seed)
	byDigest := map[string]string{}
	record := func(lit string) {
		doc := `{"id":` + lit + `,"op":"get"}`
		d := digestOf(t, doc)
		if prev, ok := byDigest[d]; ok && prev != lit {
			t.Fatalf("%s and %s share the digest %s", prev, lit, d)
		}
		byDigest[d] = lit
		// Formatting only: the same digest.
		if d2 := digestOf(t, "{ \"op\" : \"get\" ,\n\t\"id\" : "+lit+" }"); d2 != d {
			t.Fatalf("%s: reordering and whitespace changed the digest", lit)
		}
		// The canonical text holds the exact value.
		v, err := jsonstrict.Decode([]byte(doc), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := canonjson.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		back, err := jsonstrict.Decode(c, nil)
		if err != nil {
			t.Fatalf("canonical %s does not decode: %v", c, err)
		}
		got := string(back.(map[string]any)["id"].(jsonstrict.Number))
		if exact(t, got).Cmp(exact(t, lit)) != 0 || got != lit {
			t.Fatalf("%s came back as %s", lit, got)
		}
	}
	for range 2000 {
		lit := randomInteger(r)
		record(lit)
		// The neighbours a double confuses with it.
		n, _ := new(big.Int).SetString(lit, 10)
		for _, delta := range []int64{1, -1, 100, 1 << 11} {
			record(new(big.Int).Add(n, big.NewInt(delta)).String())
		}
		for _, f := range otherForms(lit) {
			if exact(t, f).Cmp(exact(t, lit)) != 0 {
				t.Fatalf("test bug: %s is not %s", f, lit)
			}
			record(f)
		}
	}
	if len(byDigest) < 2000*5 {
		t.Errorf("only %d distinct literals were tried", len(byDigest))
	}
}

// FuzzCanonical: whatever jsonstrict accepts canonicalises without error to
// a strict document with the same value (numbers as the same text), which
// is its own canonical form and has the same digest.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"id":1234567890123456789}`, `{"id":5.0}`, `[-0,0e10,1E+2,1e-400,1e400]`,
		`{"b":[{"y":1,"x":2}],"a":{"bb":1,"b":2,"B":3},"":0}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"\ud83d\ude00":5}`, `"\u0000\u001f\b\/"`,
		`[true,false,null,{},[],""]`, ` 0.30000000000000000000000000000001 `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := jsonstrict.Decode(data, nil)
		if err != nil {
			if _, derr := canonjson.Digest(data); derr == nil {
				t.Fatalf("Digest accepted what jsonstrict refused: %v", err)
			}
			return
		}
		c, err := canonjson.Append(nil, v)
		if err != nil {
			t.Fatalf("a strict document did not canonicalise: %v", err)
		}
		back, err := jsonstrict.Decode(c, nil)
		if err != nil {
			t.Fatalf("canonical form %q is not strict JSON: %v", c, err)
		}
		if !reflect.DeepEqual(back, v) {
			t.Fatalf("canonical form %q has another value than %q", c, data)
		}
		c2, err := canonjson.Append(nil, back)
		if err != nil || !bytes.Equal(c2, c) {
			t.Fatalf("canonical form is not stable: %q then %q (%v)", c, c2, err)
		}
		d1, err1 := canonjson.Digest(data)
		d2, err2 := canonjson.Digest(c)
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("digests %s (%v) and %s (%v)", d1, err1, d2, err2)
		}
	})
}
