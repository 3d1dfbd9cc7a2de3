package server

import (
	"encoding/json"
	"reflect"
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
