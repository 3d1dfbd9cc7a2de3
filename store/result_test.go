package store

import (
	"errors"
	"fmt"
	"testing"
)

func TestResultRoundTripKeepsBytes(t *testing.T) {
	for _, content := range []string{
		`{ "z": [1, 2.50, "x"],  "a": {"b" : null} }`,
		`"<tag> & \u00e9"`,
		`null`,
		`[]`,
	} {
		for _, isErr := range []bool{false, true} {
			b := EncodeResult(Result{IsError: isErr, Content: []byte(content)})
			if want := fmt.Sprintf(`{"is_error":%t,"content":%s}`, isErr, content); string(b) != want {
				t.Errorf("EncodeResult = %s, want the journal's format %s", b, want)
			}
			r, err := DecodeResult(b)
			if err != nil {
				t.Fatalf("DecodeResult(%s): %v", b, err)
			}
			if string(r.Content) != content || r.IsError != isErr {
				t.Errorf("round trip of %s (is_error %v) = %s, %v", content, isErr, r.Content, r.IsError)
			}
		}
	}
}

func TestDecodeResultRefusesOtherBytes(t *testing.T) {
	for _, b := range []string{``, `{`, `[]`, `{"content":1}`, `{"is_error":false}`, `"x"`, `{"is_error":"no","content":1}`} {
		if _, err := DecodeResult([]byte(b)); !errors.Is(err, ErrUnreadableResult) {
			t.Errorf("DecodeResult(%q) = %v, want ErrUnreadableResult", b, err)
		}
	}
}

func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"is_error":false,"content":{"a":1}}`))
	f.Add([]byte(`{"is_error":true,"content":"x"}`))
	f.Add([]byte(`{"content":null,"is_error":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		r2, err := DecodeResult(EncodeResult(r))
		if err != nil || string(r2.Content) != string(r.Content) || r2.IsError != r.IsError {
			t.Fatalf("re-encoding %q: %v %q", b, err, r2.Content)
		}
	})
}
