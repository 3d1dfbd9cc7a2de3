package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestTextResultMatchesSDK: the fast reading of a text-only result is the
// value the SDK's own decoding gives, and what it does not take is left to
// the SDK (or refused as the SDK refuses it).
func TestTextResultMatchesSDK(t *testing.T) {
	for _, tc := range []struct {
		result string
		fast   bool // textResult takes it
	}{
		{`{"content":[{"type":"text","text":"Echo: hi"}],"isError":false}`, true},
		{`{"content":[],"isError":true}`, true},
		{`{"content":[{"text":"a\nb \"q\" \\ \/","type":"text"},{"type":"text","text":"é 😀"}],"structuredContent":{"x":[1,2.50]}}`, true},
		{`{"content":[{"type":"text","text":""}],"isError":null,"structuredContent":null}`, true},
		{`{"content":[{"type":"text","text":"\u00e9\ud800"}]}`, false},
		{`{"content":[{"type":"text","text":"x","_meta":{"a":1}}]}`, false},
		{`{"content":[{"type":"text","text":"x","annotations":{"priority":0.5}}]}`, false},
		{`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`, false},
		{`{"content":[{"type":"text","Text":"x"}]}`, false},
		{`{"content":[{"type":"text","text":"x","text":"y"}]}`, false},
		{`{"content":[{"type":"text","text":"x"}],"_meta":{"k":"v"}}`, false},
		{`{"content":[{"type":"text","text":"x"}],"isError":"yes"}`, false},
		{`{"content":[{"type":"text","text":5}]}`, false},
		// A repeated member: its last value, as encoding/json reads it.
		{`{"content":[{"type":"text","text":"first"}],"isError":true,"content":[{"type":"text","text":"last"}],"isError":false}`, true},
	} {
		var members map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.result), &members); err != nil {
			t.Fatal(err)
		}
		fast := textResult(members)
		if (fast != nil) != tc.fast {
			t.Errorf("%s: textResult took it: %v, want %v", tc.result, fast != nil, tc.fast)
		}
		want := sdkResult(json.RawMessage(tc.result), members)
		if fast != nil && !reflect.DeepEqual(fast, want) {
			t.Errorf("%s:\n fast %#v\n sdk  %#v", tc.result, fast, want)
		}
		if got := passThrough(json.RawMessage(tc.result)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: passThrough %#v, want the SDK's %#v", tc.result, got, want)
		}
	}
}

// resultMembers splits a result object as json.Unmarshal into a map does,
// whichever way it takes (repeated and escaped names, values kept byte for
// byte, what is not an object refused).
func TestResultMembersMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"content":[{"type":"text","text":"x"}],"isError":false}`,
		` { "content" : [ ] , "structuredContent" : { "n" : 1.50 } } `,
		`{"con\u0074ent":[],"a":1,"a":2}`,
		`{"\ud800":1,"\ud83d\ude00":2}`,
		"{\"a\xffb\":1}",
		`{}`,
		`{"content":[1,2,]}`,
		`{"content":[]} {}`,
		`null`,
		// Deeper than jsonstrict's default limit: encoding/json's reading.
		`{"content":[],"structuredContent":{"d":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
	} {
		got, ok := resultMembers(json.RawMessage(in))
		var want map[string]json.RawMessage
		werr := json.Unmarshal([]byte(in), &want)
		if ok != (werr == nil && want != nil) {
			t.Errorf("%s: taken %v, encoding/json: %v", in, ok, werr)
			continue
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", in, got, want)
		}
	}
}
