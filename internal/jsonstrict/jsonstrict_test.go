package jsonstrict_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Offsets in these tables were worked out by hand from the input text. The
// convention they check: an error points at the start of the token at fault
// (the opening quote of a repeated name, the first byte of a bad UTF-8
// sequence, the backslash of a bad escape, the first byte after the value,
// the bracket that opens one level too many, the first byte past the size
// limit). anyOffset marks cases where only the sentinel is checked.
const anyOffset = -1

type refusal struct {
	name   string
	in     string
	opts   *jsonstrict.Options
	want   error
	offset int
}

// checkRefusal decodes c.in and checks the sentinel, the offset and that the
// message names the offset, so callers can find the fault.
func checkRefusal(t *testing.T, c refusal) {
	t.Helper()
	v, err := jsonstrict.Decode([]byte(c.in), c.opts)
	if err == nil {
		t.Errorf("%s: Decode(%q) = %#v, want error %v", c.name, c.in, v, c.want)
		return
	}
	if !errors.Is(err, c.want) {
		t.Errorf("%s: Decode(%q) error = %v, want errors.Is %v", c.name, c.in, err, c.want)
	}
	var se *jsonstrict.Error
	if !errors.As(err, &se) {
		t.Errorf("%s: Decode(%q) error %T is not *jsonstrict.Error", c.name, c.in, err)
		return
	}
	if c.offset != anyOffset && se.Offset != c.offset {
		t.Errorf("%s: Decode(%q) offset = %d, want %d (error %v)", c.name, c.in, se.Offset, c.offset, err)
	}
	if !strings.Contains(err.Error(), "offset "+strconv.Itoa(se.Offset)) {
		t.Errorf("%s: error text %q does not mention offset %d", c.name, err.Error(), se.Offset)
	}
	// Valid and Parse must agree with Decode.
	if verr := jsonstrict.Valid([]byte(c.in), c.opts); !reflect.DeepEqual(verr, err) {
		t.Errorf("%s: Valid error = %v, Decode error = %v", c.name, verr, err)
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{jsonstrict.ErrSyntax, jsonstrict.ErrDuplicateName, jsonstrict.ErrInvalidUTF8,
		jsonstrict.ErrLoneSurrogate, jsonstrict.ErrTrailingData, jsonstrict.ErrTooDeep, jsonstrict.ErrTooLarge}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("sentinel %v matches %v", a, b)
			}
		}
	}
}

func TestDuplicateNames(t *testing.T) {
	cases := []refusal{
		{name: "plain", in: `{"a":1,"a":2}`, offset: 7},
		{name: "spaces", in: `{ "a" : 1 , "a" : 2 }`, offset: 12},
		{name: "empty names", in: `{"":1,"":2}`, offset: 6},
		{name: "unicode escape of the second", in: `{"a":1,"\u0061":2}`, offset: 7},
		{name: "unicode escape of the first", in: `{"\u0061":1,"a":2}`, offset: 12},
		{name: "solidus escape", in: `{"\/":1,"/":2}`, offset: 8},
		{name: "surrogate pair vs UTF-8", in: `{"😀":1,"\ud83d\ude00":2}`, offset: 10},
		{name: "different values", in: `{"a":{"b":1},"a":[2]}`, offset: 13},
		{name: "not adjacent", in: `{"a":1,"b":2,"a":3}`, offset: 13},
		{name: "in a nested object", in: `{"x":{"a":1,"a":2}}`, offset: 12},
		{name: "in an array element", in: `[{},{"a":1,"a":2}]`, offset: 11},
	}
	for _, c := range cases {
		c.want = jsonstrict.ErrDuplicateName
		checkRefusal(t, c)
	}
}

// members builds n members "k00":0, "k01":1, ... joined by commas.
func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`"k%02d":%d`, i, i)
	}
	return out
}

