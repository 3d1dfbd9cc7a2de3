package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMembersKeepsCarriedBytes(t *testing.T) {
	// The carried schema has a duplicate member, a lone surrogate and
	// invalid UTF-8: none is the envelope's business.
	schema := "{\"type\":\"object\",\"type\":\"object\", \"d\":\"\\ud800\", \"e\":\"\xff\"}"
	line := `{"id": 7, "schema":` + schema + ` , "i\u0064":null}`
	ms, err := Members([]byte(line), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{"id", []byte("7")}, {"schema", []byte(schema)}, {"id", []byte("null")}}
	if len(ms) != len(want) {
		t.Fatalf("members %q", ms)
	}
	for i := range want {
		if ms[i].Name != want[i].Name || !bytes.Equal(ms[i].Raw, want[i].Raw) {
			t.Errorf("member %d = %q %q, want %q %q", i, ms[i].Name, ms[i].Raw, want[i].Name, want[i].Raw)
		}
	}
	els, err := Elements([]byte(` [ 1 , {"a":[]} , "x" ] `), nil)
	if err != nil || len(els) != 3 || string(els[1]) != `{"a":[]}` {
		t.Errorf("Elements = %q, %v", els, err)
	}
}

func TestEnvelopeRefusals(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want error
	}{
		{`[1]`, ErrKind},
		{`"x"`, ErrKind},
		{`{"a":1} {}`, ErrTrailingData},
		{`{"a":1,}`, ErrSyntax},
		{`{"a" 1}`, ErrSyntax},
		{`{"a":[1,]}`, ErrSyntax},
		{`{"a":"\x"}`, ErrSyntax},
		{"{\"a\":\"\x01\"}", ErrSyntax},
		{`{"a":tru}`, ErrSyntax},
		{`{"a":01}`, ErrSyntax},
		{"{\"\xff\":1}", ErrInvalidUTF8}, // the envelope's own names are strict
		{`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, ErrTooDeep},
		{``, ErrSyntax},
	} {
		if _, err := Members([]byte(tc.doc), nil); !errors.Is(err, tc.want) {
			t.Errorf("Members(%q) = %v, want %v", tc.doc, err, tc.want)
		}
	}
	if _, err := Elements([]byte(`{}`), nil); !errors.Is(err, ErrKind) {
		t.Errorf("Elements of an object: %v", err)
	}
	if _, err := Members([]byte(`{"a":1}`), &Options{MaxBytes: 3}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxBytes: %v", err)
	}
}

// SyntaxKind accepts exactly what encoding/json's syntax check accepts
// (which judges neither UTF-8 nor surrogates nor duplicates), and Members
// and Elements return values that are each valid on their own.
func FuzzSyntaxKind(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,2,{"b":null}]}`, `"\ud800"`, "\"\xff\"", `{"a":1,"a":2}`, `-0.5e+3`, `[1,]`, `{"a"}`, ` true `, `nul`} {
		f.Add([]byte(s))
	}
	opts := &Options{MaxDepth: 10000, MaxBytes: 1 << 30}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := SyntaxKind(data, opts)
		if (err == nil) != json.Valid(data) {
			t.Fatalf("SyntaxKind(%q) = %v, json.Valid = %v", data, err, json.Valid(data))
		}
		if err != nil {
			return
		}
		if ms, err := Members(data, opts); err == nil {
			for _, m := range ms {
				if !json.Valid(m.Raw) {
					t.Fatalf("member %q of %q is not valid: %q", m.Name, data, m.Raw)
				}
			}
		}
		if els, err := Elements(data, opts); err == nil {
			for _, e := range els {
				if !json.Valid(e) {
					t.Fatalf("element of %q is not valid: %q", data, e)
				}
			}
		}
	})
}

// Compact says of a valid JSON document exactly whether encoding/json's
// Compact would leave it as it is.
func TestCompactAsEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`, `{"a":1}`, `{ "a":1}`, `{"a":1} `, `{"a":"x y\n"}`, `["\"", " "]`, `["\\", 1]`,
		`["\\\"  "]`, "[\"\t\"]", "[1,\n2]", `"a b"`, `true`, ` 1`,
	} {
		f := func(doc string) {
			var buf bytes.Buffer
			if err := json.Compact(&buf, []byte(doc)); err != nil {
				return // not JSON: Compact's answer is not specified
			}
			if got, want := Compact([]byte(doc)), buf.String() == doc; got != want {
				t.Errorf("Compact(%q) = %v, encoding/json's Compact leaves it as it is: %v", doc, got, want)
			}
		}
		f(doc)
	}
}

func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{"a":[1, 2]}`, `"x\" y"`, `[ ]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var buf bytes.Buffer
		if json.Compact(&buf, doc) != nil {
			return
		}
		if got, want := Compact(doc), bytes.Equal(buf.Bytes(), doc); got != want {
			t.Errorf("Compact(%q) = %v, encoding/json's Compact leaves it as it is: %v", doc, got, want)
		}
	})
}
