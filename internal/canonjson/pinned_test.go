package canonjson_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// pinnedDigests are digests as the code before the one-parse path
// computed them (jsonstrict.Decode, then DigestValue), run once and
// written down here: approvals and idempotency keys stored under them
// must still match, so no rewrite of how the digest is computed may
// change one. The documents cover what the canonical form folds (member
// order, whitespace, escapes), what it keeps (number literals as
// written), name order by UTF-16 code units (U+FFFF sorts after
// U+1F600's surrogates), control characters, nesting and every kind.
var pinnedDigests = []struct{ doc, digest string }{
	{`{}`, "v2:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
	{`{"text":"hello"}`, "v2:cbbbdcd27692344de5dbab3abcaba413fb0f45307267de7081401576df1cb176"},
	{` { "b" : 2 , "a" : [ 1 , 2.50 , -0 , 1e21 , 1E+2 ] } `, "v2:34a4bb7fe4bc419d9d0557a8bc49c0dd6a027d032cdcf95c7cf39b7e5e679fd6"},
	{`{"a":[1,2.50,-0,1e21,1E+2],"b":2}`, "v2:34a4bb7fe4bc419d9d0557a8bc49c0dd6a027d032cdcf95c7cf39b7e5e679fd6"},
	{`{"\u0041":"\u00e9\n\t\"\\\/","a":"é"}`, "v2:668eb3e073487547c06a267ba13c1ab54eeb762e6623d505fbdcaea9d193081d"},
	{`{"\uffff":1,"\ud83d\ude00":2,"z":3,"":4}`, "v2:5831bb3da625ec191307b716945ed6ea1c907c6bcdcc266a6d15e6ee987e5e9a"},
	{`{"ctl":"\u0000\u001f\b\f\r","nul":null,"t":true,"f":false}`, "v2:2098266f67b8776e58288f68f2033a724e02fd715061c06490b6c03db465dd35"},
	{`{"deep":{"x":[{"y":[[],{}]}],"n":9007199254740993},"big":1234567890123456789012345678901234567890}`, "v2:e6c93ee3a1c1295419c2fd7c5a66ef39aac19861185d87b0885837a86a2e1560"},
	{`{"path":"/etc/passwd","command":"rm -rf / && echo <b>&amp;</b>","u":"\u2028\u2029"}`, "v2:50308bf4d95081e0a2060284829c87993644766e008236856f3df4ff4df420a0"},
	{`{"k":"\ud834\udd1e","arr":["a",1,true,null,{"q":0.1e-5}]}`, "v2:07aaac8af4a731a47eb412412fb678744fe249ab19a497b9fae1f34d43bc8927"},
}

func TestPinnedDigests(t *testing.T) {
	for _, p := range pinnedDigests {
		v, err := jsonstrict.Decode([]byte(p.doc), nil)
		if err != nil {
			t.Fatalf("%s: %v", p.doc, err)
		}
		got, err := canonjson.DigestValue(v)
		if err != nil {
			t.Fatalf("%s: %v", p.doc, err)
		}
		if got != p.digest {
			t.Errorf("DigestValue(%s) = %s, pinned %s", p.doc, got, p.digest)
		}
		if got, err := canonjson.Digest([]byte(p.doc)); err != nil || got != p.digest {
			t.Errorf("Digest(%s) = %s, %v; pinned %s", p.doc, got, err, p.digest)
		}
		var parser jsonstrict.Parser
		doc, err := parser.Parse([]byte(p.doc), nil)
		if err != nil {
			t.Fatalf("%s: %v", p.doc, err)
		}
		if got, err := canonjson.DigestDoc(doc); err != nil || got != p.digest {
			t.Errorf("DigestDoc(%s) = %s, %v; pinned %s", p.doc, got, err, p.digest)
		}
	}
}

// DigestDoc, from the parse, gives DigestValue's digest of the decoded
// value (and AppendDoc Append's text) for generated documents of every
// kind: escaped and non-ASCII names (sorted by UTF-16 code units),
// escapes in strings, number literals of every form, deep nesting.
func TestDigestDocMatchesDigestValue(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 1))
	var parser jsonstrict.Parser
	for n := 0; n < 3000; n++ {
		var b strings.Builder
		randomDoc(r, &b, 0)
		data := []byte(b.String())
		v, err := jsonstrict.Decode(data, nil)
		if err != nil {
			t.Fatalf("generated %s: %v", data, err)
		}
		want, err := canonjson.DigestValue(v)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		doc, err := parser.Parse(data, nil)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if got, err := canonjson.DigestDoc(doc); err != nil || got != want {
			t.Fatalf("DigestDoc(%s) = %s, %v; DigestValue %s", data, got, err, want)
		}
		wantText, _ := canonjson.Append(nil, v)
		if gotText, err := canonjson.AppendDoc(nil, doc, 0); err != nil || string(gotText) != string(wantText) {
			t.Fatalf("AppendDoc(%s) = %s, %v; Append %s", data, gotText, err, wantText)
		}
	}
}