// Objects of more than 16 members take a different duplicate check (sorted
// at close); the same rules must hold there.
func TestDuplicateNamesInLargeObjects(t *testing.T) {
	base := strings.Join(members(20), ",")

	last := `{` + base + `,"k05":"dup"}`
	escaped := `{` + base + `,"\u006b05":"dup"}`
	// Two duplicates: "k12" repeats before "k03" does, so "k12" is reported
	// as a streaming decoder would report it.
	two := `{` + base + `,"k12":1,"k03":2}`
	nested := `{"outer":{` + base + `,"k19":true},"z":0}`
	cases := []refusal{
		{name: "duplicate last", in: last, offset: strings.LastIndex(last, `"k05"`)},
		{name: "escaped duplicate last", in: escaped, offset: strings.LastIndex(escaped, `"\u006b05"`)},
		{name: "first repeat wins", in: two, offset: strings.LastIndex(two, `"k12"`)},
		{name: "nested large", in: nested, offset: strings.LastIndex(nested, `"k19"`)},
	}
	for _, c := range cases {
		c.want = jsonstrict.ErrDuplicateName
		checkRefusal(t, c)
	}
}

func TestSameNamesInDifferentObjectsAreNotDuplicates(t *testing.T) {
	big := `{` + strings.Join(members(20), ",") + `}`
	docs := []string{
		`{"a":{"a":1}}`,
		`{"a":{"b":1},"b":{"a":2}}`,
		`[{"a":1},{"a":1}]`,
		`{"x":{"a":1,"b":2},"y":{"a":1,"b":2}}`,
		`{"a":[{"a":[{"a":null}]}]}`,
		// Large objects inside large objects, with the same names at each level.
		`{"k00":` + big + `,"k01":` + big + `,` + strings.Join(members(20)[2:], ",") + `,"k20":[` + big + `,` + big + `]}`,
		// A large object, closed, then more members of the small outer one.
		`{"a":` + big + `,"k00":1,"k01":2}`,
	}
	for _, d := range docs {
		if _, err := jsonstrict.Decode([]byte(d), nil); err != nil {
			t.Errorf("Decode(%.60q...) = %v, want success", d, err)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	cases := []refusal{
		{name: "0xff", in: "\"\xff\"", offset: 1},
		{name: "0xfe", in: "\"ab\xfe\"", offset: 3},
		{name: "lone continuation byte", in: "\"\x80\"", offset: 1},
		{name: "truncated 3-byte sequence", in: "\"a\xe2\x82\"", offset: 2},
		{name: "truncated at end of input", in: "\"\xe2\x82", offset: 1},
		{name: "truncated 4-byte sequence", in: "\"\xf0\x9f\x98\"", offset: 1},
		{name: "overlong slash", in: "\"\xc0\xaf\"", offset: 1},
		{name: "overlong NUL", in: "\"\xc0\x80\"", offset: 1},
		{name: "overlong 3-byte", in: "\"\xe0\x80\xaf\"", offset: 1},
		{name: "UTF-8 encoded high surrogate", in: "\"\xed\xa0\x80\"", offset: 1},
		{name: "UTF-8 encoded low surrogate", in: "\"\xed\xbf\xbf\"", offset: 1},
		{name: "above U+10FFFF", in: "\"\xf4\x90\x80\x80\"", offset: 1},
		{name: "after a valid multibyte rune", in: "\"é\xff\"", offset: 3},
		{name: "in a member name", in: "{\"\xff\":1}", offset: 2},
		{name: "in a nested string", in: "[1,{\"a\":\"x\xc3\"}]", offset: 10},
	}
	for _, c := range cases {
		c.want = jsonstrict.ErrInvalidUTF8
		checkRefusal(t, c)
	}
}

func TestLoneSurrogates(t *testing.T) {
	cases := []refusal{
		{name: "high alone", in: `"\ud800"`, offset: 1},
		{name: "low alone", in: `"\udc00"`, offset: 1},
		{name: "high then BMP escape", in: `"\ud800\u0041"`, offset: 1},
		{name: "high then plain char", in: `"\ud800x"`, offset: 1},
		{name: "high then other escape", in: `"\ud800\n"`, offset: 1},
		{name: "high then high", in: `"\ud800\ud800"`, offset: 1},
		{name: "low then high", in: `"\udc00\ud800"`, offset: 1},
		{name: "after text", in: `"ab\uDFFF"`, offset: 3},
		{name: "second of two pairs broken", in: `"\ud83d\ude00\ud83d"`, offset: 13},
		{name: "in a member name", in: `{"\ud800":1}`, offset: 2},
	}
	for _, c := range cases {
		c.want = jsonstrict.ErrLoneSurrogate
		checkRefusal(t, c)
	}
}

func TestSurrogatePairsDecode(t *testing.T) {
	cases := map[string]string{
		`"\ud83d\ude00"`:   "\U0001F600",
		`"\uD83D\uDE00"`:   "\U0001F600",
		`"\ud800\udc00"`:   "\U00010000",
		`"\udbff\udfff"`:   "\U0010FFFF",
		`"a\ud83d\ude00b"`: "a\U0001F600b",
	}
	for in, want := range cases {
		v, err := jsonstrict.Decode([]byte(in), nil)
		if err != nil || v != want {
			t.Errorf("Decode(%s) = %q, %v; want %q", in, v, err, want)
		}
	}
	// As a member name, the pair names the same member as the UTF-8 text.
	v, err := jsonstrict.Decode([]byte(`{"\ud83d\ude00":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(map[string]any)["\U0001F600"]; !ok {
		t.Errorf("member name not decoded to U+1F600: %#v", v)
	}
}

func TestTrailingData(t *testing.T) {
	cases := []refusal{
		{name: "two objects", in: `{} {}`, offset: 3},
		{name: "two numbers", in: `1 2`, offset: 2},
		{name: "garbage after object", in: `{}x`, offset: 2},
		{name: "extra bracket", in: `[]]`, offset: 2},
		{name: "two strings", in: `"a""b"`, offset: 3},
		{name: "comma after value", in: "null,", offset: 4},
		{name: "after whitespace", in: "{}\n\t x", offset: 5},
		{name: "NUL byte", in: "{}\x00", offset: 2},
		{name: "literal run-on", in: `truex`, offset: 4},
	}
	for _, c := range cases {
		c.want = jsonstrict.ErrTrailingData
		checkRefusal(t, c)
	}
	for _, ok := range []string{"{} ", "{}\n", " \t\r\n{}\r\n\t ", "1 ", `"x"` + "\n"} {
		if _, err := jsonstrict.Decode([]byte(ok), nil); err != nil {
			t.Errorf("Decode(%q) = %v, want success (trailing whitespace is allowed)", ok, err)
		}
	}
}

// nestArrays returns n nested arrays: "[[...]]".
func nestArrays(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// nestObjects returns n nested objects {"a":{"a":...{}}}; each level but the
// innermost takes 5 bytes before the next '{'.
func nestObjects(n int) string {
	return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
}

func TestDepth(t *testing.T) {
	for _, limit := range []int{0, 1, 3, 128} {
		var opts *jsonstrict.Options
		max := jsonstrict.DefaultMaxDepth
		if limit != 0 {
			opts = &jsonstrict.Options{MaxDepth: limit}
			max = limit
		}
		name := fmt.Sprintf("limit %d", max)
		for _, d := range []string{nestArrays(max), nestObjects(max)} {
			if _, err := jsonstrict.Decode([]byte(d), opts); err != nil {
				t.Errorf("%s: depth exactly %d refused: %v", name, max, err)
			}
		}
		// The bracket that opens level max+1 is at offset max for arrays and
		// at 5*max for objects.
		checkRefusal(t, refusal{name: name + " arrays", in: nestArrays(max + 1), opts: opts, want: jsonstrict.ErrTooDeep, offset: max})
		checkRefusal(t, refusal{name: name + " objects", in: nestObjects(max + 1), opts: opts, want: jsonstrict.ErrTooDeep, offset: 5 * max})
		// Mixed nesting counts both kinds.
		mixed := strings.Repeat(`[{"a":`, (max+1)/2) + strings.Repeat(`[`, (max+1)%2)
		checkRefusal(t, refusal{name: name + " mixed", in: mixed, opts: opts, want: jsonstrict.ErrTooDeep, offset: anyOffset})
	}
	if jsonstrict.DefaultMaxDepth != 128 {
		t.Errorf("DefaultMaxDepth = %d, want 128 (D3)", jsonstrict.DefaultMaxDepth)
	}
	// Scalars have depth 0: allowed with the smallest limit.
	if _, err := jsonstrict.Decode([]byte(`"x"`), &jsonstrict.Options{MaxDepth: 1}); err != nil {
		t.Errorf("scalar refused with MaxDepth 1: %v", err)
	}
	// Depth is nesting, not breadth: many siblings at depth 2 are fine.
	wide := "[" + strings.Repeat("[],", 1000) + "[]]"
	if _, err := jsonstrict.Decode([]byte(wide), &jsonstrict.Options{MaxDepth: 2}); err != nil {
		t.Errorf("wide document refused: %v", err)
	}
}

// stringOfSize returns a JSON string document of exactly n bytes.
func stringOfSize(n int) []byte {
	b := bytes.Repeat([]byte("a"), n)
	b[0], b[n-1] = '"', '"'
	return b
}

func TestSize(t *testing.T) {
	for _, limit := range []int{0, 2, 100} {
		var opts *jsonstrict.Options
		max := jsonstrict.DefaultMaxBytes
		if limit != 0 {
			opts = &jsonstrict.Options{MaxBytes: limit}
			max = limit
		}
		if _, err := jsonstrict.Decode(stringOfSize(max), opts); err != nil {
			t.Errorf("limit %d: document of exactly %d bytes refused: %v", max, max, err)
		}
		checkRefusal(t, refusal{name: fmt.Sprintf("limit %d", max), in: string(stringOfSize(max + 1)), opts: opts, want: jsonstrict.ErrTooLarge, offset: max})
		// Trailing whitespace counts too: the limit is on the document bytes.
		padded := append(stringOfSize(max), ' ')
		checkRefusal(t, refusal{name: fmt.Sprintf("limit %d padded", max), in: string(padded), opts: opts, want: jsonstrict.ErrTooLarge, offset: max})
	}
	if jsonstrict.DefaultMaxBytes != 4<<20 {
		t.Errorf("DefaultMaxBytes = %d, want 4 MiB", jsonstrict.DefaultMaxBytes)
	}
}

func TestNumberGrammar(t *testing.T) {
	bad := []string{"01", "00", "-01", "1.", "1.e5", ".5", "-", "--1", "-.5", "1e", "1e+", "1E-", "+1",
		"0x10", "NaN", "Infinity", "-Infinity", "1_000", "1.5.2", "1e5.5", "０"}
	for _, n := range bad {
		// Inside an array every one of these is a syntax error; at the top
		// level a valid prefix ("0" of "0x10") may instead leave trailing data.
		checkRefusal(t, refusal{name: "number in array", in: "[" + n + "]", want: jsonstrict.ErrSyntax, offset: anyOffset})
		if _, err := jsonstrict.Decode([]byte(n), nil); err == nil {
			t.Errorf("Decode(%q) accepted an invalid number", n)
		}
	}
	good := []string{"0", "-0", "1E+2", "1e-2", "0.000", "-0.0", "0e0", "123456789012345678901234567890",
		"1e400", "-1e400", "1e-400", "3.141592653589793238462643383279", "0.99999999999999999999", "-1.5E-10"}
	for _, n := range good {
		v, err := jsonstrict.Decode([]byte(n), nil)
		if err != nil {
			t.Errorf("Decode(%q) = %v, want a number", n, err)
			continue
		}
		if v != jsonstrict.Number(n) {
			t.Errorf("Decode(%q) = %#v, want Number with the exact literal", n, v)
		}
		// Inside containers the literal is kept too.
		v, err = jsonstrict.Decode([]byte(`{"n":[`+n+`]}`), nil)
		if err != nil || v.(map[string]any)["n"].([]any)[0] != jsonstrict.Number(n) {
			t.Errorf("nested %q decoded as %#v, %v", n, v, err)
		}
	}
	if s := jsonstrict.Number("1e400").String(); s != "1e400" {
		t.Errorf("Number.String() = %q", s)
	}
}

func TestLiteralGrammar(t *testing.T) {
	for _, in := range []string{"tru", "nul", "fals", "True", "NULL", "nil", "t", "[truee]", "[nulll]", "[f]", "undefined", "'a'"} {
		checkRefusal(t, refusal{name: "literal", in: in, want: jsonstrict.ErrSyntax, offset: anyOffset})
	}
	cases := map[string]any{"true": true, "false": false, "null": nil, " true ": true}
	for in, want := range cases {
		v, err := jsonstrict.Decode([]byte(in), nil)
		if err != nil || v != want {
			t.Errorf("Decode(%q) = %#v, %v; want %#v", in, v, err, want)
		}
	}
}

func TestStructuralSyntax(t *testing.T) {
	bad := []string{"", " ", "\n", "{", "[", "}", "]", `{"a"}`, `{"a" 1}`, `{"a":}`, `{"a":1,}`, `{,}`, `[1,]`, `[,1]`,
		`[1 2]`, `{1:2}`, `{'a':1}`, `{a:1}`, `{"a":1 "b":2}`, `"abc`, `[1,2`, `{"a":1`,
		// Whitespace is only space, tab, LF and CR.
		"\f{}", "\v{}", "\u00a0{}", "[1,\f2]",
		// A byte order mark is not JSON text.
		"\ufeff{}",
		// Comments are not JSON.
		"{} // c", "/* c */ {}",
	}
	for _, in := range bad {
		_, err := jsonstrict.Decode([]byte(in), nil)
		if err == nil {
			t.Errorf("Decode(%q) accepted", in)
			continue
		}
		if !errors.Is(err, jsonstrict.ErrSyntax) && !errors.Is(err, jsonstrict.ErrTrailingData) {
			t.Errorf("Decode(%q) = %v, want a syntax or trailing-data error", in, err)
		}
	}
	// Errors at the end of input point at the end.
	checkRefusal(t, refusal{name: "empty", in: "", want: jsonstrict.ErrSyntax, offset: 0})
	checkRefusal(t, refusal{name: "open array", in: "[1,", want: jsonstrict.ErrSyntax, offset: 3})
	checkRefusal(t, refusal{name: "unexpected byte", in: `[1,?]`, want: jsonstrict.ErrSyntax, offset: 3})
}

func TestControlCharactersInStrings(t *testing.T) {
	for c := 0; c < 0x20; c++ {
		in := "\"a" + string(rune(c)) + "\""
		checkRefusal(t, refusal{name: fmt.Sprintf("control 0x%02x", c), in: in, want: jsonstrict.ErrSyntax, offset: 2})
		checkRefusal(t, refusal{name: fmt.Sprintf("control 0x%02x in name", c), in: "{" + in + ":1}", want: jsonstrict.ErrSyntax, offset: 3})
	}
	// DEL and C1 controls are allowed by RFC 8259.
	for _, in := range []string{"\"\x7f\"", "\"\u0085\"", "\"\u2028\""} {
		v, err := jsonstrict.Decode([]byte(in), nil)
		if err != nil || v != in[1:len(in)-1] {
			t.Errorf("Decode(%q) = %q, %v", in, v, err)
		}
	}
}

func TestEscapes(t *testing.T) {
	in := `"\"\\\/\b\f\n\r\t\u0041\u00e9\u20AC\u0000\u001f\ud83d\ude00"`
	want := "\"\\/\b\f\n\r\tAé€\x00\x1f\U0001F600"
	v, err := jsonstrict.Decode([]byte(in), nil)
	if err != nil || v != want {
		t.Errorf("Decode(%s) = %q, %v; want %q", in, v, err, want)
	}
	// The same escapes in a member name.
	v, err = jsonstrict.Decode([]byte(`{`+in+`:true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := v.(map[string]any); len(m) != 1 || m[want] != true {
		t.Errorf("escaped member name decoded as %#v", v)
	}
	// Each escape alone, so a mix-up of two does not hide.
	singles := map[string]string{`\"`: `"`, `\\`: `\`, `\/`: "/", `\b`: "\b", `\f`: "\f", `\n`: "\n",
		`\r`: "\r", `\t`: "\t", `\u0022`: `"`, `\u005c`: `\`, `\uFFFF`: "\uffff", `\u0080`: "\u0080"}
	for esc, want := range singles {
		v, err := jsonstrict.Decode([]byte(`"x`+esc+`y"`), nil)
		if err != nil || v != "x"+want+"y" {
			t.Errorf("Decode(%q) = %q, %v; want %q", `"x`+esc+`y"`, v, err, "x"+want+"y")
		}
	}
	for _, bad := range []string{`"\x"`, `"\'"`, `"\a"`, `"\U0041"`, `"\u12"`, `"\u12g4"`, `"\u"`, `"\`, `"\u00e"`, `"\ud83d\u"`, `"\ud83d\uzzzz"`} {
		checkRefusal(t, refusal{name: "bad escape", in: bad, want: jsonstrict.ErrSyntax, offset: anyOffset})
	}
}

// toEncodingJSON converts a Decode result to what encoding/json produces
// with UseNumber, so the two decoders can be compared.
func toEncodingJSON(v any) any {
	switch v := v.(type) {
	case jsonstrict.Number:
		return json.Number(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = toEncodingJSON(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = toEncodingJSON(e)
		}
		return out
	}
	return v
}

// validCorpus holds documents both decoders must accept identically.
var validCorpus = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `""`, `"x"`,
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	`[1,-1,1.5,-1.5e10,1E+2,0.000,123456789012345678901234567890,1e400]`,
	` { "sp aces" : [ 1 , 2 ] , "tab\tname" : "v" } `,
	"{\n\t\"a\": [\r\n1]\n}",
	`{"esc":"\"\\\/\b\f\n\r\t\u0041\u00e9\ud83d\ude00\u0000"}`,
	`{"\u00e9":"é","😀":"\ud83d\ude00","":"empty name"}`,
	`[[[[[[[[[[{}]]]]]]]]]]`,
	`[{"a":{"a":{"a":[]}}},{"a":null}]`,
	`{"tool":"deploy","args":{"service":"api","replicas":3,"options":[{"label":"x","value":1},{"label":"y","value":"z"}]}}`,
	`"日本語テキスト"`,
	`{"a":"\u2028\u2029"}`,
}

func TestAgreesWithEncodingJSON(t *testing.T) {
	big := `{` + strings.Join(members(40), ",") + `}`
	for _, doc := range append(validCorpus, big) {
		got, err := jsonstrict.Decode([]byte(doc), nil)
		if err != nil {
			t.Errorf("Decode(%q) = %v", doc, err)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json refused corpus document %q: %v", doc, err)
		}
		if g := toEncodingJSON(got); !reflect.DeepEqual(g, want) {
			t.Errorf("Decode(%q) = %#v, encoding/json = %#v", doc, g, want)
		}
	}
}

func TestDocNavigation(t *testing.T) {
	var p jsonstrict.Parser
	d, err := p.Parse([]byte(`{"a":[1,"x\n"],"b":null}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Tape: 0 object, 1 "a", 2 array, 3 1, 4 "x\n", 5 "b", 6 null.
	type want struct {
		kind  jsonstrict.Kind
		next  int
		count int
	}
	wants := []want{{jsonstrict.KindObject, 7, 2}, {jsonstrict.KindString, 2, -1}, {jsonstrict.KindArray, 5, 2},
		{jsonstrict.KindNumber, 4, -1}, {jsonstrict.KindString, 5, -1}, {jsonstrict.KindString, 6, -1}, {jsonstrict.KindNull, 7, -1}}
	for i, w := range wants {
		if d.Kind(i) != w.kind || d.Next(i) != w.next || (w.count >= 0 && d.Count(i) != w.count) {
			t.Errorf("node %d: kind %v next %d count %d; want %v %d %d", i, d.Kind(i), d.Next(i), d.Count(i), w.kind, w.next, w.count)
		}
	}
	if d.Str(1) != "a" || d.Str(5) != "b" || string(d.Raw(3)) != "1" {
		t.Errorf("names/number: %q %q %q", d.Str(1), d.Str(5), d.Raw(3))
	}
	if string(d.Raw(4)) != `x\n` || d.Str(4) != "x\n" {
		t.Errorf("string node: Raw %q Str %q; want raw text with the escape and unescaped text", d.Raw(4), d.Str(4))
	}
	if d.Kind(0).String() != "object" || jsonstrict.KindTrue.String() != "boolean" {
		t.Errorf("Kind.String: %v %v", d.Kind(0), jsonstrict.KindTrue)
	}
}

func TestParserReuse(t *testing.T) {
	var p jsonstrict.Parser
	first := `{"name":"first","items":[1,2,3],"nested":{"k":"\u0076"}}`
	second := `["second",{"name":true}]`
	d, err := p.Parse([]byte(first), nil)
	if err != nil {
		t.Fatal(err)
	}
	v1 := d.Value(0)
	want1 := map[string]any{"name": "first", "items": []any{jsonstrict.Number("1"), jsonstrict.Number("2"), jsonstrict.Number("3")},
		"nested": map[string]any{"k": "v"}}
	if !reflect.DeepEqual(v1, want1) {
		t.Fatalf("first parse = %#v", v1)
	}
	d, err = p.Parse([]byte(second), nil)
	if err != nil {
		t.Fatal(err)
	}
	want2 := []any{"second", map[string]any{"name": true}}
	if v2 := d.Value(0); !reflect.DeepEqual(v2, want2) {
		t.Errorf("second parse = %#v", v2)
	}
	// Values already built do not share the reused tape.
	if !reflect.DeepEqual(v1, want1) {
		t.Errorf("first value changed after reuse: %#v", v1)
	}
	// A failed parse (in the middle of an object with names) leaves nothing
	// behind: the same names parse cleanly next, with no false duplicate.
	if _, err := p.Parse([]byte(`{"a":1,"b":{"c":`), nil); err == nil {
		t.Fatal("truncated document accepted")
	}
	if _, err := p.Parse([]byte(`{"a":1,"b":2,"c":3}`), nil); err != nil {
		t.Errorf("parse after a failed parse: %v", err)
	}
	big := `{` + strings.Join(members(30), ",") + `,"k07":0}`
	if _, err := p.Parse([]byte(big), nil); !errors.Is(err, jsonstrict.ErrDuplicateName) {
		t.Errorf("large duplicate after reuse: %v", err)
	}
	if _, err := p.Parse([]byte(`{`+strings.Join(members(30), ",")+`}`), nil); err != nil {
		t.Errorf("large object after a failed large parse: %v", err)
	}
	// Options apply per call, not per Parser.
	if _, err := p.Parse([]byte(nestArrays(3)), &jsonstrict.Options{MaxDepth: 2}); !errors.Is(err, jsonstrict.ErrTooDeep) {
		t.Errorf("MaxDepth 2: %v", err)
	}
	if _, err := p.Parse([]byte(nestArrays(3)), nil); err != nil {
		t.Errorf("default depth after a lower limit: %v", err)
	}
}

// kilobyteDoc is a realistic ~1 KB tool-call document: nested objects and
// arrays, escaped strings and names, numbers, and one object of more than 16
// members (the sorted duplicate check).
func kilobyteDoc() []byte {
	var b strings.Builder
	b.WriteString(`{"tool":"deploy","request_id":"7f9c2b1e-\u0041bc","dry_run":false,"note":null,`)
	b.WriteString(`"args":{"service":"api-gateway","replicas":3,"ratio":0.75,"big":123456789012345678901234567890,`)
	b.WriteString(`"labels":{"team":"core","tier":"web","caf\u00e9":"ok"},`)
	b.WriteString(`"options":[`)
	for i := range 8 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"label":"option \"%d\"","value":%d,"enabled":true,"tags":["a","b\n","c"]}`, i, i*10)
	}
	b.WriteString(`]},"wide":{` + strings.Join(members(20), ",") + `}}`)
	return []byte(b.String())
}

func TestWarmParseDoesNotAllocate(t *testing.T) {
	doc := kilobyteDoc()
	if len(doc) < 900 || len(doc) > 1300 {
		t.Fatalf("test document is %d bytes, want about 1 KB", len(doc))
	}
	var p jsonstrict.Parser
	for range 3 {
		if _, err := p.Parse(doc, nil); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.Parse(doc, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("warm Parse of a %d-byte document: %v allocations per run, want 0", len(doc), allocs)
	}
}

func BenchmarkParseKilobyte(b *testing.B) {
	doc := kilobyteDoc()
	var p jsonstrict.Parser
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Parse(doc, nil); err != nil {
			b.Fatal(err)
		}
	}
}
