package canonjson_test

import (
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
	}
}
