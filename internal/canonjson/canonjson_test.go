package canonjson_test

// Expected outputs come from RFC 8785 (its Appendix B number table and its
// sorting example) and from the ECMAScript Number-to-String rules worked by
// hand, never from running this package.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// canon decodes doc strictly and returns its canonical form.
func canon(t *testing.T, doc string) string {
	t.Helper()
	v, err := jsonstrict.Decode([]byte(doc), nil)
	if err != nil {
		t.Fatalf("decode %q: %v", doc, err)
	}
	b, err := canonjson.Append(nil, v)
	if err != nil {
		t.Fatalf("canonicalise %q: %v", doc, err)
	}
	return string(b)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Number literals are written as they are: every one of these is a form
// some JSON reader tells apart from its neighbours (see the package doc).
func TestNumbersKeptAsWritten(t *testing.T) {
	for _, lit := range []string{
		"1e21", "1E21", "1e+21", "1e021", "1e20", "1e-7", "0.0000001", "100", "-0", "-0.0",
		"0e10", "1.0", "1.50", "-1.5", "123.456e2", "5e-324", "1e300", "1e400",
		"9007199254740993", "1234567890123456789", "-1234567890123456789012345678901234567890",
		"0.30000000000000000000000000000001", "1e-400",
	} {
		if got := canon(t, `[`+lit+`]`); got != `[`+lit+`]` {
			t.Errorf("%s: got %s", lit, got)
		}
	}
}

// The findings of the review: each pair was one digest under the RFC 8785
// number rule, so the approval of one call was used by the other.
func TestDigestSeparatesReviewedPairs(t *testing.T) {
	for _, p := range [][2]string{
		{`{"id":1234567890123456789}`, `{"id":1234567890123456800}`},
		{`{"id":9007199254740993}`, `{"id":9007199254740992}`},
		{`{"id":5}`, `{"id":5.0}`},
		{`{"id":5}`, `{"id":5e0}`},
		{`{"n":0}`, `{"n":-0}`},
		{`{"n":1.5}`, `{"n":1.50}`},
		{`{"n":0.1}`, `{"n":0.1000000000000000055511151231257827}`},
	} {
		a, err := canonjson.Digest([]byte(p[0]))
		if err != nil {
			t.Fatal(err)
		}
		b, err := canonjson.Digest([]byte(p[1]))
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Errorf("%s and %s share the digest %s", p[0], p[1], a)
		}
	}
}

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
func TestNumbersRFC8785AppendixB(t *testing.T) {
	cases := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, c := range cases {
		f := math.Float64frombits(c.bits)
		b, err := canonjson.Append(nil, f)
		if err != nil {
			t.Errorf("%016x: %v", c.bits, err)
			continue
		}
		if string(b) != c.want {
			t.Errorf("%016x: got %s, want %s", c.bits, b, c.want)
		}
		// The same value given as its literal reads back the same.
		if lit := canon(t, `[`+c.want+`]`); lit != `[`+c.want+`]` {
			t.Errorf("literal %s: got %s", c.want, lit)
		}
	}
}

func TestNonFiniteRefused(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := canonjson.Append(nil, f); err == nil {
			t.Errorf("%v was canonicalised", f)
		}
	}
	if _, err := canonjson.Append(nil, struct{}{}); err == nil {
		t.Error("an unsupported Go type was canonicalised")
	}
	// A Number's text goes into the output verbatim: anything but one JSON
	// number literal would forge structure or a different value.
	for _, lit := range []string{"0x10", "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1 ", " 1", "1,2", `1,"a":2`, "NaN", "Infinity", "1.5.5", "--1", "0.", "1ee5", `\u0031`, "١"} {
		if b, err := canonjson.Append(nil, json.Number(lit)); err == nil {
			t.Errorf("json.Number(%q) was canonicalised as %s", lit, b)
		}
		if b, err := canonjson.Append(nil, jsonstrict.Number(lit)); err == nil {
			t.Errorf("jsonstrict.Number(%q) was canonicalised as %s", lit, b)
		}
	}
}

// Literals beyond the double range cannot be written per RFC 8785; they must
// at least never share a digest with a finite value or with each other.
func TestOutOfRangeLiteralsStayDistinct(t *testing.T) {
	d := map[string]string{}
	for _, lit := range []string{"1e400", "2e400", "-1e400", "1.7976931348623157e308"} {
		h, err := canonjson.Digest([]byte(`{"a":` + lit + `}`))
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		if other, dup := d[h]; dup {
			t.Errorf("%s and %s share a digest", lit, other)
		}
		d[h] = lit
	}
}

func TestGoNumberTypes(t *testing.T) {
	v := map[string]any{"i": 7, "i64": int64(-3), "f": 2.50, "n": json.Number("1E2"), "j": jsonstrict.Number("0.10")}
	b, err := canonjson.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"f":2.5,"i":7,"i64":-3,"j":0.10,"n":1E2}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