// A parsed document's digest allocates only its result once warm.
func TestDigestDocAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocation counts mean nothing under it")
	}
	data := []byte(`{"text":"hello \u00e9","b":[1,2.5,{"z":null,"\u0041":true}],"a":"x"}`)
	var parser jsonstrict.Parser
	doc, err := parser.Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	canonjson.DigestDoc(doc)
	if n := testing.AllocsPerRun(100, func() { canonjson.DigestDoc(doc) }); n > 3 {
		t.Errorf("DigestDoc allocates %v times per digest, want at most 3 (the hex and the string)", n)
	}
}

var docNames = []string{"a", "b", "z", "", "A", "é", "\\u00e9", "\\ud83d\\ude00", "\\uffff", "\\u0041", "a\\nb", "ключ", "\\\"q"}
var docStrings = []string{"", "hello", "\\u0000\\u001f", "\\b\\f\\n\\r\\t", "\\\"\\\\\\/", "<&>", "\\u2028", "é", "\\ud834\\udd1e", "日本"}
var docNumbers = []string{"0", "-0", "1", "1.0", "1.50", "1e21", "1E+2", "-1.5e-7", "9007199254740993", "123456789012345678901234567890", "0.1e-5"}

// randomDoc writes a random JSON document, an object at depth 0.
func randomDoc(r *rand.Rand, b *strings.Builder, depth int) {
	kind := r.IntN(7)
	if depth == 0 {
		kind = 6
	} else if depth > 5 {
		kind = r.IntN(4)
	}
	switch kind {
	case 0:
		b.WriteString([]string{"null", "true", "false"}[r.IntN(3)])
	case 1, 2:
		b.WriteString(docNumbers[r.IntN(len(docNumbers))])
	case 3:
		b.WriteString(`"` + docStrings[r.IntN(len(docStrings))] + `"`)
	case 4, 5:
		b.WriteString("[ ")
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(" , ")
			}
			randomDoc(r, b, depth+1)
		}
		b.WriteString("]")
	default:
		b.WriteString("{")
		used := map[string]bool{}
		first := true
		for range r.IntN(6) {
			name := docNames[r.IntN(len(docNames))]
			if r.IntN(3) == 0 {
				name += strconv.Itoa(r.IntN(3))
			}
			if used[unescapedName(name)] {
				continue // a duplicate name: strict decoding refuses it
			}
			used[unescapedName(name)] = true
			if !first {
				b.WriteString(",")
			}
			first = false
			b.WriteString(`"` + name + `": `)
			randomDoc(r, b, depth+1)
		}
		b.WriteString("}")
	}
}

// unescapedName is the name the document text name stands for, as far as
// docNames' escapes go: "A" and "\u0041" are one name.
func unescapedName(name string) string {
	v, err := jsonstrict.Decode([]byte(`"`+name+`"`), nil)
	if err != nil {
		return name
	}
	return v.(string)
}
