package draft2020

import (
	"testing"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/inputschema"
)

// BenchmarkValidate measures one call's validation on the read tool's
// schema: strict decoding, conversion and the library, for valid and invalid
// arguments, with the subset validator on the same input for scale.
func BenchmarkValidate(b *testing.B) {
	tool, ok := schemas.Lookup("read")
	if !ok {
		b.Fatal("no read tool")
	}
	full, err := Compile(tool.InputSchema, nil)
	if err != nil {
		b.Fatal(err)
	}
	subset, err := inputschema.Compile(tool.InputSchema, nil)
	if err != nil {
		b.Fatal(err)
	}
	valid := []byte(`{"path":"internal/jsonstrict/parser.go","offset":120,"limit":80}`)
	invalid := []byte(`{"path":7,"offset":0,"limit":1.5,"mode":"fast"}`)
	for _, c := range []struct {
		name string
		v    interface{ ValidateJSONAll([]byte) error }
		args []byte
		ok   bool
	}{
		{"draft2020/valid", full, valid, true},
		{"draft2020/invalid", full, invalid, false},
		{"subset/valid", subset, valid, true},
		{"subset/invalid", subset, invalid, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.args)))
			for b.Loop() {
				if err := c.v.ValidateJSONAll(c.args); (err == nil) != c.ok {
					b.Fatalf("verdict: %v", err)
				}
			}
		})
	}
}