func TestStrings(t *testing.T) {
	cases := []struct{ in, want string }{
		// Control characters with a short escape use it; the others are
		// \u00xx with lowercase hex.
		{`"\u0000\u0001\u001f"`, `"\u0000\u0001\u001f"`},
		{`"\u001F\u000B"`, `"\u001f\u000b"`},
		{`"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{`"\u0008\u000c\u000a\u000d\u0009"`, `"\b\f\n\r\t"`},
		{`"\"\\"`, `"\"\\"`},
		// Solidus and DEL are not escaped.
		{`"a\/b"`, `"a/b"`},
		{`"\u007f"`, "\"\x7f\""},
		// Non-ASCII is written as UTF-8, never escaped.
		{`"\u00e9\u20ac\ud83d\ude00"`, `"é€😀"`},
		{`"é€😀"`, `"é€😀"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"<&>"`, `"<&>"`},
	}
	for _, c := range cases {
		if got := canon(t, `[`+c.in+`]`); got != `[`+c.want+`]` {
			t.Errorf("%s: got %s, want [%s]", c.in, got, c.want)
		}
	}
}

// Member names sort by UTF-16 code units, not by UTF-8 bytes or code points:
// a character outside the BMP (a surrogate pair, 0xD8xx..) sorts before a
// BMP character at 0xE000 or above.
func TestMemberOrderUTF16(t *testing.T) {
	// RFC 8785 section 3.2.3's example, values shortened.
	in := `{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`
	want := "{\"\\r\":2,\"1\":4,\"\u0080\":6,\"ö\":7,\"€\":1,\"😀\":5,\"\ufb33\":3}"
	if got := canon(t, in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// U+10000 is D800 DC00 in UTF-16, below U+FFFF; in code points and in
	// UTF-8 it is above.
	in = `{"\uffff":"bmp","\ud800\udc00":"astral","\ue000":"private","z":"ascii"}`
	want = "{\"z\":\"ascii\",\"\U00010000\":\"astral\",\"\ue000\":\"private\",\"\uffff\":\"bmp\"}"
	if got := canon(t, in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Plain ASCII, prefixes first, nested objects sorted too, arrays kept.
	in = `{"b":[{"y":1,"x":2}],"a":{"bb":1,"b":2,"B":3},"":0}`
	want = `{"":0,"a":{"B":3,"b":2,"bb":1},"b":[{"x":2,"y":1}]}`
	if got := canon(t, in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestLiterals(t *testing.T) {
	if got := canon(t, ` [ true , false , null , { } , [ ] , "" ] `); got != `[true,false,null,{},[],""]` {
		t.Errorf("got %s", got)
	}
}

func TestDigestIgnoresFormattingOnly(t *testing.T) {
	canonical := `{"a":[1,2.0,{"c":"é","d":null}],"b":1e+21,"x":0.5}`
	want := canonjson.DigestVersion + sha(canonical)
	for _, doc := range []string{
		canonical,
		`{"x":0.5,"b":1e+21,"a":[1,2.0,{"d":null,"c":"é"}]}`,
		"{\n  \"b\" : 1e+21 ,\n\t\"a\" : [ 1 , 2.0 , { \"c\" : \"\\u00e9\" , \"d\" : null } ] , \"x\" : 0.5\n}\n",
	} {
		got, err := canonjson.Digest([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if got != want {
			t.Errorf("digest of %q is %s, want sha256 of the canonical form %s", doc, got, want)
		}
	}
}

func TestDigestDistinguishesValues(t *testing.T) {
	docs := []string{
		`{"a":1}`, `{"a":2}`, `{"a":"1"}`, `{"a":true}`, `{"a":null}`, `{"a":[1]}`, `{"a":{}}`,
		`{"b":1}`, `{"A":1}`, `{"a":1,"b":1}`, `[1,2]`, `[2,1]`, `{"a":"x "}`, `{"a":"X"}`,
		`{"a":1.5}`, `{"a":-1}`, `{"a":""}`, `{"a":[]}`, `{"a":"\u0000"}`,
	}
	seen := map[string]string{}
	for _, doc := range docs {
		h, err := canonjson.Digest([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		hexPart, ok := strings.CutPrefix(h, canonjson.DigestVersion)
		if _, err := hex.DecodeString(hexPart); !ok || err != nil || len(hexPart) != 64 || strings.ToLower(h) != h {
			t.Errorf("digest %q is not lowercase hex SHA-256", h)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("%s and %s share a digest", doc, prev)
		}
		seen[h] = doc
	}
}

func TestDigestRefusesInvalidJSON(t *testing.T) {
	for _, doc := range []string{``, `{`, `{"a":1,"a":1}`, `{"a":1} x`, "\"\xff\"", `"\ud800"`, `{'a':1}`} {
		if _, err := canonjson.Digest([]byte(doc)); err == nil {
			t.Errorf("%q was digested", doc)
		}
	}
}

func TestDigestValueMatchesDigest(t *testing.T) {
	v := map[string]any{"name": "note", "n": 3, "tags": []any{"a", true, nil}}
	a, err := canonjson.DigestValue(v)
	if err != nil {
		t.Fatal(err)
	}
	b, err := canonjson.Digest([]byte(`{"tags":["a",true,null],"n":3,"name":"note"}`))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a != canonjson.DigestVersion+sha(`{"n":3,"name":"note","tags":["a",true,null]}`) {
		t.Errorf("DigestValue %s, Digest %s", a, b)
	}
}
